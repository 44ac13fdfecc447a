package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// TestSaveCommitRestore saves a DCP-style directory (shards, metadata, a
// file larger than a part, an empty file, a nested one): the directory's
// files move into the store (renamed, nothing copied), the upload commits
// a manifest whose objects are the files byte for byte, List and Latest
// see it, the parts and the claim are gone, and a restore on this agent
// reads no byte of data from GCS and hard-links the cache's copies.
func TestSaveCommitRestore(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	files := dcpFiles()
	dir := e.writeTree(files)
	u := uri(t, "run1/step-100/")
	info, err := e.store.Save(ctx, dir, u, SaveOptions{})
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	if info.State != Local || info.Files != len(files) {
		t.Fatalf("Save = %+v; want state local, %d files", info, len(files))
	}
	left := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left++
		}
		return err
	})
	if left != 0 {
		t.Errorf("%d files left in the saved directory", left)
	}
	e.waitGCS(u)

	m, err := ReadManifest(ctx, e.gcs, u)
	if err != nil {
		t.Fatalf("ReadManifest: %v", err)
	}
	if m.Node != "node-a" || len(m.Files) != len(files) || m.Bytes() != info.Bytes {
		t.Fatalf("manifest %+v", m)
	}
	for _, f := range m.Files {
		got := e.readObject(object.Object{Bucket: testBucket, Name: u.Path + f.Name, Generation: f.Generation})
		if !bytes.Equal(got, files[f.Name]) {
			t.Errorf("%s: the object differs from the file", f.Name)
		}
	}
	want := []string{".metadata", "__0_0.distcp", "__1_0.distcp", ManifestName, "empty", "model.pt", "optim/__0_0.distcp"}
	if got := e.names(u.Path); !slices.Equal(got, want) {
		t.Errorf("objects under the prefix: %q; want %q (no claim, no parts)", got, want)
	}
	list, _, err := List(ctx, e.gcs, uri(t, "run1/"))
	if err != nil || len(list) != 1 || list[0].URI != u.String() || list[0].State != GCS {
		t.Fatalf("List = %+v, %v", list, err)
	}
	st := e.store.Status(object.URI{})
	if len(st) != 1 || st[0].State != GCS || st[0].UploadedBytes != info.Bytes {
		t.Errorf("Status = %+v", st)
	}
	base := e.cache.Stats().Tiers[0]
	if base.DirtyBytes != 0 || base.PinnedBytes == 0 {
		t.Errorf("after the commit: %d dirty bytes, %d pinned; want 0 dirty, the checkpoint pinned", base.DirtyBytes, base.PinnedBytes)
	}

	served := e.emu.BytesServed()
	out := filepath.Join(filepath.Dir(e.cacheDir), "restored")
	res, err := e.store.Restore(ctx, u, out, nil)
	if err != nil {
		t.Fatalf("Restore: %v", err)
	}
	checkTree(t, out, files)
	if n := e.emu.BytesServed() - served; n > 4<<10 { // the manifest only
		t.Errorf("the restore read %d bytes from GCS; want the manifest's only", n)
	}
	if res.Linked != len(files) {
		t.Errorf("Restore linked %d of %d files", res.Linked, len(files))
	}
	// Nothing is overwritten.
	if _, err := e.store.Restore(ctx, u, out, nil); err == nil {
		t.Error("a second restore into the same directory succeeded")
	}
}

