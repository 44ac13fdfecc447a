package tier

import (
	"context"
	"fmt"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// indexRecords reads every entry record of c's index.
func indexRecords(t *testing.T, c *Cache) map[string]record {
	t.Helper()
	recs := make(map[string]record)
	err := c.idx.scan(func(k, v []byte) {
		r, err := decodeRecord(v)
		if err != nil {
			t.Errorf("record %q: %v", k, err)
		}
		recs[string(k)] = r
	})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestFlushWritesOnlyDirtyLiveEntries checks the flusher's list of dirty
// entries: a flush writes the access times of the entries used since the
// last one, and never brings back the record of an entry dropped in
// between (it was dirty when it left).
func TestFlushWritesOnlyDirtyLiveEntries(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 0))
	ctx := context.Background()
	var objs []object.Object
	for i := range 4 {
		a := env.put(t, "bkt", fmt.Sprintf("f/%d", i), pattern(i, 100+i))
		objs = append(objs, a.Object)
		openRead(t, c, a.Object, pattern(i, 100+i))
	}
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	pending := len(c.dirty)
	c.mu.Unlock()
	if pending != 0 {
		t.Fatalf("%d entries listed dirty after a flush; want 0", pending)
	}
	before := indexRecords(t, c)

	openRead(t, c, objs[1], pattern(1, 101)) // dirty, flushed
	openRead(t, c, objs[2], pattern(2, 102)) // dirty, then evicted before the flush
	if res, err := c.Evict(ctx, "bkt", "f/2"); err != nil || res.Evicted != 1 {
		t.Fatalf("Evict(f/2) = %+v, %v; want 1 evicted", res, err)
	}
	if err := flushAll(c); err != nil {
		t.Fatal(err)
	}
	after := indexRecords(t, c)
	if _, ok := after[indexKey("bkt", "f/2")]; ok {
		t.Errorf("the record of evicted f/2 is back in the index after a flush")
	}
	e1, _ := c.Lookup("bkt", "f/1")
	k0, k1 := indexKey("bkt", "f/0"), indexKey("bkt", "f/1")
	if got, want := after[k1].access, e1.LastAccess.UnixNano(); got != want || got == before[k1].access {
		t.Errorf("f/1 access in the index = %d (was %d); want the entry's %d", got, before[k1].access, want)
	}
	if after[k0] != before[k0] {
		t.Errorf("f/0, unused since the last flush, was rewritten: %+v, was %+v", after[k0], before[k0])
	}
	checkInvariants(t, c)
}
