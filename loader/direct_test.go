package loader

import (
	"context"
	"errors"
	"testing"

	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/object"
)

func TestDirectReadsEveryShardEachEpoch(t *testing.T) {
	data := synth.Dataset{Rows: []int{32, 32, 32, 32}, RowBytes: 16}
	e := newEnv(t, data)
	d := e.dataset(t)
	direct := Direct(e.src)
	l, err := New(direct, Config{Dataset: d, BatchSize: 8, Seed: 3, Epochs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := drain(t, l, data)
	if want := 2 * 4 * 32 / 8; len(got) != want {
		t.Fatalf("%d batches, want %d", len(got), want)
	}
	var size int64
	for a, err := range e.src.List(context.Background(), testBucket, "train/") {
		if err != nil {
			t.Fatal(err)
		}
		size += a.Size
	}
	if direct.Bytes() < 2*size {
		t.Errorf("direct read %d bytes over 2 epochs of a %d-byte dataset, want every shard each epoch", direct.Bytes(), size)
	}
}

func TestDirectMissingObject(t *testing.T) {
	e := newEnv(t, synth.Dataset{Rows: []int{4}, RowBytes: 8})
	_, err := Direct(e.src).Acquire(context.Background(), object.Object{Bucket: testBucket, Name: "train/nope.npy"})
	if !errors.Is(err, object.ErrNotFound) {
		t.Fatalf("Acquire of a missing object: %v, want ErrNotFound", err)
	}
}
