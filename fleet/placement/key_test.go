package placement

import (
	"testing"

	"github.com/cespare/xxhash/v2"
)

func TestChunks(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		size, chunk int64
		want        int
	}{
		{0, 8 * mib, 0},
		{-1, 8 * mib, 0},
		{1, 8 * mib, 1},
		{8 * mib, 8 * mib, 1},
		{8*mib + 1, 8 * mib, 2},
		{1 << 30, 8 * mib, 128},
		{256 * mib, DefaultChunkSize, 32},
	}
	for _, tt := range tests {
		if got := Chunks(tt.size, tt.chunk); got != tt.want {
			t.Errorf("Chunks(%d, %d) = %d; want %d", tt.size, tt.chunk, got, tt.want)
		}
	}
}

func TestChunkRange(t *testing.T) {
	tests := []struct {
		size, chunk int64
		i           int
		off, n      int64
	}{
		{10, 4, 0, 0, 4},
		{10, 4, 1, 4, 4},
		{10, 4, 2, 8, 2},
		{8, 4, 1, 4, 4},
		{1, 4, 0, 0, 1},
	}
	for _, tt := range tests {
		off, n := ChunkRange(tt.size, tt.chunk, tt.i)
		if off != tt.off || n != tt.n {
			t.Errorf("ChunkRange(%d, %d, %d) = %d, %d; want %d, %d", tt.size, tt.chunk, tt.i, off, n, tt.off, tt.n)
		}
	}
	// The chunks tile the object exactly.
	for _, size := range []int64{1, 7, 8, 9, 1000} {
		var next int64
		for i := range Chunks(size, 8) {
			off, n := ChunkRange(size, 8, i)
			if off != next || n <= 0 || n > 8 {
				t.Fatalf("ChunkRange(%d, 8, %d) = %d, %d; want offset %d", size, i, off, n, next)
			}
			next = off + n
		}
		if next != size {
			t.Errorf("chunks of %d bytes cover %d bytes", size, next)
		}
	}
}

func TestChunkPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
	}{
		{"Chunks zero chunk size", func() { Chunks(10, 0) }},
		{"ChunkRange negative index", func() { ChunkRange(10, 4, -1) }},
		{"ChunkRange past the end", func() { ChunkRange(10, 4, 3) }},
		{"ChunkRange empty object", func() { ChunkRange(0, 4, 0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", tt.name)
				}
			}()
			tt.f()
		})
	}
}

func TestKeyHashEncoding(t *testing.T) {
	// The length prefixes keep the bucket/object split in the hash.
	a := Key{Bucket: "a", Object: "bc"}
	b := Key{Bucket: "ab", Object: "c"}
	if a.hash() == b.hash() {
		t.Errorf("%v and %v hash alike", a, b)
	}
	base := Key{Bucket: "b", Object: "o", Generation: 1, Chunk: 2}
	for _, k := range []Key{
		{Bucket: "b", Object: "o", Generation: 2, Chunk: 2},
		{Bucket: "b", Object: "o", Generation: 1, Chunk: 3},
		{Bucket: "b", Object: "o", Generation: 2, Chunk: 1},
	} {
		if k.hash() == base.hash() {
			t.Errorf("%v and %v hash alike", k, base)
		}
	}
}

func TestKeyString(t *testing.T) {
	k := Key{Bucket: "b", Object: "dir/o", Generation: 42, Chunk: 3}
	if got, want := k.String(), "b/dir/o@42#3"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
}

func TestKeyHashIsXXHashOfEncoding(t *testing.T) {
	k := Key{Bucket: "bkt", Object: "train/x", Generation: 0x0102030405060708, Chunk: 9}
	enc := []byte{3, 'b', 'k', 't', 7, 't', 'r', 'a', 'i', 'n', '/', 'x', 8, 7, 6, 5, 4, 3, 2, 1, 9, 0, 0, 0, 0, 0, 0, 0}
	if got, want := k.hash(), xxhash.Sum64(enc); got != want {
		t.Errorf("%v hash = %#x; want xxhash64 of its encoding %#x", k, got, want)
	}
}
