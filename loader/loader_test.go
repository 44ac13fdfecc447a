package loader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// unevenData has shards of different sizes: 61 samples.
var unevenData = synth.Dataset{Rows: []int{7, 12, 3, 9, 11, 5, 8, 6}, RowBytes: 24}

func TestEveryEpochIsAPermutation(t *testing.T) {
	e := newEnv(t, unevenData)
	n := int(unevenData.Samples())
	for _, mode := range []sampler.Mode{sampler.ShardWindow, sampler.Global, sampler.Sequential} {
		for _, world := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s/world%d", mode, world), func(t *testing.T) {
				perEpoch := map[int]map[int64]int{}
				lengths := map[int]int{}
				for rank := range world {
					l := e.open(t, Config{BatchSize: 4, Shuffle: mode, Seed: 11, Window: 3, Rank: rank, World: world,
						Epoch: 2, Epochs: 2, Tail: sampler.Drop})
					got := drain(t, l, unevenData)
					if len(got) != 2*l.BatchesPerEpoch() {
						t.Fatalf("rank %d: %d batches; want %d", rank, len(got), 2*l.BatchesPerEpoch())
					}
					count := 0
					for _, b := range got {
						if perEpoch[b.epoch] == nil {
							perEpoch[b.epoch] = map[int64]int{}
						}
						for _, id := range b.ids {
							perEpoch[b.epoch][id]++
							count++
						}
					}
					lengths[rank] = count
				}
				for r := range world {
					if lengths[r] != lengths[0] {
						t.Errorf("rank %d read %d samples, rank 0 %d", r, lengths[r], lengths[0])
					}
				}
				for ep, ids := range perEpoch {
					if len(ids) != n-n%world {
						t.Errorf("epoch %d: %d distinct samples; want %d", ep, len(ids), n-n%world)
					}
					for id, c := range ids {
						if c != 1 || id < 0 || id >= int64(n) {
							t.Errorf("epoch %d: sample %d read %d times", ep, id, c)
						}
					}
				}
			})
		}
	}
}

func flatten(bs []batchIDs) []int64 {
	var out []int64
	for _, b := range bs {
		out = append(out, b.ids...)
	}
	return out
}

func TestResume(t *testing.T) {
	e := newEnv(t, unevenData)
	cfg := Config{BatchSize: 5, Seed: 3, Window: 2, Rank: 1, World: 2, Epochs: 3}
	l := e.open(t, cfg)
	var states []State
	var full []batchIDs
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		full = append(full, batchIDs{b.Epoch, b.Index, slices.Clone(b.IDs)})
		b.Release()
		states = append(states, l.State())
	}
	per := l.BatchesPerEpoch()
	if len(full) != 3*per {
		t.Fatalf("%d batches; want %d", len(full), 3*per)
	}
	for _, k := range []int{0, 1, per - 1, per, per + 2, 3*per - 1} {
		st := states[k]
		if want := (State{Epoch: (k + 1) / per, Batch: (k + 1) % per}); st.Epoch != want.Epoch || st.Batch != want.Batch {
			t.Errorf("State after batch %d = %+v; want %+v", k, st, want)
		}
		c := cfg
		c.Resume = &st
		c.Rank = 0 // a state saved by any rank resumes every rank
		r := e.open(t, c)
		c.Resume, c.Rank = nil, 0
		ref := drain(t, e.open(t, c), unevenData)
		if got := drain(t, r, unevenData); !slices.Equal(flatten(got), flatten(ref[k+1:])) {
			t.Errorf("resume after batch %d: got %v; want %v", k, flatten(got), flatten(ref[k+1:]))
		}
	}
	other := cfg
	other.Seed = 4
	bad := states[0]
	other.Resume = &bad
	other.Dataset = e.dataset(t)
	if _, err := New(FromStore(e.store), other); !errors.Is(err, ErrResume) {
		t.Errorf("resume with another seed: %v; want ErrResume", err)
	}
	out := cfg
	out.Dataset = e.dataset(t)
	out.Resume = &State{Epoch: 7}
	if _, err := New(FromStore(e.store), out); !errors.Is(err, ErrResume) {
		t.Errorf("resume past the last epoch: %v; want ErrResume", err)
	}
}

func TestSeedsAndEpochsDiffer(t *testing.T) {
	e := newEnv(t, unevenData)
	read := func(seed uint64, epoch int) []int64 {
		return flatten(drain(t, e.open(t, Config{BatchSize: 8, Seed: seed, Epoch: epoch}), unevenData))
	}
	a := read(1, 0)
	if !slices.Equal(a, read(1, 0)) {
		t.Errorf("same seed and epoch differ")
	}
	if slices.Equal(a, read(2, 0)) {
		t.Errorf("seeds 1 and 2 give the same order")
	}
	if slices.Equal(a, read(1, 1)) {
		t.Errorf("epochs 0 and 1 give the same order")
	}
}

