package loader

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cacheagent/cacheagent/object"
)

// IndexCache keeps the indexes formats build of their shards (a WebDataset
// tar's member index, webdataset.Shard's MarshalBinary) across runs, keyed
// by object generation. Implementations must be safe for concurrent use.
type IndexCache interface {
	// Load returns the saved index of o (a pinned generation), if any.
	Load(o object.Object) ([]byte, bool)
	// Store saves the index of o.
	Store(o object.Object, b []byte) error
}

// DirIndex returns an IndexCache of files in dir (created on the first
// Store), one per (bucket, name, generation): the name is the SHA-256 of
// the three, so a new generation never finds an old index.
func DirIndex(dir string) IndexCache { return dirIndex(dir) }

// dirIndex is DirIndex's IndexCache.
type dirIndex string

// path returns the file of o's index.
func (d dirIndex) path(o object.Object) string {
	h := sha256.Sum256([]byte(o.Bucket + "\x00" + o.Name + "\x00" + strconv.FormatInt(o.Generation, 10)))
	return filepath.Join(string(d), hex.EncodeToString(h[:16])+".wdsidx")
}

// Load implements IndexCache.
func (d dirIndex) Load(o object.Object) ([]byte, bool) {
	b, err := os.ReadFile(d.path(o))
	return b, err == nil
}

// Store implements IndexCache: it writes a temporary file and renames it.
func (d dirIndex) Store(o object.Object, b []byte) error {
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(string(d), ".wdsidx-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(f.Name(), d.path(o))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
