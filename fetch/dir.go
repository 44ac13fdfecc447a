package fetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/cacheagent/cacheagent/object"
)

// Dir is an object.Source over a local directory laid out as <root>/<bucket>/<name>,
// with '/' in names separating directories. A file's generation is its
// modification time in nanoseconds; Dir supplies no CRC32C.
//
// Every access goes through an os.Root, so no name or symbolic link can
// reach outside root. Names that are not canonical local paths (empty,
// absolute, containing "." or ".." elements, empty elements, a trailing
// slash, or NUL) are rejected with ErrInvalidName: each object has exactly
// one name. Symbolic links to regular files inside root are followed;
// links leading outside root are refused by Stat and NewRangeReader and
// skipped by List. Directories, FIFOs, devices and other special files are
// not objects.
//
// Generations are only as fine as the filesystem's timestamps (often a
// clock tick, a few milliseconds): a file rewritten in place within one tick
// keeps its generation. Replace files by writing a new one and renaming it
// over the old; a read already open then finishes on the old contents.
//
// Dir is safe for concurrent use. Close releases the root directory.
type Dir struct {
	root *os.Root
}

var _ object.Source = (*Dir)(nil)

// NewDir returns a Dir serving the directory root.
func NewDir(root string) (*Dir, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("fetch: open dir source: %w", err)
	}
	return &Dir{root: r}, nil
}

// Close releases the root directory. Calls after Close fail.
func (d *Dir) Close() error { return d.root.Close() }

// Stat returns the attributes of bucket/name, or object.ErrNotFound if it is not a
// regular file or (when o.Generation is non-zero) its generation differs.
func (d *Dir) Stat(ctx context.Context, o object.Object) (object.Attrs, error) {
	p, err := dirPath(o.Bucket, o.Name)
	if err != nil {
		return object.Attrs{}, fmt.Errorf("stat %s: %w", o, err)
	}
	if err := ctx.Err(); err != nil {
		return object.Attrs{}, fmt.Errorf("stat %s: %w", o, err)
	}
	fi, err := d.root.Stat(p)
	if err != nil {
		return object.Attrs{}, fmt.Errorf("stat %s: %w", o, mapFileErr(err))
	}
	if !fi.Mode().IsRegular() {
		return object.Attrs{}, fmt.Errorf("stat %s: not a regular file: %w", o, object.ErrNotFound)
	}
	a := fileAttrs(o.Bucket, o.Name, fi)
	if o.Generation != 0 && a.Generation != o.Generation {
		return object.Attrs{}, fmt.Errorf("stat %s: live generation is %d: %w", o, a.Generation, object.ErrNotFound)
	}
	return a, nil
}

// NewRangeReader reads n bytes at off of bucket/name, after checking that
// the file is still generation o.Generation (any generation if zero). At
// EOF the reader checks again and returns object.ErrGenerationChanged instead of
// io.EOF if the file was modified while being read. A range past the end
// of the file yields fewer bytes.
func (d *Dir) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	p, err := dirPath(o.Bucket, o.Name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", o, err)
	}
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("read %s: invalid range %d+%d", o, off, n)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", o, err)
	}
	// O_NONBLOCK: opening a FIFO planted in the tree must not hang.
	f, err := d.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", o, mapFileErr(err))
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		err = fmt.Errorf("read %s: %w", o, err)
	case !fi.Mode().IsRegular():
		err = fmt.Errorf("read %s: not a regular file: %w", o, object.ErrNotFound)
	case o.Generation != 0 && fi.ModTime().UnixNano() != o.Generation:
		err = fmt.Errorf("read %s: file has generation %d: %w", o, fi.ModTime().UnixNano(), object.ErrGenerationChanged)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &dirReader{f: f, sr: io.NewSectionReader(f, off, n), o: o, gen: fi.ModTime().UnixNano()}, nil
}

// dirReader reads a section of one file and re-checks its generation at EOF.
type dirReader struct {
	f   *os.File
	sr  *io.SectionReader
	o   object.Object
	gen int64
}

func (r *dirReader) Read(p []byte) (int, error) {
	n, err := r.sr.Read(p)
	if err == io.EOF {
		fi, serr := r.f.Stat()
		switch {
		case serr != nil:
			err = fmt.Errorf("read %s: %w", r.o, serr)
		case fi.ModTime().UnixNano() != r.gen:
			err = fmt.Errorf("read %s: modified during read: %w", r.o, object.ErrGenerationChanged)
		}
	}
	return n, err
}

func (r *dirReader) Close() error { return r.f.Close() }

