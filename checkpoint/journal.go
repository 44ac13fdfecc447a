package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// journalFormat is the version of a journal file.
const journalFormat = 1

// journal is a save's state on this agent's disk, <root>/saves/<id>/
// journal.json, rewritten atomically (temp file, fsync, rename, fsync of
// the directory) at every step: what the save holds and how far its upload
// got, so that a restarted agent resumes it. Its files' bytes are beside
// it, data/<index in Files>, until they are adopted into the cache.
type journal struct {
	Format int `json:"journal"`
	// Manifest is the checkpoint as it will be committed; a file's
	// Generation is set once its object is written.
	Manifest
	// Committed is the manifest object's generation once written.
	Committed int64 `json:"committed,omitempty"`
	// Adopted says the files are cached objects now (data/ is gone).
	Adopted bool `json:"adopted,omitempty"`
	// Failed is why the save failed for good; its objects were removed.
	Failed string `json:"failed,omitempty"`
	// Replicas are the fleet members holding a verified copy (on the
	// saving agent).
	Replicas []string `json:"replicas,omitempty"`
	// Replica says this agent holds the save for its saver (Node) as a
	// replica; Complete once every file arrived, verified; Holders are all
	// the members holding one, in the saver's order; TakenOver once this
	// agent uploads it because the saver died.
	Replica   bool     `json:"replica,omitempty"`
	Complete  bool     `json:"complete,omitempty"`
	Holders   []string `json:"holders,omitempty"`
	TakenOver bool     `json:"taken_over,omitempty"`
	// Taking is set while Save claims the prefix and moves the files in,
	// before it returns: an agent that dies meanwhile puts the files back
	// and removes the claim when it starts again.
	Taking *taking `json:"taking,omitempty"`
}

// taking is what a save in progress is taking: the directory's files, by
// their index in data/, with the device and inode numbers the scan found
// them at (data/<i> with others is a copy: the file itself never moved;
// a journal written before they were recorded has none).
type taking struct {
	Dir    string      `json:"dir"`
	Names  []string    `json:"names"`
	Inodes [][2]uint64 `json:"inodes,omitempty"`
}

// takingOf returns what a save of the files found in dir is taking.
func takingOf(dir string, files []found) *taking {
	t := &taking{Dir: dir}
	for _, f := range files {
		t.Names = append(t.Names, f.name)
		t.Inodes = append(t.Inodes, [2]uint64{f.dev, f.ino})
	}
	return t
}

// copied reports whether fi, data/<i>, is a copy of the file taken as i
// (another inode than the scan found), not the file itself.
func (t *taking) copied(i int, fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && i < len(t.Inodes) && (st.Dev != t.Inodes[i][0] || st.Ino != t.Inodes[i][1])
}

// dataPath returns the path of file i's bytes in the save's directory.
func dataPath(dir string, i int) string {
	return filepath.Join(dir, "data", strconv.Itoa(i))
}

// writeJournal writes j as dir/journal.json, atomically and durably.
func writeJournal(dir string, j *journal) error {
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("checkpoint: encode journal: %w", err)
	}
	return writeFileSync(filepath.Join(dir, "journal.json"), b)
}

// readJournal reads dir/journal.json.
func readJournal(dir string) (*journal, error) {
	b, err := os.ReadFile(filepath.Join(dir, "journal.json"))
	if err != nil {
		return nil, err
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("checkpoint: journal %s: %w", dir, err)
	}
	if j.Format != journalFormat {
		return nil, fmt.Errorf("checkpoint: journal %s: format %d, want %d", dir, j.Format, journalFormat)
	}
	return &j, nil
}

// writeFileSync writes b to path through a temp file, fsyncs it, renames
// it into place and fsyncs the directory.
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint: write %s: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory, making the renames and creations in it
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
