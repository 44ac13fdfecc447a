package checkpoint

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/object"
)

// takeParallel is how many files take checks, reads and fsyncs at once.
const takeParallel = 4

// castagnoli is the CRC32C table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// linkat hard-links name in dir as newname in newdir.
func linkat(dir *os.File, name string, newdir *os.File, newname string) error {
	return unix.Linkat(int(dir.Fd()), name, int(newdir.Fd()), newname, 0)
}

// found is a file found in the directory to save.
type found struct {
	name     string // '/'-separated path in the directory
	size     int64
	mtime    time.Time
	dev, ino uint64
}

// scan lists the regular files under root (the directory to save), with
// their sizes, refusing anything else (ErrUnsafeFile: symlinks, devices,
// sockets, pipes), names no object can have, and files or directories of
// another user than owner (ErrPermission; the top directory of a staged
// save is the agent's).
func scan(root *os.Root, u object.URI, owner *Owner, staged bool) ([]found, error) {
	var out []found
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrPermission) {
			return fmt.Errorf("%w: the agent may not read %s (give it group rwx in a staging directory)",
				ErrPermission, p)
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !(staged && p == ".") {
			if err := checkOwner(fi, owner, p); err != nil {
				return err
			}
		}
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case d.IsDir():
			return nil
		case !fi.Mode().IsRegular():
			return NotRegular(p, fi.Mode())
		}
		if err := CheckName(u, p); err != nil {
			return err
		}
		if len(out) == MaxFiles {
			return fmt.Errorf("checkpoint: more than %d files", MaxFiles)
		}
		out = append(out, found{name: p, size: fi.Size(), mtime: fi.ModTime(), dev: st.Dev, ino: st.Ino})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// NotRegular is the ErrUnsafeFile error for name, of mode m.
func NotRegular(name string, m fs.FileMode) error {
	return fmt.Errorf("%w: %s is a %s", ErrUnsafeFile, name, kind(m))
}

// kind names a non-regular file mode.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	}
	return "special file"
}

