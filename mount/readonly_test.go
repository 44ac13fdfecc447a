package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
)

// TestWritesFailEROFS tries every kind of write through the mount.
func TestWritesFailEROFS(t *testing.T) {
	e := newEnv(t, emulator.Options{Objects: dataset()}, fetch.Config{})
	_, mp := e.mount(t, e.config(datasetRoots...), nil)
	dir := filepath.Join(mp, "data", "dir")
	file := filepath.Join(dir, "page.bin")
	now := time.Now()
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"open O_WRONLY", func() error { return openClose(file, os.O_WRONLY) }},
		{"open O_RDWR", func() error { return openClose(file, os.O_RDWR) }},
		{"open O_TRUNC", func() error { return openClose(file, os.O_RDONLY|os.O_TRUNC) }},
		{"create", func() error { return openClose(filepath.Join(dir, "new"), os.O_WRONLY|os.O_CREATE) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(dir, "newdir"), 0o755) }},
		{"mknod", func() error { return unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644) }},
		{"unlink", func() error { return unix.Unlink(file) }},
		{"rmdir", func() error { return unix.Rmdir(filepath.Join(dir, "sub")) }},
		{"rename", func() error { return os.Rename(file, filepath.Join(dir, "moved")) }},
		{"link", func() error { return os.Link(file, filepath.Join(dir, "hard")) }},
		{"symlink", func() error { return os.Symlink("page.bin", filepath.Join(dir, "soft")) }},
		{"chmod", func() error { return os.Chmod(file, 0o644) }},
		{"chown", func() error { return os.Chown(file, os.Getuid(), os.Getgid()) }},
		{"truncate", func() error { return os.Truncate(file, 0) }},
		{"utimes", func() error { return os.Chtimes(file, now, now) }},
		{"setxattr", func() error { return unix.Setxattr(file, "user.x", []byte("1"), 0) }},
		{"removexattr", func() error { return unix.Removexattr(file, "user.x") }},
	} {
		if err := tc.op(); !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v; want EROFS", tc.name, err)
		}
	}
}

// openClose opens path with flag and closes it again.
func openClose(path string, flag int) error {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// TestNodesRefuseWrites calls the write operations on the nodes directly:
// the kernel's read-only mount stops them first, but a remount read-write
// must not make them succeed.
func TestNodesRefuseWrites(t *testing.T) {
	ctx := context.Background()
	var ro readOnly
	var fileOpen fileNode
	for _, tc := range []struct {
		name  string
		errno syscall.Errno
	}{
		{"Setattr", ro.Setattr(ctx, nil, nil, nil)},
		{"Setxattr", ro.Setxattr(ctx, "user.x", nil, 0)},
		{"Removexattr", ro.Removexattr(ctx, "user.x")},
		{"Create", func() syscall.Errno { _, _, _, en := ro.Create(ctx, "x", 0, 0, nil); return en }()},
		{"Tmpfile", func() syscall.Errno { _, _, _, en := ro.Tmpfile(ctx, 0, 0, nil); return en }()},
		{"Mkdir", func() syscall.Errno { _, en := ro.Mkdir(ctx, "x", 0, nil); return en }()},
		{"Mknod", func() syscall.Errno { _, en := ro.Mknod(ctx, "x", 0, 0, nil); return en }()},
		{"Link", func() syscall.Errno { _, en := ro.Link(ctx, nil, "x", nil); return en }()},
		{"Symlink", func() syscall.Errno { _, en := ro.Symlink(ctx, "t", "x", nil); return en }()},
		{"Unlink", ro.Unlink(ctx, "x")},
		{"Rmdir", ro.Rmdir(ctx, "x")},
		{"Rename", ro.Rename(ctx, "x", nil, "y", 0)},
		{"Write", func() syscall.Errno { _, en := ro.Write(ctx, nil, []byte("x"), 0); return en }()},
		{"Allocate", ro.Allocate(ctx, nil, 0, 1, 0)},
		{"CopyFileRange", func() syscall.Errno { _, en := ro.CopyFileRange(ctx, nil, 0, nil, nil, 0, 1, 0); return en }()},
		{"Open O_WRONLY", func() syscall.Errno { _, _, en := fileOpen.Open(ctx, syscall.O_WRONLY); return en }()},
		{"Open O_RDWR", func() syscall.Errno { _, _, en := fileOpen.Open(ctx, syscall.O_RDWR); return en }()},
		{"Open O_TRUNC", func() syscall.Errno { _, _, en := fileOpen.Open(ctx, syscall.O_TRUNC); return en }()},
	} {
		if tc.errno != syscall.EROFS {
			t.Errorf("%s = %v; want EROFS", tc.name, tc.errno)
		}
	}
}
