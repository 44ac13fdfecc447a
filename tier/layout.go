package tier

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// Names inside the cache directory.
const (
	lockName  = "LOCK"
	dataName  = "data"
	tmpName   = "tmp"
	indexName = "index"
	tmpSuffix = ".tmp"
)

// maxKeyLen bounds bucket+name so that index keys stay far below badger's
// key limit. GCS names are at most 1024 bytes.
const maxKeyLen = 16 << 10

// fileID names a data file: the first 128 bits of SHA-256 over (bucket,
// name, generation). Object names never reach the filesystem.
type fileID [16]byte

// idOf returns the file id of one generation of an object. The encoding is
// unambiguous: buckets contain no NUL and the generation has a fixed width.
func idOf(bucket, name string, gen int64) fileID {
	h := sha256.New()
	h.Write([]byte(bucket))
	h.Write([]byte{0})
	h.Write([]byte(name))
	var g [8]byte
	binary.BigEndian.PutUint64(g[:], uint64(gen))
	h.Write(g[:])
	var id fileID
	copy(id[:], h.Sum(nil))
	return id
}

// String returns the id as 32 lower-case hex digits: the data file's name.
func (id fileID) String() string { return hex.EncodeToString(id[:]) }

// parseID parses a data file name; ok is false for anything else.
func parseID(name string) (id fileID, ok bool) {
	if len(name) != 2*len(id) || strings.ToLower(name) != name {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(name)); err != nil {
		return id, false
	}
	return id, true
}

// indexKey returns the index key of an object name: bucket + "\x00" + name.
func indexKey(bucket, name string) string { return bucket + "\x00" + name }

// splitKey splits an index key into bucket and name (substrings of key).
func splitKey(key string) (bucket, name string, ok bool) {
	bucket, name, ok = strings.Cut(key, "\x00")
	return bucket, name, ok && bucket != "" && name != ""
}

// checkObject rejects names that cannot be cached: empty, a bucket with a NUL
// (it would make keys ambiguous), or absurdly long.
func checkObject(o object.Object) error {
	switch {
	case o.Bucket == "" || o.Name == "":
		return fmt.Errorf("%s: empty bucket or object name: %w", o, object.ErrInvalidName)
	case strings.IndexByte(o.Bucket, 0) >= 0:
		return fmt.Errorf("%q: NUL in bucket name: %w", o.Bucket, object.ErrInvalidName)
	case len(o.Bucket)+len(o.Name) > maxKeyLen:
		return fmt.Errorf("%s: name longer than %d bytes: %w", o.Bucket, maxKeyLen, object.ErrInvalidName)
	}
	return nil
}

// layout holds the paths of one tier's directory. Immutable.
type layout struct {
	root  string // the tier's directory, absolute
	data  string // root/data: 256 subdirectories 00..ff and tmp
	tmp   string // root/data/tmp: files being filled
	seg   string // root/data/seg: segment files of packed objects; "" for the hot tier
	index string // root/index: badger; "" for the hot tier, which has none
}

// newLayout returns the layout of the base tier's directory root.
func newLayout(root string) layout {
	l := newHotLayout(root)
	l.index = filepath.Join(root, indexName)
	l.seg = filepath.Join(l.data, segName)
	return l
}

// newHotLayout returns the layout of the hot tier's directory root: data
// files only, no index.
func newHotLayout(root string) layout {
	data := filepath.Join(root, dataName)
	return layout{root: root, data: data, tmp: filepath.Join(data, tmpName)}
}

// subdirs returns the 256 data subdirectories.
func (l layout) subdirs() []string {
	dirs := make([]string, 256)
	for i := range dirs {
		dirs[i] = filepath.Join(l.data, fmt.Sprintf("%02x", i))
	}
	return dirs
}

// create makes the directories that are missing and syncs the new ones'
// parents.
func (l layout) create() error {
	dirs := []string{l.data, l.tmp}
	if l.index != "" {
		dirs = append(dirs, l.index, l.seg)
	}
	dirs = append(dirs, l.subdirs()...)
	created := false
	for _, d := range dirs {
		err := os.Mkdir(d, 0o755)
		if err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("tier: create %s: %w", d, err)
		}
		created = created || err == nil
	}
	if !created {
		return nil
	}
	for _, d := range []string{l.root, l.data} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// path returns the data file of id.
func (l layout) path(id fileID) string {
	s := id.String()
	return filepath.Join(l.data, s[:2], s)
}

// syncDir fsyncs a directory so that renames and unlinks in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("tier: sync dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("tier: sync dir %s: %w", dir, err)
	}
	return nil
}

