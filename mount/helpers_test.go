package mount

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

// requireFUSE checks that this process can mount FUSE filesystems.
func requireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Cannot(t, "no FUSE device: %v", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			testenv.Cannot(t, "not root and no fusermount3 (apt-get install fuse3): %v", err)
		}
	}
}

// obj returns an emulator object.
func obj(bucket, name string, data []byte) fakestorage.Object {
	return fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: name}, Content: data}
}

// env is the real stack under a mount: an emulator, the GCS source, the
// downloader and a disk cache in a temporary directory.
type env struct {
	emu   *emulator.Server
	src   *fetch.GCS
	cache *tier.Cache
	logs  *logRecorder
}

// newEnv starts the stack; dl configures the downloader.
func newEnv(t testing.TB, opts emulator.Options, dl fetch.Config) *env {
	t.Helper()
	return newEnvAt(t, t.TempDir(), opts, dl)
}

// newEnvAt is newEnv with the cache in dir.
func newEnvAt(t testing.TB, dir string, opts emulator.Options, dl fetch.Config) *env {
	t.Helper()
	return newEnvBudget(t, dir, opts, dl, 0)
}

// newEnvBudget is newEnvAt with a cache of maxBytes (0: the default). The
// cache packs nothing: most tests look at passthrough, which packed objects
// never get (TestReadPackedObjects covers them).
func newEnvBudget(t testing.TB, dir string, opts emulator.Options, dl fetch.Config, maxBytes int64) *env {
	t.Helper()
	return newEnvCache(t, dir, opts, dl, tier.Config{MaxBytes: maxBytes, PackBelow: -1})
}

// newEnvCache is newEnvAt with the cache's settings from tc (its Dir,
// Source and Downloader are set here).
func newEnvCache(t testing.TB, dir string, opts emulator.Options, dl fetch.Config, tc tier.Config) *env {
	t.Helper()
	ctx := context.Background()
	emu := cachetest.Emulator(t, opts)
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	d, err := fetch.NewDownloader(src, dl)
	if err != nil {
		t.Fatal(err)
	}
	tc.Dir, tc.Source, tc.Downloader = dir, src, d
	c, err := tier.Open(ctx, tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close cache: %v", err)
		}
	})
	return &env{emu: emu, src: src, cache: c, logs: &logRecorder{}}
}

// config returns a mount configuration over e showing roots. It asks for
// every open (OpenAsk), the path most tests exercise: with OpenAuto their
// small datasets would skip opens (TestOpenAuto covers the default).
func (e *env) config(roots ...Root) Config {
	return Config{Cache: e.cache, Source: e.src, Roots: roots, ListTTL: -1, Open: OpenAsk, Logger: slog.New(e.logs)}
}

// mount mounts cfg at a fresh mountpoint; see mountAt.
func (e *env) mount(t testing.TB, cfg Config, seams func(*FS)) (*Server, string) {
	t.Helper()
	mp := filepath.Join(t.TempDir(), "mnt")
	return mountAt(t, mp, cfg, seams), mp
}

// mountAt mounts cfg at mp, after seams (if any) has set up the FS, and
// unmounts it when the test ends.
func mountAt(t testing.TB, mp string, cfg Config, seams func(*FS)) *Server {
	t.Helper()
	requireFUSE(t)
	// Registered before mounting, so it runs after the unmount below: a
	// mount that survived a failed test must not outlive it.
	t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if seams != nil {
		seams(f)
	}
	srv, err := mountFS(context.Background(), mp, f)
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENODEV) {
		testenv.Cannot(t, "cannot mount FUSE here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
		srv.Wait()
	})
	return srv
}

// mountsAt returns the mounts at mp.
func mountsAt(t testing.TB, mp string) []mountInfo {
	t.Helper()
	ms, err := mounts()
	if err != nil {
		t.Fatal(err)
	}
	var out []mountInfo
	for _, m := range ms {
		if m.point == mp {
			out = append(out, m)
		}
	}
	return out
}

// walk returns the files and directories under root, relative to it, with
// '/' separators, sorted.
func walk(t testing.TB, root string) (files, dirs []string) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, filepath.ToSlash(rel))
		} else {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	slices.Sort(files)
	slices.Sort(dirs)
	return files, dirs
}

// dirsOf returns the directories that the paths imply, sorted.
func dirsOf(paths []string) []string {
	set := map[string]bool{}
	for _, p := range paths {
		for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
			set[p[:i]] = true
		}
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []logRecord
}

// logRecord is one kept record with its attributes as text.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	lr := logRecord{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	rec.Attrs(func(a slog.Attr) bool {
		lr.attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, lr)
	r.mu.Unlock()
	return nil
}

// WithAttrs and WithGroup are not used by this package's logging.
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

// count returns how many records have msg containing substr and attribute
// key equal to val.
func (r *logRecorder) count(substr, key, val string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.recs {
		if strings.Contains(rec.msg, substr) && rec.attrs[key] == val {
			n++
		}
	}
	return n
}