// take moves each file of files from root into data (the save's data
// directory, on the same filesystem: a rename, nothing copied; else a
// copy) as data/<i>, checks that it is the file scan found and that it did
// not change meanwhile, computes its CRC32C and fsyncs it, then fsyncs
// data. On error it moves back what it moved (the directory is as it
// was; the copies are left in data for the caller to remove); on success
// undo does that, for a caller that fails later.
func take(root *os.Root, files []found, data string) (out []File, undo func() error, err error) {
	dd, err := os.Open(data)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer dd.Close()
	var moved []int // files renamed out of root, to move back on error
	putBack := func() error {
		d, err := os.Open(data)
		if err != nil {
			return fmt.Errorf("checkpoint: could not put the files back: %w", err)
		}
		defer d.Close()
		var errs []error
		for _, i := range moved {
			if rerr := renameIn(root, files[i].name, d, strconv.Itoa(i), true); rerr != nil {
				errs = append(errs, fmt.Errorf("checkpoint: could not put %s back: %w", files[i].name, rerr))
			}
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, putBack())
		}
	}()
	out = make([]File, len(files))
	// The files are checked, read and fsynced takeParallel at a time: the
	// reads use every CPU, and the fsyncs share the journal's commits.
	var g errgroup.Group
	g.SetLimit(takeParallel)
	var failed atomic.Bool
	for i, f := range files {
		if failed.Load() {
			break
		}
		dst := strconv.Itoa(i)
		rerr := renameIn(root, f.name, dd, dst, false)
		switch {
		case rerr == nil:
			moved = append(moved, i)
		case errors.Is(rerr, unix.EXDEV) || errors.Is(rerr, unix.EACCES) || errors.Is(rerr, unix.EPERM):
			// Another filesystem, or a directory the agent may read
			// but not change (it runs without CAP_DAC_OVERRIDE).
			if err := copyIn(root, f, dd, dst); err != nil {
				return nil, nil, errors.Join(err, g.Wait())
			}
		default:
			return nil, nil, errors.Join(fmt.Errorf("checkpoint: move %s: %w", f.name, rerr), g.Wait())
		}
		g.Go(func() error {
			crc, err := checkTaken(dd, dst, f, rerr == nil)
			if err != nil {
				failed.Store(true)
				return err
			}
			out[i] = File{Name: f.name, Size: f.size, CRC32C: crc}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	if err := dd.Sync(); err != nil {
		return nil, nil, fmt.Errorf("checkpoint: fsync %s: %w", data, err)
	}
	return out, putBack, nil
}

// renameIn renames name in root to dst in dir (back: dst in dir to name in
// root, never over a file at name: EEXIST), through file descriptors of
// both directories, so that no symlink is followed on the way.
func renameIn(root *os.Root, name string, dir *os.File, dst string, back bool) error {
	parent, base := path.Split(name)
	if parent == "" {
		parent = "."
	}
	pd, err := root.Open(parent)
	if err != nil {
		return err
	}
	defer pd.Close()
	if !back {
		return unix.Renameat(int(pd.Fd()), base, int(dir.Fd()), dst)
	}
	err = unix.Renameat2(int(dir.Fd()), dst, int(pd.Fd()), base, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) { // a filesystem without RENAME_NOREPLACE
		var st unix.Stat_t
		if unix.Fstatat(int(pd.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			return unix.EEXIST
		}
		err = unix.Renameat(int(dir.Fd()), dst, int(pd.Fd()), base)
	}
	return err
}

// copyIn copies f from root to dst in dir (another filesystem).
func copyIn(root *os.Root, f found, dir *os.File, dst string) error {
	src, err := root.OpenFile(f.name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("checkpoint: open %s: %w", f.name, err)
	}
	defer src.Close()
	fd, err := unix.Openat(int(dir.Fd()), dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("checkpoint: copy %s: %w", f.name, err)
	}
	out := os.NewFile(uintptr(fd), dst)
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		unix.Unlinkat(int(dir.Fd()), dst, 0)
		return fmt.Errorf("checkpoint: copy %s: %w", f.name, err)
	}
	if err := sameFile(src, f, false); err != nil {
		unix.Unlinkat(int(dir.Fd()), dst, 0)
		return err
	}
	// The copy keeps the file's modification time, which checkTaken
	// compares with scan's.
	ts := []unix.Timespec{unix.NsecToTimespec(f.mtime.UnixNano()), unix.NsecToTimespec(f.mtime.UnixNano())}
	if err := unix.UtimesNanoAt(int(dir.Fd()), dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		unix.Unlinkat(int(dir.Fd()), dst, 0)
		return fmt.Errorf("checkpoint: copy %s: %w", f.name, err)
	}
	return nil
}

// checkTaken opens dst in dir, checks it against f (the very file when it
// was moved, else a copy of its size, unchanged), fsyncs it and returns its
// CRC32C, read whole; a file that changes while it is read is ErrChanged.
func checkTaken(dir *os.File, dst string, f found, moved bool) (uint32, error) {
	fd, err := unix.Openat(int(dir.Fd()), dst, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) {
		return 0, fmt.Errorf("%w: the agent may not read %s (it runs without CAP_DAC_OVERRIDE: give the file "+
			"group read in a staging directory)", ErrPermission, f.name)
	}
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %s: %w", f.name, err)
	}
	r := os.NewFile(uintptr(fd), dst)
	defer r.Close()
	if err := sameFile(r, f, moved); err != nil {
		return 0, err
	}
	h := crc32.New(castagnoli)
	n, err := io.Copy(h, r)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: read %s: %w", f.name, err)
	}
	if n != f.size {
		return 0, fmt.Errorf("%w: %s: %d bytes read, %d found", ErrChanged, f.name, n, f.size)
	}
	if err := sameFile(r, f, false); err != nil {
		return 0, err
	}
	if err := r.Sync(); err != nil {
		return 0, fmt.Errorf("checkpoint: fsync %s: %w", f.name, err)
	}
	return h.Sum32(), nil
}

// sameFile checks r against f: its size and modification time (and, with
// inode, its device and inode: the very file scan found, not one put at
// its path since).
func sameFile(r *os.File, f found, inode bool) error {
	fi, err := r.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", f.name, err)
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s", ErrUnsafeFile, f.name)
	case inode && (st == nil || st.Dev != f.dev || st.Ino != f.ino):
		return fmt.Errorf("%w: %s was replaced by another file", ErrChanged, f.name)
	case fi.Size() != f.size || !fi.ModTime().Equal(f.mtime):
		return fmt.Errorf("%w: %s (%d bytes, modified %s; found %d bytes, modified %s)", ErrChanged, f.name,
			fi.Size(), fi.ModTime().Format(time.RFC3339Nano), f.size, f.mtime.Format(time.RFC3339Nano))
	}
	return nil
}