// TestSaveRefusals: a prefix with a committed checkpoint, a prefix another
// save claims, an unknown bucket, a symlink or a special file in the
// directory, more than the budget: each is an error at save, the bucket and
// the directory unchanged.
func TestSaveRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 8<<20)
	u := uri(t, "run/done/")
	if _, err := e.store.Save(ctx, e.writeTree(map[string][]byte{"a": []byte("x")}), u, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGCS(u)
	objects := e.names("")
	check := func(what string, dir string, u object.URI, want error) {
		t.Helper()
		before := treeOf(t, dir)
		_, err := e.store.Save(ctx, dir, u, SaveOptions{})
		if !errors.Is(err, want) {
			t.Errorf("%s: Save = %v; want %v", what, err, want)
		}
		if after := treeOf(t, dir); !slices.Equal(before, after) {
			t.Errorf("%s: the directory changed: %v, then %v", what, before, after)
		}
		if got := e.names(""); !slices.Equal(got, objects) {
			t.Errorf("%s: the bucket changed: %v, then %v", what, objects, got)
		}
	}
	check("committed", e.writeTree(map[string][]byte{"b": []byte("y")}), u, ErrCommitted)

	// Another agent's save claims the prefix.
	busy := uri(t, "run/busy/")
	other := &Store{cfg: e.cfg, log: e.store.log, ctx: ctx}
	if err := other.claim(ctx, busy, "other-save"); err != nil {
		t.Fatal(err)
	}
	objects = e.names("")
	check("claimed", e.writeTree(map[string][]byte{"b": []byte("y")}), busy, ErrBusy)

	bad := object.URI{Bucket: "nosuchbucket", Path: "x/"}
	check("unknown bucket", e.writeTree(map[string][]byte{"b": []byte("y")}), bad, object.ErrNotFound)

	dir := e.writeTree(map[string][]byte{"b": []byte("y"), "sub/c": []byte("z")})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	check("symlink", dir, uri(t, "run/sym/"), ErrUnsafeFile)

	dir = e.writeTree(map[string][]byte{"b": []byte("y")})
	if err := mkfifo(filepath.Join(dir, "fifo")); err != nil {
		t.Fatal(err)
	}
	check("fifo", dir, uri(t, "run/fifo/"), ErrUnsafeFile)

	check("too big", e.writeTree(map[string][]byte{"big": make([]byte, 9<<20)}), uri(t, "run/big/"), tier.ErrNoSpace)

	// Another user's files (the test runs as root, or as a user who is not
	// uid 4242).
	dir = e.writeTree(map[string][]byte{"b": []byte("y")})
	before := treeOf(t, dir)
	_, err := e.store.Save(ctx, dir, uri(t, "run/other/"), SaveOptions{Owner: &Owner{UID: 4242, GID: 4242}})
	if !errors.Is(err, ErrPermission) {
		t.Errorf("saving another user's files: %v; want ErrPermission", err)
	}
	if after := treeOf(t, dir); !slices.Equal(before, after) {
		t.Errorf("a refused save changed the directory")
	}
	if d := e.cache.Stats().Tiers[0].DirtyBytes; d != 0 {
		t.Errorf("%d dirty bytes after the refusals", d)
	}
}

// treeOf lists dir's files with their sizes.
func treeOf(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel+":"+fi.Mode().String()+":"+string(rune(fi.Size())))
		return nil
	})
	return out
}

