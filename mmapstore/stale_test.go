package mmapstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// TestRevalidateMovesToNewGeneration replaces an object at the source: the
// Store serves the mapped generation until its revalidation is due, then
// maps the new one; the old lease keeps its bytes, and its mapping goes
// with its last release.
func TestRevalidateMovesToNewGeneration(t *testing.T) {
	e := newEnv(t, 0)
	old, fresh := pattern(1, 5000), pattern(2, 6000)
	o := e.put(t, "g/x", old)
	s, clk := newStore(t, e.cache.Opener(tier.WithRevalidate(0)), Config{Revalidate: time.Second})

	l1 := acquire(t, s, o)
	oldPath := pathOf(l1)
	e.put(t, "g/x", fresh)
	l := acquire(t, s, o) // not due yet: the mapped generation, no Open
	if !bytes.Equal(l.Bytes(), old) || s.Stats().Opens != 1 {
		t.Errorf("before revalidation: %d bytes, %d opens; want the old generation and 1 open",
			len(l.Bytes()), s.Stats().Opens)
	}
	release(t, l)

	clk.advance(time.Second)
	l2 := acquire(t, s, o)
	if !bytes.Equal(l2.Bytes(), fresh) {
		t.Fatalf("after revalidation: %d bytes; want the new generation's %d", len(l2.Bytes()), len(fresh))
	}
	if !bytes.Equal(l1.Bytes(), old) {
		t.Error("old lease's bytes changed")
	}
	if g1, g2 := l1.Attrs().Generation, l2.Attrs().Generation; g1 == g2 {
		t.Errorf("both leases hold generation %d", g1)
	}
	if st := s.Stats(); st.Mappings != 2 || st.Opens != 2 {
		t.Errorf("Stats = %+v; want 2 mappings (old still leased), 2 opens", st)
	}
	release(t, l1)
	if lines := mapsOf(t, oldPath); len(lines) != 0 {
		t.Errorf("superseded mapping survived its last release: %q", lines)
	}
	release(t, l2)
	if st := s.Stats(); st.Mappings != 1 || st.IdleMappings != 1 {
		t.Errorf("Stats = %+v; want only the new mapping, idle", st)
	}
	checkInvariants(t, s)
}

// TestStaleReopensAtOnce makes the cache replace a mapped copy through
// another Open: the next Acquire sees the handle Stale and moves to the new
// copy without waiting for the revalidation interval.
func TestStaleReopensAtOnce(t *testing.T) {
	e := newEnv(t, 0)
	o := e.put(t, "s/x", pattern(3, 4000))
	s, _ := newStore(t, e.cache.Opener(), Config{Revalidate: -1})

	l1 := acquire(t, s, o)
	e.put(t, "s/x", pattern(4, 4000))
	h, err := e.cache.Open(context.Background(), o, tier.WithRevalidate(0)) // another reader
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !l1.m.file.Stale() {
		t.Fatal("the replaced copy's handle is not stale")
	}
	l2 := acquire(t, s, o)
	if !bytes.Equal(l2.Bytes(), pattern(4, 4000)) || !bytes.Equal(l1.Bytes(), pattern(3, 4000)) {
		t.Error("want the new copy for the new lease and the old one for the old lease")
	}
	release(t, l1)
	release(t, l2)
	if st := s.Stats(); st.Mappings != 1 || st.Opens != 2 {
		t.Errorf("Stats = %+v; want 1 mapping left, 2 opens", st)
	}
}

// TestStaleCopyOfExactGeneration acquires one generation by number after
// the cache replaced it: the cache can only offer the replaced (stale) copy
// that a lease holds, and the Store serves it without opening it again on
// every Acquire.
func TestStaleCopyOfExactGeneration(t *testing.T) {
	e := newEnv(t, 0)
	data := pattern(5, 3000)
	e.put(t, "x/g", data)
	s, _ := newStore(t, e.cache.Opener(), Config{Revalidate: -1})
	l1 := acquire(t, s, object.Object{Bucket: "b", Name: "x/g"})
	o := l1.Attrs().Object // with its generation

	l2 := acquire(t, s, o)
	e.put(t, "x/g", pattern(6, 3000))
	h, err := e.cache.Open(context.Background(), object.Object{Bucket: "b", Name: "x/g"}, tier.WithRevalidate(0))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	opens := s.Stats().Opens
	for range 3 {
		l := acquire(t, s, o)
		if !bytes.Equal(l.Bytes(), data) {
			t.Fatal("exact generation: wrong bytes")
		}
		release(t, l)
	}
	if d := s.Stats().Opens - opens; d != 1 {
		t.Errorf("3 Acquires of a stale-only copy made %d opens; want 1", d)
	}
	release(t, l1)
	release(t, l2)
	if st := s.Stats(); st.Mappings != 0 { // both keys' mappings were of the replaced copy
		t.Errorf("Stats = %+v; want no mappings", st)
	}
	if _, err := s.Acquire(context.Background(), o); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Acquire of a generation gone everywhere = %v; want object.ErrNotFound", err)
	}
}

