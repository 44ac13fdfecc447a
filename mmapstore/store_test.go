package mmapstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

func TestAcquireWarmIsAHit(t *testing.T) {
	e := newEnv(t, 0)
	data := pattern(1, 100_000)
	o := e.put(t, "d/x.bin", data)
	s, _ := newStore(t, e.cache.Opener(), Config{})

	l := acquire(t, s, o)
	if !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("Bytes: %d bytes differ from the object's %d", len(l.Bytes()), len(data))
	}
	if a := l.Attrs(); a.Name != o.Name || a.Size != int64(len(data)) || a.Generation == 0 {
		t.Errorf("Attrs = %+v; want name %q, size %d and a generation", a, o.Name, len(data))
	}
	l2 := acquire(t, s, o)
	if &l2.Bytes()[0] != &l.Bytes()[0] {
		t.Error("second lease has another mapping; want the shared one")
	}
	release(t, l)
	release(t, l2)
	l3 := acquire(t, s, o) // from the idle mapping
	release(t, l3)
	st := s.Stats()
	if st.Opens != 1 || st.Maps != 1 || st.Hits != 2 || st.Mappings != 1 || st.IdleMappings != 1 || st.Leases != 0 {
		t.Errorf("Stats = %+v; want 1 open, 1 map, 2 hits, 1 idle mapping, no leases", st)
	}
	if n := e.dl.Calls(); n != 1 {
		t.Errorf("downloads = %d; want 1", n)
	}
	checkInvariants(t, s)
}

func TestReleaseTwice(t *testing.T) {
	e := newEnv(t, 0)
	o := e.put(t, "x", pattern(2, 4096))
	s, _ := newStore(t, e.cache.Opener(), Config{MaxIdleMappings: -1})

	l := acquire(t, s, o)
	cp := l // a copy is the same lease
	release(t, l)
	for i, r := range []Lease{l, cp, {}} {
		if err := r.Release(); !errors.Is(err, ErrReleased) {
			t.Errorf("Release #%d after release = %v; want ErrReleased", i, err)
		}
	}
	if b := l.Bytes(); b != nil {
		t.Errorf("Bytes after Release = %d bytes; want nil", len(b))
	}
	if _, err := l.Array(); !errors.Is(err, ErrReleased) {
		t.Errorf("Array after Release: %v; want ErrReleased", err)
	}
	// A new lease reuses the released slot; the old copy still must not
	// release it.
	l2 := acquire(t, s, o)
	if err := cp.Release(); !errors.Is(err, ErrReleased) {
		t.Errorf("stale copy Release = %v; want ErrReleased", err)
	}
	if !bytes.Equal(l2.Bytes(), pattern(2, 4096)) {
		t.Error("new lease's bytes changed after a stale Release")
	}
	release(t, l2)
	if st := s.Stats(); st.Maps != 2 || st.Unmaps != 2 || st.Mappings != 0 {
		t.Errorf("Stats = %+v; want 2 maps, 2 unmaps, none left", st)
	}
}