// List yields the regular files under <root>/<bucket> whose names start
// with prefix, in byte-wise name order (as GCS lists), walking directories
// lazily and skipping those that cannot hold a match. Symbolic links to
// directories are not followed.
func (d *Dir) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	return func(yield func(object.Attrs, error) bool) {
		if err := checkDirElem(bucket); err != nil {
			yield(object.Attrs{}, fmt.Errorf("list %s: %w", bucket, err))
			return
		}
		br, err := d.root.OpenRoot(bucket)
		if err != nil {
			yield(object.Attrs{}, fmt.Errorf("list %s: %w", bucket, mapFileErr(err)))
			return
		}
		defer br.Close()
		w := dirWalk{ctx: ctx, root: br, bucket: bucket, prefix: prefix, yield: yield}
		w.walk("")
	}
}

// dirWalk is the state of one List.
type dirWalk struct {
	ctx            context.Context // only for the duration of List
	root           *os.Root        // the bucket directory
	bucket, prefix string
	yield          func(object.Attrs, error) bool
}

// walk lists dir ("" or a '/'-terminated path in the bucket) and reports
// false once yield has asked to stop.
func (w *dirWalk) walk(dir string) bool {
	if err := w.ctx.Err(); err != nil {
		return w.yield(object.Attrs{}, fmt.Errorf("list %s: %w", w.bucket, err))
	}
	entries, err := w.readDir(dir)
	if err != nil {
		return w.yield(object.Attrs{}, fmt.Errorf("list gs://%s/%s: %w", w.bucket, dir, err))
	}
	for _, e := range entries {
		name := dir + e.Name()
		if e.IsDir() {
			sub := name + "/"
			if (strings.HasPrefix(sub, w.prefix) || strings.HasPrefix(w.prefix, sub)) && !w.walk(sub) {
				return false
			}
			continue
		}
		if !strings.HasPrefix(name, w.prefix) {
			continue
		}
		fi, err := w.info(e, name)
		if err != nil {
			return w.yield(object.Attrs{}, fmt.Errorf("list gs://%s/%s: %w", w.bucket, name, err))
		}
		if fi != nil && fi.Mode().IsRegular() && !w.yield(fileAttrs(w.bucket, name, fi), nil) {
			return false
		}
	}
	return true
}

// info returns the attributes of entry e at name, following a symbolic
// link if it stays inside the root. It returns nil, nil for entries that
// are not objects: gone since readDir, dangling or escaping links.
func (w *dirWalk) info(e fs.DirEntry, name string) (fs.FileInfo, error) {
	if e.Type()&fs.ModeSymlink != 0 {
		fi, err := w.root.Stat(name)
		if err != nil {
			return nil, nil
		}
		return fi, nil
	}
	fi, err := e.Info()
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return fi, err
}

// readDir returns dir's entries sorted so that a depth-first walk visits
// names in byte order: a directory sorts as its name plus "/".
func (w *dirWalk) readDir(dir string) ([]fs.DirEntry, error) {
	f, err := w.root.Open(cmp.Or(strings.TrimSuffix(dir, "/"), "."))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	key := func(e fs.DirEntry) string {
		if e.IsDir() {
			return e.Name() + "/"
		}
		return e.Name()
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(key(a), key(b)) })
	return entries, nil
}

// fileAttrs describes a regular file as an object.
func fileAttrs(bucket, name string, fi fs.FileInfo) object.Attrs {
	mt := fi.ModTime()
	return object.Attrs{
		Object:  object.Object{Bucket: bucket, Name: name, Generation: mt.UnixNano()},
		Size:    fi.Size(),
		Updated: mt,
	}
}

// dirPath returns the path of bucket/name relative to the root, or
// object.ErrInvalidName.
func dirPath(bucket, name string) (string, error) {
	if err := checkDirElem(bucket); err != nil {
		return "", err
	}
	if name == "" || name == "." || strings.IndexByte(name, 0) >= 0 || path.Clean(name) != name || !filepath.IsLocal(name) {
		return "", fmt.Errorf("%q is not a canonical relative path: %w", name, object.ErrInvalidName)
	}
	p := filepath.Join(bucket, filepath.FromSlash(name))
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("%q is not a local path: %w", p, object.ErrInvalidName)
	}
	return p, nil
}

// checkDirElem accepts a bucket name usable as one directory name.
func checkDirElem(bucket string) error {
	if bucket == "" || bucket == "." || bucket == ".." || strings.ContainsAny(bucket, "/\x00") ||
		!filepath.IsLocal(bucket) {
		return fmt.Errorf("bucket %q is not a directory name: %w", bucket, object.ErrInvalidName)
	}
	return nil
}

// mapFileErr maps "no such file" (and a file where a directory was
// expected) to object.ErrNotFound, keeping the original error in the chain.
func mapFileErr(err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%w: %w", object.ErrNotFound, err)
	}
	return err
}
