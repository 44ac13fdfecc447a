package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// TestReplicaRefusals feeds a replica bad input: a manifest that is not
// one (or names escaping its prefix), files of the wrong length or bytes,
// an index out of range, a completion before every file is here. Each is
// refused with its sentinel, and a good replica is held after them; one
// cut short does not survive a restart.
func TestReplicaRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	data := []byte("replica bytes")
	m := Manifest{Format: manifestFormat, URI: "gs://" + testBucket + "/run/step-9/", Save: "51", Node: "node-b",
		Files: []File{{Name: "model.pt", Size: int64(len(data)), CRC32C: crc32.Checksum(data, castagnoli)}}}
	enc := func(m Manifest) []byte {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bad := m
	bad.Files = []File{{Name: "../escape", Size: 1}}
	if err := e.store.ReplicaBegin(ctx, "../51", enc(m)); !errors.Is(err, ErrManifest) {
		t.Errorf("a save id escaping the store: %v; want ErrManifest", err)
	}
	for name, b := range map[string][]byte{
		"not json":     []byte("{"),
		"wrong id":     enc(Manifest{Format: manifestFormat, URI: m.URI, Save: "0be"}),
		"escape":       enc(bad),
		"wrong format": enc(Manifest{Format: "x", URI: m.URI, Save: "51"}),
	} {
		if err := e.store.ReplicaBegin(ctx, "51", b); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: ReplicaBegin = %v; want ErrManifest", name, err)
		}
	}
	if err := e.store.ReplicaFile("51", 0, bytes.NewReader(data)); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("a file before the replica began: %v; want ErrNoCheckpoint", err)
	}
	if err := e.store.ReplicaBegin(ctx, "51", enc(m)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ReplicaComplete("51", []string{"node-a"}); !errors.Is(err, ErrManifest) {
		t.Errorf("complete without the file: %v; want ErrManifest", err)
	}
	for name, c := range map[string]struct {
		i    int
		body []byte
		want error
	}{
		"short":    {0, data[:3], object.ErrShortRead},
		"long":     {0, append(bytes.Clone(data), 'x'), object.ErrShortRead},
		"flipped":  {0, []byte(strings.ToUpper(string(data))), object.ErrChecksum},
		"no index": {1, data, ErrManifest},
	} {
		if err := e.store.ReplicaFile("51", c.i, bytes.NewReader(c.body)); !errors.Is(err, c.want) {
			t.Errorf("%s: ReplicaFile = %v; want %v", name, err, c.want)
		}
	}
	// Cut short here: a restart drops it (the saver sends it again).
	e.store.Close()
	e.open()
	if err := e.store.ReplicaFile("51", 0, bytes.NewReader(data)); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("a replica cut short survived a restart: %v", err)
	}
	if err := e.store.ReplicaBegin(ctx, "51", enc(m)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ReplicaFile("51", 0, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ReplicaComplete("51", []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	st := e.store.Status(object.URI{})
	if len(st) != 1 || st[0].State != Replica {
		t.Fatalf("status %+v; want one replica", st)
	}
	// Complete, it survives a restart, then is dropped.
	e.store.Close()
	e.open()
	if st := e.store.Status(object.URI{}); len(st) != 1 || st[0].State != Replica {
		t.Fatalf("after a restart, status %+v; want the replica", st)
	}
	if err := e.store.ReplicaDrop("51"); err != nil {
		t.Fatal(err)
	}
	if st := e.store.Status(object.URI{}); len(st) != 0 {
		t.Errorf("after the drop, status %+v; want none", st)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.Dir, "saves", "51")); !os.IsNotExist(err) {
		t.Errorf("the dropped replica's directory remains (%v)", err)
	}
}