// blocksOf returns the bytes a file occupies on disk: st_blocks*512.
func blocksOf(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// errChanged means a data file is not the one the cache published: it was
// deleted, replaced, truncated or written to behind the cache's back.
var errChanged = errors.New("tier: cached file changed behind the cache's back")

// fileIdent identifies the data file a copy published, with the object's
// size (which is the file's: entries keep it in rec.size, so it is not
// stored twice): a file with another inode, size or modification time is
// not it. Immutable.
type fileIdent struct {
	ino   uint64
	mtime int64 // unix ns
}

// identOf returns the identity of a file from its stat.
func identOf(st *syscall.Stat_t) fileIdent {
	return fileIdent{ino: st.Ino, mtime: st.Mtim.Nano()}
}

// identOfInfo returns the identity of a file from its FileInfo.
func identOfInfo(fi fs.FileInfo) fileIdent {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return identOf(st)
	}
	return fileIdent{mtime: fi.ModTime().UnixNano()}
}

// matches returns nil if st is the file id names, of size bytes, else an
// error wrapping errChanged.
func (id fileIdent) matches(st *syscall.Stat_t, size int64) error {
	got := identOf(st)
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || got != id || st.Size != size {
		return fmt.Errorf("%w: size %d, inode %d, mtime %d; published with size %d, inode %d, mtime %d",
			errChanged, st.Size, got.ino, got.mtime, size, id.ino, id.mtime)
	}
	return nil
}

// check returns nil if st is the file copy e was published in: its own file
// (see fileIdent.matches), or for a packed object its segment, which must
// still hold the object's bytes (a segment grows, so only its inode is
// compared, and its size must reach the object's end).
func (e *entry) check(st *syscall.Stat_t) error {
	if e.seg == nil {
		return e.ident.matches(st, e.rec.size)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Ino != e.seg.ino || st.Size < e.rec.off+e.rec.size {
		return fmt.Errorf("%w: segment %s has size %d, inode %d; published as inode %d with the object at %d+%d",
			errChanged, filepath.Base(e.seg.path), st.Size, st.Ino, e.seg.ino, e.rec.off, e.rec.size)
	}
	return nil
}

// checkFile checks f, open on e's path, with one fstat (see check).
func (e *entry) checkFile(f *os.File) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("fstat %s: %w", f.Name(), err)
	}
	return e.check(&st)
}

// checkPath checks e's path without following links; a missing file is
// changed.
func (e *entry) checkPath() error {
	p := e.path()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s is gone", errChanged, p)
		}
		return fmt.Errorf("lstat %s: %w", p, err)
	}
	return e.check(&st)
}

// path returns the file holding copy e's bytes: its own data file, or its
// segment.
func (e *entry) path() string {
	if e.seg != nil {
		return e.seg.path
	}
	return e.st.path(e.id)
}

// roundUp rounds n up to a multiple of b (b > 0).
func roundUp(n, b int64) int64 { return (n + b - 1) / b * b }

// fsInfo describes the filesystem holding the cache.
type fsInfo struct {
	blockSize int64 // allocation unit
	size      int64 // total bytes
	avail     int64 // bytes available to us
}

// statFS returns the filesystem facts of path.
func statFS(path string) (fsInfo, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return fsInfo{}, fmt.Errorf("tier: statfs %s: %w", path, err)
	}
	return fsInfoOf(&st), nil
}

func fsInfoOf(st *unix.Statfs_t) fsInfo {
	bs := int64(st.Bsize)
	if bs <= 0 {
		bs = 4096
	}
	return fsInfo{blockSize: bs, size: int64(st.Blocks) * bs, avail: int64(st.Bavail) * bs}
}

// budgetOf returns share of the filesystem's size, in whole blocks.
func budgetOf(fsi fsInfo, share float64) int64 {
	return int64(float64(fsi.size)*share) / fsi.blockSize * fsi.blockSize
}

// headroomFor is the free space a fill must leave on a filesystem of the
// given size: the index (badger, which writes through mmap) lives on the same
// filesystem and must never find it full. 1% of the size, within [1, 256] MiB.
func headroomFor(size int64) int64 {
	return min(max(size/100, 1<<20), 256<<20)
}

// dataFileMode is the mode of published data files: readable by everyone
// who can reach them, so trainers running as other users can map the copies
// the daemon leases to them. Access is controlled by the cache directories'
// modes.
const dataFileMode = 0o644

// createTemp creates a temp file in dir for a copy being written, with
// dataFileMode (os.CreateTemp makes 0600 files).
func createTemp(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "*"+tmpSuffix)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(dataFileMode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return f, nil
}