// TestRemovedFileUnderLease removes the cached file behind the cache's
// back. The lease's mapping keeps the pages; once the cache notices, the
// Store maps the copy the cache fetches again.
func TestRemovedFileUnderLease(t *testing.T) {
	e := newEnv(t, 0)
	data := pattern(7, 3*4096+5)
	o := e.put(t, "r/x", data)
	s, clk := newStore(t, e.cache.Opener(), Config{Revalidate: time.Second})

	l1 := acquire(t, s, o)
	path := pathOf(l1)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(l1.Bytes(), data) {
		t.Fatal("lease's bytes changed after rm")
	}
	if lines := mapsOf(t, path); len(lines) != 1 || !strings.HasSuffix(lines[0], "(deleted)") {
		t.Errorf("/proc/self/maps lines for %s: %q; want one, deleted", path, lines)
	}

	clk.advance(time.Second) // revalidation: the cache notices the file is gone
	l2 := acquire(t, s, o)
	if !bytes.Equal(l2.Bytes(), data) || !bytes.Equal(l1.Bytes(), data) {
		t.Error("wrong bytes after the refetch")
	}
	if n := e.dl.Calls(); n != 2 {
		t.Errorf("downloads = %d; want 2 (the refetch)", n)
	}
	release(t, l1)
	for _, line := range mapsOf(t, path) {
		if strings.HasSuffix(line, "(deleted)") {
			t.Errorf("the removed file is still mapped after its lease's release: %q", line)
		}
	}
	release(t, l2)
	checkInvariants(t, s)
}

// TestRemovedFileWhileIdle is TestRemovedFileUnderLease with the mapping
// idle when the cache notices: the Store lets go of it and maps the
// refetched copy in the same Acquire.
func TestRemovedFileWhileIdle(t *testing.T) {
	e := newEnv(t, 0)
	data := pattern(8, 10_000)
	o := e.put(t, "r/y", data)
	s, clk := newStore(t, e.cache.Opener(), Config{Revalidate: time.Second})

	l1 := acquire(t, s, o)
	path := pathOf(l1)
	release(t, l1)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	l2 := acquire(t, s, o)
	if !bytes.Equal(l2.Bytes(), data) {
		t.Error("wrong bytes after the refetch")
	}
	if n := e.dl.Calls(); n != 2 {
		t.Errorf("downloads = %d; want 2", n)
	}
	release(t, l2)
	if lines := mapsOf(t, path+" (deleted)"); len(lines) != 0 {
		t.Errorf("the removed file is still mapped: %q", lines)
	}
}

// gatedOpener blocks the Opens it is armed for until the gate opens.
type gatedOpener struct {
	tier.Opener
	armed   atomic.Bool
	entered chan struct{} // closed when an armed Open starts
	gate    chan struct{} // an armed Open waits for this
	opens   atomic.Int64
}

func (g *gatedOpener) Open(ctx context.Context, o object.Object) (File, error) {
	g.opens.Add(1)
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	h, err := g.Opener.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return h, nil
}

// TestRevalidationDoesNotBlockReaders holds one revalidating Open: other
// Acquires meanwhile are served from the current mapping without Open.
func TestRevalidationDoesNotBlockReaders(t *testing.T) {
	e := newEnv(t, 0)
	o := e.put(t, "rv", pattern(9, 2000))
	g := &gatedOpener{Opener: e.cache.Opener(), entered: make(chan struct{}), gate: make(chan struct{})}
	s, clk := newStore(t, g, Config{Revalidate: time.Second})
	release(t, acquire(t, s, o))

	clk.advance(time.Second)
	g.armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // unblocks the Open if the test fails early
	done := make(chan error, 1)
	wg.Go(func() {
		l, err := s.Acquire(ctx, o)
		if err == nil {
			err = l.Release()
		}
		done <- err
	})
	<-g.entered
	for range 5 {
		release(t, acquire(t, s, o))
	}
	if n := g.opens.Load(); n != 2 {
		t.Errorf("Opens while one revalidation is in flight = %d; want 2 (the first and the revalidation)", n)
	}
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Maps != 1 {
		t.Errorf("Stats = %+v; want the revalidated copy kept (1 map)", st)
	}
}

// TestStaleIdleMappingsAreSwept lets the cache replace an idle mapping's
// copy: an Acquire of another object after the sweep interval takes it down,
// so it does not hold the replaced copy.
func TestStaleIdleMappingsAreSwept(t *testing.T) {
	e := newEnv(t, 0)
	a := e.put(t, "sw/a", pattern(1, 3000))
	b := e.put(t, "sw/b", pattern(2, 3000))
	s, clk := newStore(t, e.cache.Opener(), Config{Revalidate: time.Second})
	la := acquire(t, s, a)
	path := pathOf(la)
	release(t, la)
	release(t, acquire(t, s, b))

	e.put(t, "sw/a", pattern(3, 3000))
	h, err := e.cache.Open(context.Background(), a, tier.WithRevalidate(0))
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	clk.advance(time.Second)
	release(t, acquire(t, s, b))
	if lines := mapsOf(t, path); len(lines) != 0 {
		t.Errorf("stale idle mapping survived the sweep: %q", lines)
	}
	if st := s.Stats(); st.Mappings != 1 {
		t.Errorf("Stats = %+v; want only b's mapping", st)
	}
}