// TestChangedWhileTaken: a file written between the scan and its move is
// ErrChanged, and every file is back where it was.
func TestChangedWhileTaken(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("data "+n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	u := uri(t, "p/")
	found, err := scan(root, u, nil, false)
	if err != nil || len(found) != 3 {
		t.Fatalf("scan = %v, %v", found, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c"), []byte("data c, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(t.TempDir(), "data")
	os.Mkdir(data, 0o700)
	if _, _, err := take(root, found, data); !errors.Is(err, ErrChanged) {
		t.Fatalf("take = %v; want ErrChanged", err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s is not back: %v", n, err)
		}
	}
}

// TestResume closes the store right after a save, while its upload runs,
// and opens it again: the save resumes (its dirty bytes held again), and
// commits exactly once, with no part or claim left behind.
func TestResume(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{Connections: 2}, 0)
	files := dcpFiles()
	for i := range 6 {
		files["more/shard-"+string(rune('a'+i))] = make([]byte, 2<<20+i)
	}
	u := uri(t, "run2/step-1/")
	if _, err := e.store.Save(ctx, e.writeTree(files), u, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	if d := e.cache.Stats().Tiers[0].DirtyBytes; d != 0 {
		t.Errorf("%d bytes still held after Close", d)
	}
	e.open()
	if st := e.store.Status(u); len(st) != 1 {
		t.Fatalf("after reopening: %+v", st)
	}
	e.waitGCS(u)
	m, err := ReadManifest(ctx, e.gcs, u)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if got := e.readObject(object.Object{Bucket: testBucket, Name: u.Path + f.Name, Generation: f.Generation}); !bytes.Equal(got, files[f.Name]) {
			t.Errorf("%s differs", f.Name)
		}
	}
	for _, n := range e.names(u.Path) {
		if n != ManifestName && files[n] == nil && n != "empty" {
			t.Errorf("object %q left under the prefix", n)
		}
	}
	if d := e.cache.Stats().Tiers[0].DirtyBytes; d != 0 {
		t.Errorf("%d dirty bytes after the commit", d)
	}
}

// TestResumePins: pins an adoption did not get to write (the agent
// stopped between recording the adoption and pinning) are written at the
// next Open: the newest checkpoints of a run are pinned, older ones not.
func TestResumePins(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{KeepLocal: 1}, 0)
	older, newer := uri(t, "run3/step-1/"), uri(t, "run3/step-2/")
	for _, u := range []object.URI{older, newer} {
		if _, err := e.store.Save(ctx, e.writeTree(dcpFiles()), u, SaveOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitGCS(u)
	}
	pinned := func() int64 { return e.cache.Stats().Tiers[0].PinnedBytes }
	one := pinned()
	if one == 0 {
		t.Fatal("no checkpoint pinned after two commits; want the newest")
	}
	// As if the agent stopped before pinning: the newer unpinned, the
	// older still pinned.
	if _, err := e.cache.Unpin(ctx, testBucket, newer.Path); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cache.Pin(ctx, testBucket, older.Path); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	e.open()
	if got := pinned(); got != one {
		t.Errorf("%d bytes pinned after reopening; want %d (the newest checkpoint only)", got, one)
	}
	if n, err := e.cache.Unpin(ctx, testBucket, older.Path); err != nil || n != 0 {
		t.Errorf("the older checkpoint: %d entries still pinned (%v); want none", n, err)
	}
}

// TestUploadStorm saves through uploads that fail often (503s and
// connections reset mid-body): the save commits, every object intact.
func TestUploadStorm(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	e.emu.SetUploadFaults(func(r *http.Request, n int) emulator.Fault {
		switch {
		case n%4 == 1:
			return emulator.Fault{Status: http.StatusServiceUnavailable}
		case n%4 == 2:
			return emulator.Fault{ResetAfter: 512}
		}
		return emulator.Fault{}
	})
	files := dcpFiles()
	u := uri(t, "storm/step-1/")
	if _, err := e.store.Save(ctx, e.writeTree(files), u, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGCS(u)
	e.emu.SetUploadFaults(nil)
	m, err := ReadManifest(ctx, e.gcs, u)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if got := e.readObject(object.Object{Bucket: testBucket, Name: u.Path + f.Name, Generation: f.Generation}); !bytes.Equal(got, files[f.Name]) {
			t.Errorf("%s differs", f.Name)
		}
	}
	if n, _ := e.emu.Uploads(); n < 8 {
		t.Errorf("%d uploads: the storm was not met", n)
	}
}

// TestRestoreCopiesAnotherUsersFile: a file saved by another user (uid
// 4242) is adopted as it is, their inode: a restore copies it instead of
// linking it, so that writing the restored file (in place, times set
// back) leaves the cache's copy as saved, and a later restore gets the
// saved bytes.
func TestRestoreCopiesAnotherUsersFile(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	files := map[string][]byte{"model.pt": bytes.Repeat([]byte("w"), 8192)}
	dir := e.writeTree(files)
	if err := os.Chown(filepath.Join(dir, "model.pt"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	u := uri(t, "run/link/")
	if _, err := e.store.Save(ctx, dir, u, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGCS(u)
	out := filepath.Join(filepath.Dir(e.cacheDir), "r1")
	res, err := e.store.Restore(ctx, u, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Linked != 0 {
		t.Errorf("Restore linked %d files; want the one of uid 4242 copied", res.Linked)
	}
	p := filepath.Join(out, "model.pt")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt([]byte("CHANGED"), 0); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(filepath.Dir(e.cacheDir), "r2")
	if _, err := e.store.Restore(ctx, u, again, nil); err != nil {
		t.Fatal(err)
	}
	checkTree(t, again, files)
}
