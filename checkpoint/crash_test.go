package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// takeAndDie does what Save does with dir as the checkpoint at u until
// its files are in the store, and stops there, as an agent killed before
// the journal has them (while their CRC32Cs are computed and they are
// fsynced): the journal says what is being taken, the prefix is claimed,
// the files are in data/. It returns the save's directory and the files
// in the order of data/.
func (e *env) takeAndDie(dir string, u object.URI, staged bool) (string, []found) {
	e.t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	defer root.Close()
	found, err := scan(root, u, nil, staged)
	if err != nil {
		e.t.Fatal(err)
	}
	id := newID()
	sv := filepath.Join(e.cfg.Dir, "saves", id)
	j := journal{Format: journalFormat, Manifest: Manifest{Format: manifestFormat, URI: u.String(), Save: id,
		Node: e.cfg.Node, Created: time.Now().UTC()}, Taking: takingOf(dir, found)}
	if err := os.MkdirAll(filepath.Join(sv, "data"), 0o700); err != nil {
		e.t.Fatal(err)
	}
	if err := writeJournal(sv, &j); err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.claim(context.Background(), u, id); err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := take(root, found, filepath.Join(sv, "data")); err != nil {
		e.t.Fatal(err)
	}
	return sv, found
}

// chownFiles gives the files (not the directories) under dir to uid.
func chownFiles(t *testing.T, dir string, uid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			err = os.Chown(p, uid, uid)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCrashWhileTakingStaged: an agent killed while a save of a staging
// directory was taking its files puts them back into the staging
// directory at its next start, and keeps that directory, files and all,
// where it empties the others. The files are its user's (uid 4242) in a
// directory that is the agent's: they go back all the same. The claim and
// the save are gone.
func TestCrashWhileTakingStaged(t *testing.T) {
	e := newEnv(t, Config{}, 0)
	dir, err := e.store.Staging(nil)
	if err != nil {
		t.Fatal(err)
	}
	unused, err := e.store.Staging(nil)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"model.pt": []byte("weights"), "optim/o.pt": []byte("optimizer state")}
	writeFiles(t, dir, files)
	chownFiles(t, dir, 4242)
	u := uri(t, "run/step-1/")
	sv, _ := e.takeAndDie(dir, u, true)
	e.store.Close()

	e.open()
	checkTree(t, dir, files)
	if _, err := os.Stat(unused); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an unused staging directory survived the start: %v", err)
	}
	if _, err := os.Stat(sv); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the save's directory: %v; want it removed", err)
	}
	if names := e.names(u.Path); len(names) != 0 {
		t.Errorf("objects under the prefix: %q; want none (the claim removed)", names)
	}
}

// TestCrashWhileTakingKeepsFiles: a moved file that cannot go back (here
// one of uid 4242 in a directory of another owner, which untake does not
// write into for it) stays in the save's directory, at this start and the
// next, never removed; the others go back.
func TestCrashWhileTakingKeepsFiles(t *testing.T) {
	e := newEnv(t, Config{}, 0)
	files := map[string][]byte{"mine": []byte("root's"), "theirs": []byte("uid 4242's")}
	dir := e.writeTree(files)
	if err := os.Chown(filepath.Join(dir, "theirs"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	sv, found := e.takeAndDie(dir, uri(t, "run/step-2/"), false)
	for range 2 {
		e.store.Close()
		e.open()
		for i, f := range found {
			_, err := os.Stat(dataPath(sv, i))
			if f.name == "theirs" && err != nil {
				t.Errorf("the file that could not go back is gone from the store: %v", err)
			}
			if f.name == "mine" && !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the file that went back is still in the store: %v", err)
			}
		}
		checkTree(t, dir, map[string][]byte{"mine": files["mine"]})
	}
}

// TestCrashWhileTakingCopies: a file the save copied (as it does from a
// directory it may not change) was never moved: the copy is dropped, and
// the file at its path stays as it is, not replaced by the copy.
func TestCrashWhileTakingCopies(t *testing.T) {
	e := newEnv(t, Config{}, 0)
	files := map[string][]byte{"a": []byte("copied"), "b": []byte("moved")}
	dir := e.writeTree(files)
	sv, found := e.takeAndDie(dir, uri(t, "run/step-3/"), false)
	// As take does where it may not rename: the file stays, data/ holds
	// a copy.
	i := 0
	if found[0].name != "a" {
		i = 1
	}
	orig := filepath.Join(dir, "a")
	if err := os.Rename(dataPath(sv, i), orig); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dataPath(sv, i), files["a"], 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(orig)
	if err != nil {
		t.Fatal(err)
	}
	e.store.Close()

	e.open()
	checkTree(t, dir, files)
	if after, err := os.Stat(orig); err != nil || !os.SameFile(before, after) {
		t.Errorf("the file that was copied was replaced (%v)", err)
	}
	if _, err := os.Stat(sv); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the save's directory: %v; want it removed", err)
	}
}
