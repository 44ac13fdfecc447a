package loader

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/npy"
	"github.com/cacheagent/cacheagent/object"
)

// Direct returns a Source that reads every acquired object whole from src
// into memory with one stream, on every Acquire, and caches nothing: what a
// loader without a cache does, and the baseline the benchmarks and the demo
// compare the cache against. Bytes counts what it has read.
func Direct(src object.Source) *DirectSource { return &DirectSource{src: src} }

// DirectSource is the Source made by Direct. It is safe for concurrent use.
type DirectSource struct {
	src   object.Source
	bytes atomic.Int64
}

// Bytes returns the bytes read from the object store so far.
func (d *DirectSource) Bytes() int64 { return d.bytes.Load() }

// Acquire implements Source: it stats o, reads it whole and parses it.
func (d *DirectSource) Acquire(ctx context.Context, o object.Object) (Lease, error) {
	a, err := d.src.Stat(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("loader: direct read: %w", err)
	}
	r, err := d.src.NewRangeReader(ctx, a.Object, 0, a.Size)
	if err != nil {
		return nil, fmt.Errorf("loader: direct read: %w", err)
	}
	defer r.Close()
	b := make([]byte, a.Size)
	n, err := io.ReadFull(r, b)
	d.bytes.Add(int64(n))
	if err != nil {
		return nil, fmt.Errorf("loader: direct read %s: %d of %d bytes: %w", a.Object, n, a.Size, err)
	}
	return memLease{b: b, name: a.Object.String()}, nil
}

// memLease is a Lease on an object's bytes in Go memory; Release leaves
// them to the garbage collector.
type memLease struct {
	b    []byte
	name string
}

// Array implements Lease: the bytes parsed as a .npy array.
func (m memLease) Array() (array.Array, error) {
	arr, err := npy.Parse(m.b)
	if err != nil {
		return array.Array{}, fmt.Errorf("loader: direct read %s: %w", m.name, err)
	}
	return arr, nil
}

// Bytes implements BytesLease.
func (m memLease) Bytes() []byte { return m.b }

// Release implements Lease.
func (memLease) Release() error { return nil }
