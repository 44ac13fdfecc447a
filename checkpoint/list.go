package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// ReadManifest reads and parses the manifest of the checkpoint at prefix
// u: ErrNoCheckpoint if there is none (not committed, or no such prefix).
func ReadManifest(ctx context.Context, src object.Source, u object.URI) (*Manifest, error) {
	u, err := checkPrefix(u)
	if err != nil {
		return nil, err
	}
	o := object.Object{Bucket: u.Bucket, Name: u.Path + ManifestName}
	a, err := src.Stat(ctx, o)
	if errors.Is(err, object.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s has no %s", ErrNoCheckpoint, u, ManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return readManifest(ctx, src, a, u)
}

// readManifest reads the manifest object a of the checkpoint at u.
func readManifest(ctx context.Context, src object.Source, a object.Attrs, u object.URI) (*Manifest, error) {
	if a.Size > maxManifest {
		return nil, fmt.Errorf("%w: %s is %d bytes", ErrManifest, a.Object, a.Size)
	}
	r, err := src.NewRangeReader(ctx, a.Object, 0, a.Size)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", a.Object, err)
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, a.Size+1))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read %s: %w", a.Object, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", a.Object, err)
	}
	if m.URI != u.String() {
		return nil, fmt.Errorf("%w: %s says it is the manifest of %s", ErrManifest, a.Object, m.URI)
	}
	return m, nil
}

// Check reports ErrMismatch unless every file of m is its object at the
// generation, size and CRC32C the manifest gives: attrs holds the
// objects' attributes by name when a listing gave them; the others are
// stat'ed.
func Check(ctx context.Context, src object.Source, m *Manifest, attrs map[string]object.Attrs) error {
	u, _ := object.ParsePrefix(m.URI)
	for _, f := range m.Files {
		name := u.Path + f.Name
		a, ok := attrs[name]
		if !ok || a.Generation != f.Generation {
			var err error
			a, err = src.Stat(ctx, object.Object{Bucket: u.Bucket, Name: name, Generation: f.Generation})
			if errors.Is(err, object.ErrNotFound) {
				return fmt.Errorf("%w: %s: gs://%s/%s#%d is gone", ErrMismatch, m.URI, u.Bucket, name, f.Generation)
			}
			if err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
		if a.Generation != f.Generation || a.Size != f.Size || (a.HasCRC32C && a.CRC32C != f.CRC32C) {
			return fmt.Errorf("%w: %s: %s holds generation %d, %d bytes, CRC32C %08x; the manifest says %d, %d, %08x",
				ErrMismatch, m.URI, a.Object, a.Generation, a.Size, a.CRC32C, f.Generation, f.Size, f.CRC32C)
		}
	}
	return nil
}

// List returns the committed checkpoints under run, newest first: every
// prefix below it holding a manifest whose objects match it. Prefixes
// whose manifest is malformed or whose objects were changed are left out
// and reported in skipped.
func List(ctx context.Context, src object.Source, run object.URI) (out []stats.Checkpoint, skipped []error, err error) {
	if run.Generation != 0 {
		return nil, nil, fmt.Errorf("checkpoint: %s: a run cannot pin a generation", run)
	}
	attrs := make(map[string]object.Attrs)
	var manifests []object.Attrs
	for a, err := range src.List(ctx, run.Bucket, run.Path) {
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: list %s: %w", run, err)
		}
		attrs[a.Name] = a
		if a.Name == ManifestName || strings.HasSuffix(a.Name, "/"+ManifestName) {
			manifests = append(manifests, a)
		}
	}
	for _, a := range manifests {
		u := object.URI{Bucket: a.Bucket, Path: strings.TrimSuffix(a.Name, ManifestName)}
		m, err := readManifest(ctx, src, a, u)
		if err == nil {
			err = Check(ctx, src, m, attrs)
		}
		if err != nil {
			skipped = append(skipped, err)
			continue
		}
		out = append(out, stats.Checkpoint{URI: m.URI, Save: m.Save, Node: m.Node, Created: m.Created,
			Files: len(m.Files), Bytes: m.Bytes(), State: GCS, UploadedBytes: m.Bytes()})
	}
	slices.SortFunc(out, func(a, b stats.Checkpoint) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.URI, a.URI)
	})
	return out, skipped, nil
}

// Latest returns the newest committed checkpoint under run, and false if
// there is none.
func Latest(ctx context.Context, src object.Source, run object.URI) (stats.Checkpoint, bool, error) {
	l, _, err := List(ctx, src, run)
	if err != nil || len(l) == 0 {
		return stats.Checkpoint{}, false, err
	}
	return l[0], true, nil
}
