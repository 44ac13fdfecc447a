package checkpoint

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cacheagent/cacheagent/object"
)

// untake undoes a save whose agent died before Save returned (journal j
// in dir): its claim is removed, and the files it had moved go back where
// they were, through a root opened on their directory, never over a file
// at their path (one put there since), and only into a directory of the
// files' owner or a staging directory of this store (the agent's, given
// to the user): a directory swapped for a link elsewhere since gets
// nothing. A copy the save made of a file it could not move is dropped:
// the file never left. A moved file that cannot go back is never removed:
// the save's directory stays, with the journal naming its files, and the
// next Open tries again.
func (s *Store) untake(dir string, j *journal) {
	s.log.Warn("checkpoint: undoing a save cut short before it returned", "uri", j.URI, "dir", j.Taking.Dir)
	if u, err := object.ParsePrefix(j.URI); err == nil {
		s.unclaim(u, j.Save)
	}
	if left := s.putBack(dir, j.Taking); left > 0 {
		s.log.Error("checkpoint: files of a save cut short could not be put back; they are kept, and put back "+
			"at the next start if they can be", "uri", j.URI, "dir", j.Taking.Dir, "files", left,
			"kept", filepath.Join(dir, "data"), "names", filepath.Join(dir, "journal.json"))
		return
	}
	os.RemoveAll(dir)
}

// putBack moves the files t took, in the save's directory dir, back to
// t.Dir, and returns how many of the files it had moved are still in dir.
func (s *Store) putBack(dir string, t *taking) (left int) {
	moved := make(map[int]fs.FileInfo)
	for i := range t.Names {
		p := dataPath(dir, i)
		fi, err := os.Lstat(p)
		switch {
		case err != nil: // not taken
		case t.copied(i, fi):
			os.Remove(p)
		default:
			moved[i] = fi
		}
	}
	if len(moved) == 0 {
		return 0
	}
	root, err := os.OpenRoot(t.Dir)
	if err != nil {
		s.log.Warn("checkpoint: could not put the files back", "dir", t.Dir, "err", err)
		return len(moved)
	}
	defer root.Close()
	top, err := root.Stat(".")
	if err != nil {
		return len(moved)
	}
	d, err := os.Open(filepath.Join(dir, "data"))
	if err != nil {
		return len(moved)
	}
	defer d.Close()
	ours := filepath.Dir(filepath.Clean(t.Dir)) == filepath.Join(s.cfg.Dir, "staging")
	for i, fi := range moved {
		name := t.Names[i]
		if !ours && !sameOwner(fi, top) {
			s.log.Warn("checkpoint: not putting a file back into a directory of another owner", "file", name)
			left++
			continue
		}
		if err := renameIn(root, name, d, strconv.Itoa(i), true); err != nil {
			s.log.Warn("checkpoint: could not put a file back", "file", name, "err", err)
			left++
		}
	}
	return left
}

// stagingOf returns the staging directory of this store that dir is, or
// is in.
func (s *Store) stagingOf(dir string) (string, bool) {
	staging := filepath.Join(s.cfg.Dir, "staging")
	rel, err := filepath.Rel(staging, filepath.Clean(dir))
	if err != nil || !filepath.IsLocal(rel) {
		return "", false
	}
	top, _, _ := strings.Cut(rel, string(filepath.Separator))
	return filepath.Join(staging, top), true
}

// emptyStaging removes the staging directories, but those in keep: a save
// cut short was taking their files, which are back in them (or kept in
// the save, to be put back there).
func (s *Store) emptyStaging(keep map[string]bool) error {
	staging := filepath.Join(s.cfg.Dir, "staging")
	ents, err := os.ReadDir(staging)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(staging, e.Name())
		if keep[p] {
			s.log.Warn("checkpoint: keeping a staging directory whose save was cut short: its files are back in it",
				"dir", p)
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			s.log.Warn("checkpoint: remove a staging directory", "dir", p, "err", err)
		}
	}
	return nil
}
