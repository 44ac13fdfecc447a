package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// A client of the daemon moves files itself, with its user's permissions:
// the daemon may not see the client's directories (systemd's ProtectHome,
// another container) nor change them (it runs without CAP_DAC_OVERRIDE).
// Stage moves a directory's files into a staging directory the daemon gave
// (GiveDir) before a save; Place moves a restored checkpoint out of one.

// Stage moves the regular files under src into dst (a staging directory),
// at the same relative paths: renamed where it can (the same filesystem,
// nothing copied), else copied, a copy checked against a file changed
// meanwhile (ErrChanged). Anything but directories and regular files is
// refused (ErrUnsafeFile) before a file moves. On error nothing has moved;
// on success undo moves the files back (and removes the copies), for a
// save the daemon then refuses.
func Stage(src, dst string) (undo func() error, err error) {
	var files []string
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		switch {
		case err != nil:
			return err
		case d.Type().IsRegular():
			files = append(files, rel)
		case !d.IsDir():
			return NotRegular(filepath.ToSlash(rel), d.Type())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", src, err)
	}
	var moved, copied []string
	undo = func() error {
		var errs []error
		for _, rel := range slices.Backward(moved) {
			if err := os.Rename(filepath.Join(dst, rel), filepath.Join(src, rel)); err != nil {
				errs = append(errs, fmt.Errorf("checkpoint: could not put %s back: %w", rel, err))
			}
		}
		for _, rel := range copied {
			os.Remove(filepath.Join(dst, rel))
		}
		return errors.Join(errs...)
	}
	for _, rel := range files {
		from, to := filepath.Join(src, rel), filepath.Join(dst, rel)
		// Group write: in a directory given by an ACL, the mask, without
		// which the agent could not rename the files out.
		if err := os.MkdirAll(filepath.Dir(to), 0o775); err != nil {
			return nil, errors.Join(fmt.Errorf("checkpoint: %w", err), undo())
		}
		err := os.Rename(from, to)
		switch {
		case err == nil:
			moved = append(moved, rel)
			if err := readableByAgent(to); err != nil {
				return nil, errors.Join(err, undo())
			}
			continue
		case !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM):
			return nil, errors.Join(fmt.Errorf("checkpoint: move %s: %w", rel, err), undo())
		}
		copied = append(copied, rel)
		if err := copyChecked(from, to, rel); err != nil {
			return nil, errors.Join(err, undo())
		}
	}
	return undo, nil
}

// readableByAgent adds group read to the file at p if it lacks it: in a
// directory given by an ACL the group bits are the ACL's mask, which
// bounds what the agent may do with the file.
func readableByAgent(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if fi.Mode().Perm()&0o040 != 0 {
		return nil
	}
	if err := os.Chmod(p, fi.Mode().Perm()|0o040); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// copyChecked copies the regular file from to a new file to; a file that
// changes meanwhile is ErrChanged.
func copyChecked(from, to, name string) error {
	r, err := os.OpenFile(from, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer r.Close()
	before, err := r.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if !before.Mode().IsRegular() {
		return NotRegular(name, before.Mode())
	}
	w, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	_, err = io.Copy(w, r)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var after fs.FileInfo
		if after, err = r.Stat(); err == nil && (after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime())) {
			err = fmt.Errorf("%w: %s", ErrChanged, name)
		}
	}
	if err != nil {
		os.Remove(to)
		return fmt.Errorf("checkpoint: copy %s: %w", name, err)
	}
	return nil
}

// Place moves the files under from (a restored checkpoint in a directory
// the daemon gave) into dir, created if missing, at the same relative
// paths: renamed where it can (a hard link into the cache stays one),
// else copied and fsynced. A file already at one of the paths is an error
// before anything moves: nothing is overwritten. It returns how many
// files it copied, and removes what is left of from.
func Place(from, dir string) (copied int, err error) {
	var files []string
	err = filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(dir, rel)); err == nil {
			return fmt.Errorf("%s exists: nothing is overwritten", filepath.Join(dir, rel))
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("checkpoint: restore into %s: %w", dir, err)
	}
	for _, rel := range files {
		src, dst := filepath.Join(from, rel), filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return copied, fmt.Errorf("checkpoint: %w", err)
		}
		err := unix.Renameat2(unix.AT_FDCWD, src, unix.AT_FDCWD, dst, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) { // a filesystem without RENAME_NOREPLACE: checked above
			err = os.Rename(src, dst)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
			return copied, fmt.Errorf("checkpoint: restore %s: %w", dst, err)
		}
		if err := copyChecked(src, dst, rel); err != nil {
			return copied, err
		}
		if err := syncFile(dst); err != nil {
			return copied, err
		}
		copied++
	}
	os.RemoveAll(from) // its top may stay: the daemon's, emptied at its restart
	return copied, nil
}

// syncFile fsyncs the file at p.
func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: fsync %s: %w", p, err)
	}
	return nil
}
