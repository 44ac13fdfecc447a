package daemon

import (
	"fmt"

	"github.com/cacheagent/cacheagent/checkpoint"
)

// CheckpointConfig tunes checkpoint saves (`cacheagent checkpoint`, the
// Python client's cacheagent.checkpoint): the checkpoint: section. Changes
// need a restart.
type CheckpointConfig struct {
	// Connections is the uploads' budget of concurrent requests, apart
	// from the reads' (fetch.connections): readers never wait for an
	// upload's connection. Default 16.
	Connections int `yaml:"connections"`
	// PartSize: files larger are uploaded as parts of at most this size
	// in parallel (up to 32; larger parts past that) and composed.
	// Default 32MiB.
	PartSize Size `yaml:"part_size"`
	// KeepLocal is how many newest committed checkpoints of each run (the
	// checkpoint prefix's parent) stay pinned in the cache. Default 2;
	// negative pins none.
	KeepLocal int `yaml:"keep_local"`
	// Replicas is how many other fleet members hold a verified copy of a
	// save before it is durable at "peers". Default 1; negative: none (no
	// replicas, and "peers" durability is refused). Fleet mode only.
	Replicas int `yaml:"replicas"`
}

// check validates the section.
func (c CheckpointConfig) check() *fieldError {
	bad := func(msg, key string) *fieldError { return &fieldError{path: []string{"checkpoint", key}, msg: msg} }
	switch {
	case c.Connections < 0 || c.Connections > 1024:
		return bad(fmt.Sprintf("%d is out of range [1, 1024]", c.Connections), "connections")
	case c.PartSize < 0 || (c.PartSize > 0 && c.PartSize < 1<<20) || c.PartSize > 5<<30:
		return bad(fmt.Sprintf("%s is out of range [1MiB, 5GiB]", c.PartSize), "part_size")
	case c.Replicas > 16:
		return bad(fmt.Sprintf("%d is out of range [1, 16] (negative: none)", c.Replicas), "replicas")
	}
	return nil
}

// store returns the checkpoint store's settings for the section (the
// parts the daemon supplies aside).
func (c CheckpointConfig) store() checkpoint.Config {
	replicas := c.Replicas
	if replicas == 0 {
		replicas = 1
	}
	return checkpoint.Config{Connections: c.Connections, PartSize: int64(c.PartSize), KeepLocal: c.KeepLocal,
		Replicas: max(replicas, 0)}
}