// TestConcurrentLeases shares a few mappings among many goroutines; run it
// with -race.
func TestConcurrentLeases(t *testing.T) {
	e := newEnv(t, 0)
	const objects, workers, rounds = 3, 8, 200
	objs := make([]object.Object, objects)
	datas := make([][]byte, objects)
	for i := range objs {
		datas[i] = pattern(byte(10+i), 8192+i)
		objs[i] = e.put(t, fmt.Sprintf("c/%d", i), datas[i])
	}
	s, _ := newStore(t, e.cache.Opener(), Config{MaxIdleMappings: 1})
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				i := (w + r) % objects
				l, err := s.Acquire(context.Background(), objs[i])
				if err != nil {
					errs <- err
					return
				}
				b := l.Bytes()
				if len(b) != len(datas[i]) || b[len(b)-1] != datas[i][len(b)-1] {
					errs <- fmt.Errorf("object %d: wrong bytes", i)
				}
				if err := l.Release(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkInvariants(t, s)
	if st := s.Stats(); st.Leases != 0 || st.IdleMappings > 1 || st.Mappings != st.IdleMappings {
		t.Errorf("Stats = %+v; want no leases and at most 1 idle mapping, nothing else", st)
	}
}

func TestLastReleaseUnmaps(t *testing.T) {
	e := newEnv(t, 0)
	o := e.put(t, "u", pattern(3, 3*4096))
	s, _ := newStore(t, e.cache.Opener(), Config{})

	l1, l2 := acquire(t, s, o), acquire(t, s, o)
	path := pathOf(l1)
	if n := len(mapsOf(t, path)); n != 1 {
		t.Fatalf("%d mappings of %s; want 1 shared", n, path)
	}
	release(t, l1)
	if err := s.Trim(); err != nil { // leased: Trim leaves it
		t.Fatal(err)
	}
	if n := len(mapsOf(t, path)); n != 1 {
		t.Fatalf("after one of two releases and a Trim: %d mappings; want 1", n)
	}
	release(t, l2) // idle now: still mapped, for the next Acquire
	if n := len(mapsOf(t, path)); n != 1 {
		t.Fatalf("idle: %d mappings; want 1", n)
	}
	if err := s.Trim(); err != nil {
		t.Fatal(err)
	}
	if lines := mapsOf(t, path); len(lines) != 0 {
		t.Errorf("after Trim: still mapped: %q", lines)
	}
	if st := s.Stats(); st.Mappings != 0 || st.Unmaps != 1 {
		t.Errorf("Stats = %+v; want no mappings, 1 unmap", st)
	}
	// Nothing holds the entry any more: the cache may evict it.
	if res, err := e.cache.Evict(context.Background(), "b", "u"); err != nil || res.Evicted != 1 || res.Pending != 0 {
		t.Errorf("Evict = %+v, %v; want the entry evicted at once", res, err)
	}
}

func TestIdleBounds(t *testing.T) {
	e := newEnv(t, 0)
	var objs []object.Object
	for i := range 4 {
		objs = append(objs, e.put(t, fmt.Sprintf("i/%d", i), pattern(byte(i), 1000)))
	}
	s, _ := newStore(t, e.cache.Opener(), Config{MaxIdleMappings: 2, MaxIdleBytes: 2500})
	for _, o := range objs {
		release(t, acquire(t, s, o))
	}
	if st := s.Stats(); st.IdleMappings != 2 || st.IdleBytes != 2000 || st.Mappings != 2 {
		t.Errorf("Stats = %+v; want 2 idle mappings of 2000 bytes", st)
	}
	// The two most recently released stay: acquiring them opens nothing.
	opens := s.Stats().Opens
	release(t, acquire(t, s, objs[3]))
	release(t, acquire(t, s, objs[2]))
	if d := s.Stats().Opens - opens; d != 0 {
		t.Errorf("re-acquiring the idle mappings made %d opens; want 0", d)
	}
	release(t, acquire(t, s, objs[0]))
	if d := s.Stats().Opens - opens; d != 1 {
		t.Errorf("acquiring an evicted mapping made %d opens; want 1", d)
	}

	big := e.put(t, "i/big", pattern(9, 3000)) // over MaxIdleBytes alone
	release(t, acquire(t, s, big))
	if st := s.Stats(); st.IdleBytes > 2500 {
		t.Errorf("idle bytes %d exceed the 2500-byte bound", st.IdleBytes)
	}
	checkInvariants(t, s)
}

func TestCloseWithOutstandingLeases(t *testing.T) {
	e := newEnv(t, 0)
	leased := e.put(t, "c/leased", pattern(4, 5000))
	idle := e.put(t, "c/idle", pattern(5, 6000))
	s, _ := newStore(t, e.cache.Opener(), Config{})
	l := acquire(t, s, leased)
	li := acquire(t, s, idle)
	idlePath := pathOf(li)
	release(t, li)

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if lines := mapsOf(t, idlePath); len(lines) != 0 {
		t.Errorf("idle mapping survived Close: %q", lines)
	}
	if !bytes.Equal(l.Bytes(), pattern(4, 5000)) {
		t.Error("outstanding lease's bytes changed after Close")
	}
	if _, err := s.Acquire(context.Background(), leased); !errors.Is(err, ErrClosed) {
		t.Errorf("Acquire after Close: %v; want ErrClosed", err)
	}
	if err := s.View(context.Background(), leased, func([]byte) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Errorf("View after Close: %v; want ErrClosed", err)
	}
	path := pathOf(l)
	release(t, l)
	if lines := mapsOf(t, path); len(lines) != 0 {
		t.Errorf("mapping survived its last Release after Close: %q", lines)
	}
	if st := s.Stats(); st.Mappings != 0 || st.Leases != 0 {
		t.Errorf("Stats = %+v; want nothing left", st)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v; want ErrClosed", err)
	}
}

func TestZeroLengthObject(t *testing.T) {
	e := newEnv(t, 0)
	o := e.put(t, "z/empty.npy", nil)
	s, _ := newStore(t, e.cache.Opener(), Config{})
	l := acquire(t, s, o)
	if b := l.Bytes(); b == nil || len(b) != 0 {
		t.Errorf("Bytes = %v (nil %t); want an empty, non-nil slice", b, b == nil)
	}
	if _, err := l.Array(); err == nil {
		t.Error("Array of an empty .npy succeeded; want an error")
	}
	if st := s.Stats(); st.Mappings != 1 || st.MappedBytes != 0 {
		t.Errorf("Stats = %+v; want 1 mapping of 0 bytes", st)
	}
	release(t, l)
	if err := s.View(context.Background(), o, func(b []byte) error {
		if len(b) != 0 {
			return fmt.Errorf("View saw %d bytes", len(b))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

func TestView(t *testing.T) {
	e := newEnv(t, 0)
	data := pattern(6, 777)
	o := e.put(t, "v", data)
	s, _ := newStore(t, e.cache.Opener(), Config{})
	errStop := errors.New("stop")
	err := s.View(context.Background(), o, func(b []byte) error {
		if !bytes.Equal(b, data) {
			t.Error("View: wrong bytes")
		}
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Errorf("View = %v; want fn's error", err)
	}
	if st := s.Stats(); st.Leases != 0 {
		t.Errorf("View left %d leases", st.Leases)
	}
	_, err = s.Acquire(context.Background(), object.Object{Bucket: "b", Name: "missing"})
	if !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Acquire(missing) = %v; want a wrapped object.ErrNotFound", err)
	}
}

// TestLeasePinsAgainstEviction fills a small cache: a leased object is not
// evicted to make room, and Trim lets an idle one go.
func TestLeasePinsAgainstEviction(t *testing.T) {
	const size = 256 << 10
	e := newEnv(t, size+size/2) // room for one object
	a := e.put(t, "p/a", pattern(7, size))
	b := e.put(t, "p/b", pattern(8, size))
	s, _ := newStore(t, e.cache.Opener(), Config{})

	la := acquire(t, s, a)
	if _, err := s.Acquire(context.Background(), b); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Acquire(b) with a leased = %v; want tier.ErrNoSpace", err)
	}
	if !bytes.Equal(la.Bytes(), pattern(7, size)) {
		t.Error("leased bytes changed")
	}
	release(t, la)
	// The idle mapping still holds a's entry until trimmed.
	if _, err := s.Acquire(context.Background(), b); !errors.Is(err, tier.ErrNoSpace) {
		t.Fatalf("Acquire(b) with a idle = %v; want tier.ErrNoSpace", err)
	}
	if err := s.Trim(); err != nil {
		t.Fatal(err)
	}
	lb := acquire(t, s, b)
	if !bytes.Equal(lb.Bytes(), pattern(8, size)) {
		t.Error("b: wrong bytes")
	}
	release(t, lb)
}

// sizedFile is a File over a real file that claims size bytes, as a copy
// corrupted behind the cache's back would (the real cache checks sizes
// itself, so only a stub can hand one over).
type sizedFile struct {
	path string
	off  int64
	size int64
}

func (f sizedFile) Path() string  { return f.path }
func (f sizedFile) Offset() int64 { return f.off }
func (f sizedFile) Size() int64   { return f.size }
func (f sizedFile) Stale() bool   { return false }
func (f sizedFile) Close() error  { return nil }
func (f sizedFile) Attrs() object.Attrs {
	return object.Attrs{Object: object.Object{Bucket: "b", Name: "m"}, Size: f.size}
}

// sizedOpener opens every object as its sizedFile.
type sizedOpener struct{ f sizedFile }

func (o sizedOpener) Open(context.Context, object.Object) (File, error) { return o.f, nil }

func TestFileSizeMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(path, pattern(9, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t, sizedOpener{sizedFile{path: path, size: 8192}}, Config{})
	if l, err := s.Acquire(context.Background(), object.Object{Bucket: "b", Name: "m"}); err == nil {
		l.Release()
		t.Error("Acquire of a file shorter than its object succeeded; want an error (reads would fault)")
	}
	if st := s.Stats(); st.Mappings != 0 || st.Leases != 0 {
		t.Errorf("Stats = %+v; want nothing mapped", st)
	}
}

// TestPackedFile maps an object that starts inside a file holding others
// (the cache packs small objects into segment files): the lease holds its
// bytes alone, and one reaching past the file's end is refused.
func TestPackedFile(t *testing.T) {
	page := int64(os.Getpagesize())
	path := filepath.Join(t.TempDir(), "segment")
	data := pattern(5, int(3*page))
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t, sizedOpener{sizedFile{path: path, off: page, size: 1000}}, Config{})
	l, err := s.Acquire(context.Background(), object.Object{Bucket: "b", Name: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l.Bytes(), data[page:page+1000]) {
		t.Error("a packed object's lease does not hold its own bytes")
	}
	l.Release()
	s2, _ := newStore(t, sizedOpener{sizedFile{path: path, off: 2 * page, size: page + 1}}, Config{})
	if l, err := s2.Acquire(context.Background(), object.Object{Bucket: "b", Name: "m"}); err == nil {
		l.Release()
		t.Error("Acquire of an object reaching past its file's end succeeded; want an error")
	}
}

// TestPackedCache maps small objects that a real cache packed into one
// segment file: each lease holds its own object's bytes, no more.
func TestPackedCache(t *testing.T) {
	dir := cachetest.NewDir(t)
	c := cachetest.Cache(t, dir.Src, cachetest.NewDownloader(t, dir.Src), tier.Config{})
	s, _ := newStore(t, c.Opener(), Config{})
	sizes := []int{1, 5000, 4096, 70000}
	var objs []object.Object
	for i, n := range sizes {
		objs = append(objs, dir.Put(t, "b", fmt.Sprintf("p%d", i), pattern(byte(i+1), n)))
	}
	paths := map[string]bool{}
	for i, o := range objs {
		l, err := s.Acquire(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(l.Bytes(), pattern(byte(i+1), sizes[i])) {
			t.Errorf("%s: the lease's %d bytes are not the object's %d", o.Name, len(l.Bytes()), sizes[i])
		}
		paths[l.m.path] = true
		l.Release()
	}
	if len(paths) != 1 {
		t.Errorf("the objects were mapped from %d files; want one segment", len(paths))
	}
}
