package loader

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cacheagent/cacheagent/object"
)

// manifestRows is the key of a shard's row count in a manifest.
const manifestRows = "rows"

// manifest is the JSON form of a dataset.
type manifest struct {
	Arrays []string                     `json:"arrays"`
	Shards []map[string]json.RawMessage `json:"shards"`
}

// ParseManifest parses a dataset manifest:
//
//	{
//	  "arrays": ["x", "y"],
//	  "shards": [
//	    {"x": "gs://b/train/shard-0000.x.npy", "y": "gs://b/train/shard-0000.y.npy", "rows": 4096},
//	    {"x": "gs://b/train/shard-0001.x.npy#1700000000000000", "y": "gs://b/train/shard-0001.y.npy"}
//	  ]
//	}
//
// Each shard names one object per array; "#generation" pins a version.
// "rows" is optional: Resolve reads unknown row counts (and the specs) from
// the headers, and the loader checks given ones when it opens the shard.
// Unknown keys, missing arrays and malformed URIs are errors wrapping
// ErrManifest; the result is checked with Dataset.Validate.
func ParseManifest(b []byte) (Dataset, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m manifest
	if err := dec.Decode(&m); err != nil {
		return Dataset{}, fmt.Errorf("%w: %w", ErrManifest, err)
	}
	if dec.More() {
		return Dataset{}, fmt.Errorf("%w: data after the manifest object", ErrManifest)
	}
	for _, n := range m.Arrays {
		if n == manifestRows {
			return Dataset{}, fmt.Errorf("%w: an array may not be named %q", ErrManifest, manifestRows)
		}
	}
	d := Dataset{Names: m.Arrays, Groups: make([]Group, len(m.Shards))}
	for i, sh := range m.Shards {
		g, err := parseShard(m.Arrays, sh)
		if err != nil {
			return Dataset{}, fmt.Errorf("%w: shard %d: %w", ErrManifest, i, err)
		}
		d.Groups[i] = g
	}
	if err := d.Validate(); err != nil {
		return Dataset{}, err
	}
	return d, nil
}

// parseShard parses one shard object of a manifest.
func parseShard(names []string, sh map[string]json.RawMessage) (Group, error) {
	g := Group{Objects: make([]object.Object, len(names))}
	for k, v := range sh {
		if k == manifestRows {
			if err := json.Unmarshal(v, &g.Rows); err != nil || g.Rows < 0 {
				return Group{}, fmt.Errorf("rows %s: want a non-negative integer", v)
			}
			continue
		}
		j := -1
		for i, n := range names {
			if n == k {
				j = i
			}
		}
		if j < 0 {
			return Group{}, fmt.Errorf("unknown key %q (arrays are %q)", k, names)
		}
		var uri string
		if err := json.Unmarshal(v, &uri); err != nil {
			return Group{}, fmt.Errorf("array %s: want a gs:// URI string: %w", k, err)
		}
		o, err := object.ParseObject(uri)
		if err != nil {
			return Group{}, fmt.Errorf("array %s: %w", k, err)
		}
		g.Objects[j] = o
	}
	for j, o := range g.Objects {
		if o.Name == "" {
			return Group{}, fmt.Errorf("no object for array %s", names[j])
		}
	}
	return g, nil
}
