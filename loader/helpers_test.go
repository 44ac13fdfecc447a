package loader

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/tier"
)

// env is a dataset in a fetch.Dir source, a real downloader and tier.Cache
// over it, and an mmapstore.Store over the cache.
type env struct {
	root  string
	src   *fetch.Dir
	cache *tier.Cache
	store *mmapstore.Store
	data  synth.Dataset
}

const testBucket = "b"

// newEnv writes data under gs://b/train/ and opens a cache over it.
func newEnv(t testing.TB, data synth.Dataset) *env {
	t.Helper()
	d := cachetest.NewDir(t)
	if err := data.WriteDir(d.Root, testBucket, "train/"); err != nil {
		t.Fatal(err)
	}
	c := cachetest.Cache(t, d.Src, cachetest.NewDownloader(t, d.Src), tier.Config{})
	s := mmapstore.New(c.Opener(), mmapstore.Config{MaxIdleMappings: -1, Revalidate: -1})
	cachetest.CloseAtEnd(t, "Store", s, mmapstore.ErrClosed)
	t.Cleanup(func() { // runs first: every Loader of the test is closed by now
		checkNoGoroutines(t, nil)
		if n := s.Stats().Leases; n != 0 {
			t.Errorf("%d leases outstanding after every Loader closed", n)
		}
	})
	return &env{root: d.Root, src: d.Src, cache: c, store: s, data: data}
}

// dataset builds the env's dataset with FromPattern.
func (e *env) dataset(t testing.TB) Dataset {
	t.Helper()
	d, err := FromPattern(context.Background(), e.src, testBucket, "train/", synth.Pattern)
	if err != nil {
		t.Fatalf("FromPattern: %v", err)
	}
	return d
}

// open returns a Loader of the env's dataset with cfg (its Dataset set),
// closed at the end of the test, which then checks that no loader
// goroutine is left and no lease is outstanding.
func (e *env) open(t testing.TB, cfg Config) *Loader {
	t.Helper()
	if cfg.Dataset.Names == nil {
		cfg.Dataset = e.dataset(t)
	}
	l, err := New(FromStore(e.store), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		checkNoGoroutines(t, l)
	})
	return l
}

// checkNoGoroutines fails if a goroutine of l (one whose stack has a
// method call on l) is alive; nil l means any Loader's. Close waits for
// all of them, so none may be left after it.
func checkNoGoroutines(t testing.TB, l *Loader) {
	t.Helper()
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "cacheagent/loader.(*Loader)") {
			continue
		}
		if l == nil || strings.Contains(g, fmt.Sprintf("(%p", l)) {
			t.Errorf("goroutine left after Close:\n%s", g)
		}
	}
}

// batchIDs is what a test keeps of a batch.
type batchIDs struct {
	epoch, index int
	ids          []int64
}

// drain reads every batch, checks each one's arrays against its ids, and
// returns the ids.
func drain(t testing.TB, l *Loader, data synth.Dataset) []batchIDs {
	t.Helper()
	var out []batchIDs
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("Next after %d batches: %v", len(out), err)
		}
		checkBatch(t, b, data)
		out = append(out, batchIDs{b.Epoch, b.Index, append([]int64(nil), b.IDs...)})
		b.Release()
	}
}

// checkBatch verifies that the batch's rows are those of its ids.
func checkBatch(t testing.TB, b *Batch, data synth.Dataset) {
	t.Helper()
	x, ok := b.Array("x")
	if !ok {
		t.Fatalf("batch has no x")
	}
	y, _ := b.Array("y")
	ys, err := y.Int64s()
	if err != nil {
		t.Fatalf("y view: %v", err)
	}
	if x.Shape[0] != b.Len() || len(ys) != b.Len() || x.Shape[1] != data.RowBytes {
		t.Fatalf("batch %d/%d: x shape %v, %d ys, %d ids", b.Epoch, b.Index, x.Shape, len(ys), b.Len())
	}
	for i, id := range b.IDs {
		row, err := x.Row(i)
		if err != nil {
			t.Fatal(err)
		}
		if synth.RowID(row) != id || ys[i] != id {
			t.Fatalf("batch %d/%d sample %d: x holds %d, y %d; want id %d", b.Epoch, b.Index, i, synth.RowID(row), ys[i], id)
		}
	}
}

// An in-process cache takes plans and stages objects.
var (
	_ Planner = (*tier.Cache)(nil)
	_ Stager  = tier.Stager{}
)
