package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// copyChunk is how much one copy_file_range or sendfile call moves:
	// large enough that system calls cost nothing, small enough that a
	// cancelled copy stops within tens of milliseconds.
	copyChunk = 64 << 20
	// copyBuffer is the buffer of the user-space fallback copy.
	copyBuffer = 1 << 20
)

// errFallBack means a kernel copy method does not work for these files;
// the next one takes over from where it stopped.
var errFallBack = errors.New("tier: copy method unsupported")

// copyStep copies src to dst from offset off up to n in one way and
// returns the offset it reached.
type copyStep func(ctx context.Context, dst, src *os.File, off, n int64) (int64, error)

// copyFile copies the first n bytes of src to dst, both from offset 0, in
// the kernel where it can: copy_file_range (within one filesystem, or
// across those that support it), then sendfile (between any two files, as
// from a disk filesystem to tmpfs, where copy_file_range fails with EXDEV),
// then pread/pwrite through a 1 MiB buffer. A src shorter than n is an
// error. It checks ctx between chunks.
func copyFile(ctx context.Context, dst, src *os.File, n int64) error {
	var off int64
	for _, step := range []copyStep{copyRange, sendFile, copyBuffered} {
		var err error
		off, err = step(ctx, dst, src, off, n)
		if !errors.Is(err, errFallBack) {
			return err
		}
	}
	return nil // not reached: copyBuffered never falls back
}

// copySection copies the n bytes of src at off to the start of dst through
// a buffer: for packed objects, which are small. A src that ends early is an
// error.
func copySection(dst, src *os.File, off, n int64) error {
	w, err := io.Copy(io.NewOffsetWriter(dst, 0), io.NewSectionReader(src, off, n))
	if err != nil {
		return fmt.Errorf("copy: %w", err)
	}
	if w != n {
		return fmt.Errorf("copy: %d bytes of %d: %w", w, n, io.ErrUnexpectedEOF)
	}
	return nil
}

// copyRange copies with copy_file_range(2).
func copyRange(ctx context.Context, dst, src *os.File, off, n int64) (int64, error) {
	woff := off
	for off < n {
		if err := ctx.Err(); err != nil {
			return off, context.Cause(ctx)
		}
		w, err := unix.CopyFileRange(int(src.Fd()), &off, int(dst.Fd()), &woff, int(min(n-off, copyChunk)), 0)
		if err := copyErr("copy_file_range", w, err, off, n); err != nil {
			return off, err
		}
	}
	return off, nil
}

// sendFile copies with sendfile(2), which writes at dst's file offset.
func sendFile(ctx context.Context, dst, src *os.File, off, n int64) (int64, error) {
	if _, err := dst.Seek(off, io.SeekStart); err != nil {
		return off, fmt.Errorf("copy: %w", err)
	}
	for off < n {
		if err := ctx.Err(); err != nil {
			return off, context.Cause(ctx)
		}
		w, err := unix.Sendfile(int(dst.Fd()), int(src.Fd()), &off, int(min(n-off, copyChunk)))
		if err := copyErr("sendfile", w, err, off, n); err != nil {
			return off, err
		}
	}
	return off, nil
}

// copyErr classifies the result of one kernel copy call that moved w bytes
// and left the source offset at off: nil to go on, errFallBack for a method
// these files do not support, or a copy error.
func copyErr(op string, w int, err error, off, n int64) error {
	switch {
	case errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN):
		return nil
	case errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EBADF):
		return errFallBack
	case err != nil:
		return fmt.Errorf("copy: %s: %w", op, err)
	case w == 0:
		return fmt.Errorf("copy: source ended at %d of %d bytes: %w", off, n, io.ErrUnexpectedEOF)
	}
	return nil
}

// copyBuffered copies through a user-space buffer.
func copyBuffered(ctx context.Context, dst, src *os.File, off, n int64) (int64, error) {
	buf := make([]byte, min(n-off, copyBuffer))
	for off < n {
		if err := ctx.Err(); err != nil {
			return off, context.Cause(ctx)
		}
		r, err := src.ReadAt(buf[:min(n-off, int64(len(buf)))], off)
		if r > 0 {
			if _, werr := dst.WriteAt(buf[:r], off); werr != nil {
				return off, fmt.Errorf("copy: %w", werr)
			}
			off += int64(r)
		}
		if errors.Is(err, io.EOF) && off < n {
			return off, fmt.Errorf("copy: source ended at %d of %d bytes: %w", off, n, io.ErrUnexpectedEOF)
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return off, fmt.Errorf("copy: %w", err)
		}
	}
	return off, nil
}
