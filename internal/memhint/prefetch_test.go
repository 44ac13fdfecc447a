package memhint

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBytes prefetches ordinary memory, empty and odd-sized slices, and
// the pages of a mapping it then unmaps: none of it may fault or change
// a byte.
func TestBytes(t *testing.T) {
	b := make([]byte, 10_000)
	for i := range b {
		b[i] = byte(i)
	}
	Bytes(b)
	Bytes(b[:0])
	Bytes(b[1:2])
	Bytes(b[63:130])
	Bytes(nil)
	for i := range b {
		if b[i] != byte(i) {
			t.Fatalf("byte %d changed", i)
		}
	}
	page := os.Getpagesize()
	m, err := unix.Mmap(-1, 0, 4*page, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	unmapped := m[: 4*page : 4*page]
	if err := unix.Munmap(m); err != nil {
		t.Fatal(err)
	}
	Bytes(unmapped) // a hint on unmapped memory is dropped, not a fault
}

func BenchmarkBytes1KiB(b *testing.B) {
	buf := make([]byte, 1<<10)
	for b.Loop() {
		Bytes(buf)
	}
}
