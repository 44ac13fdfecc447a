package checkpoint

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// testBucket is the emulator's bucket.
const testBucket = "ckpt"

// env is an emulator, a GCS client over it, a cache and a checkpoint
// store in a temp directory.
type env struct {
	t        testing.TB
	emu      *emulator.Server
	gcs      *fetch.GCS
	cacheDir string
	cache    *tier.Cache
	store    *Store
	cfg      Config
}

// newEnv starts the parts; cfg's zero fields take the test's defaults
// (1 MiB parts, so files above it are composed).
func newEnv(t testing.TB, cfg Config, maxBytes int64) *env {
	t.Helper()
	emu := cachetest.Emulator(t, emulator.Options{Buckets: []string{testBucket}})
	gcs, err := fetch.NewGCS(context.Background(), fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gcs.Close() })
	e := &env{t: t, emu: emu, gcs: gcs, cacheDir: filepath.Join(t.TempDir(), "cache")}
	e.cache = cachetest.Cache(t, gcs, cachetest.NewDownloader(t, gcs), tier.Config{Dir: e.cacheDir, MaxBytes: maxBytes})
	if cfg.PartSize == 0 {
		cfg.PartSize = 1 << 20
	}
	cfg.Dir, cfg.Cache, cfg.Bucket, cfg.Node = filepath.Join(e.cacheDir, "checkpoints"), e.cache, gcs, "node-a"
	e.cfg = cfg
	e.open()
	return e
}

// open opens the store (again), closed at the end of the test.
func (e *env) open() {
	e.t.Helper()
	s, err := Open(context.Background(), e.cfg)
	if err != nil {
		e.t.Fatalf("Open: %v", err)
	}
	e.store = s
	e.t.Cleanup(func() { s.Close() })
}

// uri returns gs://ckpt/<p>.
func uri(t testing.TB, p string) object.URI {
	t.Helper()
	u, err := object.ParsePrefix("gs://" + testBucket + "/" + p)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// writeTree writes files (name → bytes) under a new directory on the
// cache's filesystem and returns it.
func (e *env) writeTree(files map[string][]byte) string {
	e.t.Helper()
	dir, err := os.MkdirTemp(filepath.Dir(e.cacheDir), "save-")
	if err != nil {
		e.t.Fatal(err)
	}
	writeFiles(e.t, dir, files)
	return dir
}

// writeFiles writes files under dir.
func writeFiles(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// dcpFiles returns a DCP-style checkpoint: a metadata file and shards, one
// of them larger than the test's part size, nested names.
func dcpFiles() map[string][]byte {
	files := map[string][]byte{
		".metadata":          []byte(`{"state_dict_metadata": {"model.w": "..."}}`),
		"__0_0.distcp":       emulator.Pattern(1, 3<<20+17), // composed of parts
		"__1_0.distcp":       emulator.Pattern(2, 700<<10),
		"optim/__0_0.distcp": emulator.Pattern(3, 1),
		"empty":              nil,
		"model.pt":           emulator.Pattern(4, 1<<20+5),
	}
	return files
}

// readObject reads a whole object.
func (e *env) readObject(o object.Object) []byte {
	e.t.Helper()
	a, err := e.gcs.Stat(context.Background(), o)
	if err != nil {
		e.t.Fatalf("Stat %s: %v", o, err)
	}
	r, err := e.gcs.NewRangeReader(context.Background(), a.Object, 0, a.Size)
	if err != nil {
		e.t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// names lists the bucket's objects under p.
func (e *env) names(p string) []string {
	e.t.Helper()
	var out []string
	for a, err := range e.gcs.List(context.Background(), testBucket, p) {
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, strings.TrimPrefix(a.Name, p))
	}
	slices.Sort(out)
	return out
}

// waitGCS waits for the save of u to be committed.
func (e *env) waitGCS(u object.URI) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.store.Wait(ctx, u, GCS); err != nil {
		e.t.Fatalf("Wait(%s, gcs): %v", u, err)
	}
}

// checkTree checks that dir holds exactly files.
func checkTree(t testing.TB, dir string, files map[string][]byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		want, ok := files[filepath.ToSlash(rel)]
		got, rerr := os.ReadFile(p)
		if !ok || rerr != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes (%v); want %d bytes (listed %v)", rel, len(got), rerr, len(want), ok)
		}
		n++
		return nil
	})
	if err != nil || n != len(files) {
		t.Errorf("%s holds %d files (%v); want %d", dir, n, err, len(files))
	}
}

// gatedBucket is the emulator's bucket with its writes held until gate
// closes, except the claim's: a save is taken, but nothing of it is
// uploaded before the test says.
type gatedBucket struct {
	*fetch.GCS
	gate chan struct{}
}

// Create writes o once the gate is open (the claim at once).
func (g *gatedBucket) Create(ctx context.Context, o object.Object, r io.Reader, size int64, opt fetch.WriteOptions) (object.Attrs, error) {
	if !strings.HasSuffix(o.Name, claimName) {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return object.Attrs{}, ctx.Err()
		}
	}
	return g.GCS.Create(ctx, o, r, size, opt)
}

// gated reopens e's store on a gatedBucket over its emulator, whose gate
// the caller closes.
func (e *env) gated() *gatedBucket {
	e.t.Helper()
	g := &gatedBucket{GCS: e.gcs, gate: make(chan struct{})}
	e.store.Close()
	e.cfg.Bucket = g
	e.open()
	return g
}

// waitFor waits, a minute at most, for the save of u to reach durability
// (or fail).
func (e *env) waitFor(u object.URI, durability string) error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := e.store.Wait(ctx, u, durability)
	return err
}