func TestBatchCounts(t *testing.T) {
	e := newEnv(t, unevenData) // 61 samples
	tests := []struct {
		cfg      Config
		batches  int
		lastSize int
	}{
		{Config{BatchSize: 10}, 7, 1},
		{Config{BatchSize: 10, DropLast: true}, 6, 10},
		{Config{BatchSize: 10, World: 2}, 4, 1},                             // 31 each (wrapped)
		{Config{BatchSize: 10, World: 2, Tail: sampler.Drop}, 3, 10},        // 30 each
		{Config{BatchSize: 61, Shuffle: sampler.Sequential}, 1, 61},         // one batch
		{Config{BatchSize: 7, Shuffle: sampler.Sequential, World: 4}, 3, 2}, // 16 each
	}
	for _, tt := range tests {
		got := drain(t, e.open(t, tt.cfg), unevenData)
		if len(got) != tt.batches || len(got[len(got)-1].ids) != tt.lastSize {
			t.Errorf("%+v: %d batches, last of %d; want %d, last of %d",
				tt.cfg, len(got), len(got[len(got)-1].ids), tt.batches, tt.lastSize)
		}
	}
	tooBig := Config{Dataset: e.dataset(t), BatchSize: 100, DropLast: true}
	if _, err := New(FromStore(e.store), tooBig); !errors.Is(err, ErrConfig) {
		t.Errorf("batch larger than the epoch with DropLast: %v; want ErrConfig", err)
	}
}

func TestZeroCopy(t *testing.T) {
	data := synth.Uniform(4, 12, 16)
	e := newEnv(t, data)
	l := e.open(t, Config{BatchSize: 4, Shuffle: sampler.Sequential})
	var held []*Batch
	for {
		b, err := l.Next(context.Background())
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !b.ZeroCopy {
			t.Errorf("batch %d is not zero-copy", b.Index)
		}
		checkBatch(t, b, data)
		held = append(held, b)
		if len(held) == DefaultPrefetch { // every buffer is out: give them back
			if _, err := l.Next(context.Background()); !errors.Is(err, ErrHeld) {
				t.Fatalf("Next holding every buffer: %v; want ErrHeld", err)
			}
			for _, h := range held {
				h.Release()
				h.Release() // twice is harmless
			}
			held = held[:0]
		}
	}
	for _, h := range held {
		h.Release()
	}
	if st := l.Stats(); st.ZeroCopy != 12 || st.BytesGathered != 0 {
		t.Errorf("Stats: %d zero-copy batches, %d bytes gathered; want 12, 0", st.ZeroCopy, st.BytesGathered)
	}
	c := e.open(t, Config{BatchSize: 4, Shuffle: sampler.Sequential, CopyAlways: true})
	drain(t, c, data)
	if st := c.Stats(); st.ZeroCopy != 0 || st.BytesGathered != 12*4*(16+8) {
		t.Errorf("CopyAlways Stats: %d zero-copy, %d bytes gathered", st.ZeroCopy, st.BytesGathered)
	}
}

// TestZeroCopyOutlivesClose: a zero-copy batch keeps its shard leased, and
// stays readable, after the Loader is closed, until released.
func TestZeroCopyOutlivesClose(t *testing.T) {
	data := synth.Uniform(2, 8, 32)
	e := newEnv(t, data)
	l := e.open(t, Config{BatchSize: 8, Shuffle: sampler.Sequential})
	b, err := l.Next(context.Background())
	if err != nil || !b.ZeroCopy {
		t.Fatalf("Next = %v, %v; want a zero-copy batch", b, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkBatch(t, b, data)
	if n := e.store.Stats().Leases; n != 2 {
		t.Errorf("%d leases while the batch is held; want 2 (x and y)", n)
	}
	b.Release()
	if n := e.store.Stats().Leases; n != 0 {
		t.Errorf("%d leases after Release", n)
	}
	if _, err := l.Next(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v; want ErrClosed", err)
	}
}

func TestCloseMidEpoch(t *testing.T) {
	e := newEnv(t, synth.Uniform(20, 10, 64))
	for _, hold := range []int{0, 1, 3} {
		l := e.open(t, Config{BatchSize: 3, Seed: 1, Window: 4, Epochs: 5})
		var held []*Batch
		for range hold {
			b, err := l.Next(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, b)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		checkNoGoroutines(t, l)
		for _, b := range held {
			b.Release()
		}
		if n := e.store.Stats().Leases; n != 0 {
			t.Errorf("holding %d: %d leases after Close and Release", hold, n)
		}
	}
}

// TestIDsMatchLoader: IDs predicts exactly what a Loader returns.
func TestIDsMatchLoader(t *testing.T) {
	e := newEnv(t, unevenData)
	for _, cfg := range []Config{
		{BatchSize: 4, Seed: 9, Window: 3, World: 3, Rank: 2, Epoch: 1, Epochs: 2},
		{BatchSize: 10, Shuffle: sampler.Global, DropLast: true, Epochs: 2, Resume: &State{Epoch: 0, Batch: 3}},
		{BatchSize: 7, Shuffle: sampler.Sequential, World: 2, Tail: sampler.Drop},
	} {
		cfg.Dataset = e.dataset(t)
		want := drain(t, e.open(t, cfg), unevenData)
		cfg.Dataset.Specs = nil
		seq, err := IDs(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got []batchIDs
		for b := range seq {
			got = append(got, batchIDs{b.Epoch, b.Index, slices.Clone(b.IDs)})
		}
		if len(got) != len(want) {
			t.Fatalf("%+v: IDs gave %d batches; the Loader %d", cfg, len(got), len(want))
		}
		for i := range got {
			if got[i].epoch != want[i].epoch || got[i].index != want[i].index || !slices.Equal(got[i].ids, want[i].ids) {
				t.Errorf("batch %d: IDs %+v; Loader %+v", i, got[i], want[i])
			}
		}
	}
	if _, err := IDs(Config{BatchSize: 0, Dataset: e.dataset(t)}); !errors.Is(err, ErrConfig) {
		t.Errorf("IDs with batch size 0: %v; want ErrConfig", err)
	}
}
