package tier

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// copyCase copies n bytes of a file in srcDir to a file in dstDir with step
// (nil: copyFile) and returns the error and the bytes that arrived.
func copyCase(t *testing.T, srcDir, dstDir string, data []byte, n int64, step copyStep) ([]byte, error) {
	t.Helper()
	sp := filepath.Join(srcDir, "src")
	mustWrite(t, sp, data)
	src, err := os.Open(sp)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(dstDir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if step == nil {
		err = copyFile(context.Background(), dst, src, n)
	} else {
		var off int64
		off, err = step(context.Background(), dst, src, 0, n)
		if err == nil && off != n {
			t.Fatalf("copied to offset %d; want %d", off, n)
		}
	}
	got, rerr := os.ReadFile(dst.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	return got, err
}

func TestCopyFile(t *testing.T) {
	data := pattern(9, 3<<20+123)
	shm := shmDir(t)
	tests := []struct {
		name           string
		srcDir, dstDir string
		step           copyStep
	}{
		{"disk to shm", t.TempDir(), shm, nil},
		{"within a filesystem", t.TempDir(), t.TempDir(), nil},
		{"copy_file_range", t.TempDir(), t.TempDir(), copyRange},
		{"sendfile", t.TempDir(), shm, sendFile},
		{"buffered", t.TempDir(), shm, copyBuffered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := filepath.Join(tt.dstDir, tt.name)
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := copyCase(t, tt.srcDir, dst, data, int64(len(data)), tt.step)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("copy = %d bytes, %v; want the %d bytes, nil", len(got), err, len(data))
			}
		})
	}
	t.Run("short source", func(t *testing.T) {
		for _, step := range []copyStep{nil, copyBuffered} {
			_, err := copyCase(t, t.TempDir(), t.TempDir(), data[:1000], 2000, step)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("copy of a short source = %v; want io.ErrUnexpectedEOF", err)
			}
		}
	})
	t.Run("tmpfs full", func(t *testing.T) {
		_, err := copyCase(t, t.TempDir(), mountTmpfs(t, "1m"), data, int64(len(data)), nil)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("copy into a full tmpfs = %v; want ENOSPC", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		f, err := os.Create(filepath.Join(t.TempDir(), "x"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := copyFile(ctx, f, f, 10); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled copy = %v; want context.Canceled", err)
		}
	})
}
