package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/bench/testenv"
)

// shmDir returns a fresh directory on /dev/shm: another filesystem than
// the test's cache, so that files are copied, not renamed.
func shmDir(t *testing.T) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		testenv.Cannot(t, "/dev/shm is not a tmpfs (%v)", err)
	}
	d, err := os.MkdirTemp("/dev/shm", "cacheagent-checkpoint-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// TestAcrossFilesystems saves from and restores into another filesystem
// than the cache's, directly and through Stage and Place (as a client of
// the daemon does): the files are copied, each copy checked, and the
// checkpoint round-trips byte for byte.
func TestAcrossFilesystems(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	files := dcpFiles()
	shm := shmDir(t)
	src := filepath.Join(shm, "src")
	writeFiles(t, src, files)
	u := uri(t, "run1/step-shm/")
	if _, err := e.store.Save(ctx, src, u, SaveOptions{}); err != nil {
		t.Fatalf("Save from another filesystem: %v", err)
	}
	checkTree(t, src, files) // copied: the files stay
	e.waitGCS(u)
	res, err := e.store.Restore(ctx, u, filepath.Join(shm, "restored"), nil)
	if err != nil || res.Linked != 0 {
		t.Fatalf("Restore into another filesystem: %+v, %v; want copies", res, err)
	}
	checkTree(t, filepath.Join(shm, "restored"), files)

	// Stage: into a staging directory on the cache's filesystem, copied.
	staging := filepath.Join(filepath.Dir(e.cacheDir), "staging")
	if err := os.Mkdir(staging, 0o700); err != nil {
		t.Fatal(err)
	}
	undo, err := Stage(src, staging)
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	checkTree(t, staging, files)
	if err := undo(); err != nil {
		t.Fatalf("undo: %v", err)
	}
	checkTree(t, src, files)

	// Place: a restore moved (hard links kept) or copied out.
	fresh := filepath.Join(filepath.Dir(e.cacheDir), "fresh")
	if _, err := e.store.Restore(ctx, u, fresh, nil); err != nil {
		t.Fatal(err)
	}
	copied, err := Place(fresh, filepath.Join(shm, "placed"))
	if err != nil || copied != len(files) {
		t.Fatalf("Place across filesystems: %d copied, %v; want %d", copied, err, len(files))
	}
	checkTree(t, filepath.Join(shm, "placed"), files)
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Place left %s: %v", fresh, err)
	}
	if _, err := e.store.Restore(ctx, u, fresh, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Place(fresh, filepath.Join(shm, "placed")); err == nil {
		t.Error("Place over existing files succeeded; want a refusal")
	}
	same := filepath.Join(filepath.Dir(e.cacheDir), "placed")
	if copied, err := Place(fresh, same); err != nil || copied != 0 {
		t.Fatalf("Place on the same filesystem: %d copied, %v; want renames", copied, err)
	}
	checkTree(t, same, files)

	// Stage refuses a symlink before anything moves.
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if _, err := Stage(src, staging); !errors.Is(err, ErrUnsafeFile) {
		t.Errorf("Stage with a symlink: %v; want ErrUnsafeFile", err)
	}
	os.Remove(filepath.Join(src, "link"))
	checkTree(t, src, files)
}

// TestCutShort: an agent that died while Save was taking the files (the
// claim written, some files moved, no journal of them yet) puts them back
// and removes the claim when it starts again, so the prefix is free.
func TestCutShort(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	files := dcpFiles()
	dir := e.writeTree(files)
	u := uri(t, "run1/step-cut/")
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	found, err := scan(root, u, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	// What Save has done when it dies after moving the first file.
	id := newID()
	sv := filepath.Join(e.cfg.Dir, "saves", id)
	j := journal{Format: journalFormat, Manifest: Manifest{Format: manifestFormat, URI: u.String(), Save: id,
		Node: "node-a"}, Taking: &taking{Dir: dir}}
	for _, f := range found {
		j.Taking.Names = append(j.Taking.Names, f.name)
	}
	if err := os.MkdirAll(filepath.Join(sv, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeJournal(sv, &j); err != nil {
		t.Fatal(err)
	}
	if err := e.store.claim(ctx, u, id); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(filepath.Join(sv, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := renameIn(root, found[0].name, d, "0", false); err != nil {
		t.Fatal(err)
	}
	d.Close()
	root.Close()
	e.store.Close()

	e.open()
	checkTree(t, dir, files)
	if _, err := os.Stat(sv); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the save's directory: %v; want it removed", err)
	}
	if names := e.names(u.Path); len(names) != 0 {
		t.Errorf("objects under the prefix: %q; want none (the claim removed)", names)
	}
	if _, err := e.store.Save(ctx, dir, u, SaveOptions{}); err != nil {
		t.Errorf("a save of the prefix afterwards: %v", err)
	}
}
