package checkpoint

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// TestWritebackStaging: the files written into a staging directory, in
// subdirectories made after it, and moved into it start going to disk
// while they are written; a symlink or FIFO put there is never opened,
// and nothing outside the directory is reached through a symlinked
// directory. The save of the directory is as without.
func TestWritebackStaging(t *testing.T) {
	var mu sync.Mutex
	kicked := make(map[string]error)
	testKicked = func(p string, err error) {
		mu.Lock()
		defer mu.Unlock()
		kicked[p] = err
	}
	t.Cleanup(func() { testKicked = nil })
	e := newEnv(t, Config{}, 1<<30)
	if e.store.wb == nil {
		t.Fatal("no writeback: inotify is missing")
	}
	dir, err := e.store.Staging(nil)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"model.pt":         emulator.Pattern(1, 2<<20+3),
		"optim/shard-0.pt": emulator.Pattern(2, 300<<10),
		"a/b/c.pt":         emulator.Pattern(3, 5),
	}
	writeFiles(t, dir, files)
	moved := emulator.Pattern(4, 64<<10)
	src := filepath.Join(filepath.Dir(e.cacheDir), "moved.pt")
	if err := os.WriteFile(src, moved, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(src, filepath.Join(dir, "moved.pt")); err != nil {
		t.Fatal(err)
	}
	files["moved.pt"] = moved

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		var missing []string
		for name := range files {
			if err, ok := kicked[filepath.Join(dir, filepath.FromSlash(name))]; !ok || err != nil {
				missing = append(missing, name)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			t.Fatalf("writeback never started for %v (kicked: %v)", missing, kicked)
		}
	}
	mu.Lock()
	for _, name := range []string{"link", "linkdir", "fifo"} {
		if _, ok := kicked[filepath.Join(dir, name)]; ok {
			t.Errorf("%s was opened for writeback", name)
		}
	}
	mu.Unlock()
	// Through a symlinked directory: refused, not opened.
	if err := startWriteback(filepath.Dir(dir), filepath.Join(dir, "linkdir", "secret")); err == nil {
		t.Error("a file outside the staging directory was opened through a symlink")
	}

	for _, name := range []string{"link", "linkdir", "fifo"} {
		os.Remove(filepath.Join(dir, name))
	}
	e.saveStaged(dir, files)
}

// TestWritebackWatchLimit: the directories a staging directory's owner
// makes are watched up to the limit, no further; the save is as without.
func TestWritebackWatchLimit(t *testing.T) {
	defer func(n int) { writebackWatches = n }(writebackWatches)
	writebackWatches = 3
	sentinel := make(chan string, 64)
	testKicked = func(p string, _ error) {
		if filepath.Base(p) == "sentinel" {
			sentinel <- p
		}
	}
	t.Cleanup(func() { testKicked = nil })
	e := newEnv(t, Config{}, 1<<30)
	dir, err := e.store.Staging(nil)
	if err != nil {
		t.Fatal(err)
	}
	files := make(map[string][]byte)
	for _, d := range []string{"a", "b", "c", "d", "e"} {
		files[d+"/x/shard.pt"] = emulator.Pattern(uint64(len(files)+1), 100<<10)
	}
	writeFiles(t, dir, files)
	// Written last into the top directory, always watched: the watcher
	// handles events in order, so once it is kicked every directory above
	// has been seen.
	files["sentinel"] = []byte("last")
	writeFiles(t, dir, map[string][]byte{"sentinel": files["sentinel"]})
	select {
	case <-sentinel:
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel's writeback never started")
	}
	if n := len(e.store.wb.w.WatchList()); n > 3 {
		t.Errorf("%d directories watched, limit 3", n)
	}
	e.saveStaged(dir, files)
}

// saveStaged saves the staging directory dir as gs://ckpt/run/step-1/,
// waits for its commit and checks the objects against files.
func (e *env) saveStaged(dir string, files map[string][]byte) {
	e.t.Helper()
	u := uri(e.t, "run/step-1/")
	ctx := context.Background()
	if _, err := e.store.Save(ctx, dir, u, SaveOptions{Staged: true}); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Wait(ctx, u, GCS); err != nil {
		e.t.Fatal(err)
	}
	for name, b := range files {
		if got := e.readObject(object.Object{Bucket: testBucket, Name: u.Path + name}); !bytes.Equal(got, b) {
			e.t.Errorf("%s: %d bytes uploaded, want its %d", name, len(got), len(b))
		}
	}
}
