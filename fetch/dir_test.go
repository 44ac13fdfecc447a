package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// newTestDir returns a Dir over a fresh temporary root, and the root.
func newTestDir(t *testing.T) (*Dir, string) {
	t.Helper()
	root := t.TempDir()
	d, err := NewDir(root)
	if err != nil {
		t.Fatalf("NewDir: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, root
}

// writeFile creates root/rel with data and a distinct modification time.
func writeFile(t *testing.T, root, rel string, data []byte, mtime time.Time) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)

func TestNewDirMissing(t *testing.T) {
	if _, err := NewDir(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("NewDir(missing) = nil error; want an error")
	}
}

func TestDirStat(t *testing.T) {
	d, root := newTestDir(t)
	data := emulator.Pattern(1, 1000)
	writeFile(t, root, "b/x/y.bin", data, t0)
	if err := os.Mkdir(filepath.Join(root, "b", "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	a, err := d.Stat(ctx, object.Object{Bucket: "b", Name: "x/y.bin"})
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	want := object.Attrs{Object: object.Object{Bucket: "b", Name: "x/y.bin", Generation: t0.UnixNano()}, Size: 1000, Updated: t0}
	if a.Object != want.Object || a.Size != want.Size || a.HasCRC32C || !a.Updated.Equal(t0) {
		t.Errorf("Stat = %+v; want %+v", a, want)
	}
	if _, err := d.Stat(ctx, a.Object); err != nil {
		t.Errorf("Stat(own generation) = %v; want nil", err)
	}
	for _, o := range []object.Object{
		{Bucket: "b", Name: "x/missing"},
		{Bucket: "b", Name: "x/y.bin/under-a-file"},
		{Bucket: "nobucket", Name: "x/y.bin"},
		{Bucket: "b", Name: "adir"},
		{Bucket: "b", Name: "x/y.bin", Generation: a.Generation + 1},
	} {
		if _, err := d.Stat(ctx, o); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("Stat(%v) error = %v; want ErrNotFound", o, err)
		}
	}
}

func TestDirInvalidNames(t *testing.T) {
	d, root := newTestDir(t)
	writeFile(t, root, "b/ok", []byte("x"), t0)
	writeFile(t, root, "secret", []byte("outside the bucket"), t0)
	ctx := context.Background()
	cases := []object.Object{
		{Bucket: "b", Name: ""},
		{Bucket: "b", Name: "../secret"},
		{Bucket: "b", Name: "x/../../secret"},
		{Bucket: "b", Name: "/etc/passwd"},
		{Bucket: "b", Name: "a/./ok"},
		{Bucket: "b", Name: "./ok"},
		{Bucket: "b", Name: "a//ok"},
		{Bucket: "b", Name: "ok/"},
		{Bucket: "b", Name: "."},
		{Bucket: "b", Name: ".."},
		{Bucket: "b", Name: "o\x00k"},
		{Bucket: "", Name: "ok"},
		{Bucket: ".", Name: "secret"},
		{Bucket: "..", Name: "etc/passwd"},
		{Bucket: "b/..", Name: "secret"},
		{Bucket: "b\x00", Name: "ok"},
	}
	for _, o := range cases {
		if _, err := d.Stat(ctx, o); !errors.Is(err, object.ErrInvalidName) {
			t.Errorf("Stat(%q/%q) error = %v; want ErrInvalidName", o.Bucket, o.Name, err)
		}
		if r, err := d.NewRangeReader(ctx, o, 0, 1); !errors.Is(err, object.ErrInvalidName) {
			if r != nil {
				r.Close()
			}
			t.Errorf("NewRangeReader(%q/%q) error = %v; want ErrInvalidName", o.Bucket, o.Name, err)
		}
	}
	for _, b := range []string{"", "..", "a/b"} {
		for _, err := range d.List(ctx, b, "") {
			if !errors.Is(err, object.ErrInvalidName) {
				t.Errorf("List(%q) error = %v; want ErrInvalidName", b, err)
			}
		}
	}
}

// TestDirOddButValidNames: names that are awkward but canonical work.
func TestDirOddButValidNames(t *testing.T) {
	d, root := newTestDir(t)
	ctx := context.Background()
	for i, name := range []string{"with space", "ü/名前.bin", "new\nline", "..dots", "...", "a\\b", "-rf"} {
		data := emulator.Pattern(uint64(i), 100+i)
		writeFile(t, root, "b/"+name, data, t0)
		a, err := d.Stat(ctx, object.Object{Bucket: "b", Name: name})
		if err != nil {
			t.Errorf("Stat(%q): %v", name, err)
			continue
		}
		if got := readAll(t, d, a.Object, 0, a.Size); !bytes.Equal(got, data) {
			t.Errorf("read %q: got %d bytes, not the file's", name, len(got))
		}
	}
}

func TestDirSymlinks(t *testing.T) {
	d, root := newTestDir(t)
	outside := t.TempDir()
	writeFile(t, outside, "secret", []byte("secret"), t0)
	writeFile(t, root, "b/real", []byte("real data"), t0)
	mustSymlink(t, filepath.Join(outside, "secret"), filepath.Join(root, "b", "abs-escape"))
	mustSymlink(t, "../../"+filepath.Base(outside)+"/secret", filepath.Join(root, "b", "rel-escape"))
	mustSymlink(t, "real", filepath.Join(root, "b", "inside"))
	ctx := context.Background()

	a, err := d.Stat(ctx, object.Object{Bucket: "b", Name: "inside"})
	if err != nil || a.Size != int64(len("real data")) {
		t.Errorf("Stat(inside link) = %+v, %v; want the target's attributes", a, err)
	}
	for _, name := range []string{"abs-escape", "rel-escape"} {
		o := object.Object{Bucket: "b", Name: name}
		if _, err := d.Stat(ctx, o); err == nil {
			t.Errorf("Stat(%s) = nil error; want a refusal", name)
		}
		if r, err := d.NewRangeReader(ctx, o, 0, 6); err == nil {
			r.Close()
			t.Errorf("NewRangeReader(%s) = nil error; want a refusal", name)
		}
	}
	var names []string
	for a, err := range d.List(ctx, "b", "") {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		names = append(names, a.Name)
	}
	if want := []string{"inside", "real"}; !equalStrings(names, want) {
		t.Errorf("List = %q; want %q", names, want)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("symlink: %v", err)
	}
}

func TestDirFIFOIsNotAnObject(t *testing.T) {
	d, root := newTestDir(t)
	if err := os.MkdirAll(filepath.Join(root, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "b", "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	o := object.Object{Bucket: "b", Name: "fifo"}
	if _, err := d.Stat(context.Background(), o); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Stat(fifo) error = %v; want ErrNotFound", err)
	}
	// Must return, not block waiting for a writer.
	if _, err := d.NewRangeReader(context.Background(), o, 0, 1); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("NewRangeReader(fifo) error = %v; want ErrNotFound", err)
	}
}

func readAll(t *testing.T, src object.Source, o object.Object, off, n int64) []byte {
	t.Helper()
	r, err := src.NewRangeReader(context.Background(), o, off, n)
	if err != nil {
		t.Fatalf("NewRangeReader(%v, %d, %d): %v", o, off, n, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %v [%d,+%d): %v", o, off, n, err)
	}
	return b
}

func TestDirRangeReader(t *testing.T) {
	d, root := newTestDir(t)
	data := emulator.Pattern(3, 10000)
	writeFile(t, root, "b/f", data, t0)
	o := object.Object{Bucket: "b", Name: "f", Generation: t0.UnixNano()}
	cases := []struct {
		off, n int64
		want   []byte
	}{
		{0, 10000, data},
		{0, 0, nil},
		{1234, 1, data[1234:1235]},
		{9000, 5000, data[9000:]}, // past the end: short
		{20000, 10, nil},
	}
	for _, tc := range cases {
		if got := readAll(t, d, o, tc.off, tc.n); !bytes.Equal(got, tc.want) {
			t.Errorf("range (%d, %d): got %d bytes; want %d", tc.off, tc.n, len(got), len(tc.want))
		}
	}
	if _, err := d.NewRangeReader(context.Background(), o, -1, 5); err == nil {
		t.Error("NewRangeReader(off -1) = nil error; want an error")
	}
	stale := o
	stale.Generation--
	if _, err := d.NewRangeReader(context.Background(), stale, 0, 5); !errors.Is(err, object.ErrGenerationChanged) {
		t.Errorf("NewRangeReader(stale generation) error = %v; want ErrGenerationChanged", err)
	}
}

// TestDirModifiedDuringRead: a file modified after the reader opened fails
// at EOF rather than passing off mixed bytes.
func TestDirModifiedDuringRead(t *testing.T) {
	d, root := newTestDir(t)
	writeFile(t, root, "b/f", emulator.Pattern(4, 5000), t0)
	o := object.Object{Bucket: "b", Name: "f", Generation: t0.UnixNano()}
	r, err := d.NewRangeReader(context.Background(), o, 0, 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := io.ReadFull(r, make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "b/f", emulator.Pattern(5, 5000), t0.Add(time.Second))
	if _, err := io.ReadAll(r); !errors.Is(err, object.ErrGenerationChanged) {
		t.Errorf("read after modification error = %v; want ErrGenerationChanged", err)
	}
}

func TestDirList(t *testing.T) {
	d, root := newTestDir(t)
	files := []string{"a.txt", "a/b", "a/c/d", "a-c", "b", "ab/x", "z/y/x"}
	for i, f := range files {
		writeFile(t, root, "bk/"+f, []byte(f), t0.Add(time.Duration(i)*time.Second))
	}
	if err := os.MkdirAll(filepath.Join(root, "bk", "empty", "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cases := []struct {
		prefix string
		want   []string
	}{
		// Byte order: '-' < '.' < '/' < 'b'.
		{"", []string{"a-c", "a.txt", "a/b", "a/c/d", "ab/x", "b", "z/y/x"}},
		{"a", []string{"a-c", "a.txt", "a/b", "a/c/d", "ab/x"}},
		{"a/", []string{"a/b", "a/c/d"}},
		{"a/c", []string{"a/c/d"}},
		{"z/y/x", []string{"z/y/x"}},
		{"nothing", nil},
	}
	for _, tc := range cases {
		var got []string
		for a, err := range d.List(ctx, "bk", tc.prefix) {
			if err != nil {
				t.Fatalf("List(%q): %v", tc.prefix, err)
			}
			if a.Size != int64(len(a.Name)) || a.Generation != a.Updated.UnixNano() || a.HasCRC32C {
				t.Errorf("List(%q) attrs %+v inconsistent with the file", tc.prefix, a)
			}
			got = append(got, a.Name)
		}
		if !equalStrings(got, tc.want) {
			t.Errorf("List(%q) = %q; want %q", tc.prefix, got, tc.want)
		}
	}

	n := 0
	for range d.List(ctx, "bk", "") {
		n++
		break
	}
	if n != 1 {
		t.Errorf("List stopped after %d items; want 1", n)
	}
	for _, err := range d.List(ctx, "missing", "") {
		if !errors.Is(err, object.ErrNotFound) {
			t.Errorf("List(missing bucket) error = %v; want ErrNotFound", err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range d.List(cctx, "bk", "") {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("List(cancelled) error = %v; want context.Canceled", err)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
