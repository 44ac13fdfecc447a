//go:build linux

package mmapstore

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// rssOf returns the resident size in bytes that /proc/self/smaps reports
// for the mapping starting at b's first byte.
func rssOf(t testing.TB, b []byte) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatalf("smaps: %v", err)
	}
	defer f.Close()
	start := fmt.Sprintf("%x-", uintptr(unsafe.Pointer(unsafe.SliceData(b))))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, start) {
			in = true
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			kb, err := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no mapping at %s in /proc/self/smaps (scan error %v)", start, sc.Err())
	return 0
}

// TestPopulate maps an object's pages in once per mapping: after Populate
// the whole mapping is resident in the process although nothing read it,
// and further calls, through any lease, are free. A released lease's
// Populate does nothing.
func TestPopulate(t *testing.T) {
	e := newEnv(t, 0)
	const size = 1 << 20
	o := e.put(t, "p/x.bin", pattern(3, size))
	s, _ := newStore(t, e.cache.Opener(), Config{})
	l := acquire(t, s, o)
	if rss := rssOf(t, l.Bytes()); rss >= size {
		t.Fatalf("a fresh mapping has %d bytes resident before anything read it; want fewer than %d", rss, size)
	}
	l.Populate()
	if rss := rssOf(t, l.Bytes()); rss != size {
		t.Fatalf("after Populate %d bytes resident; want the whole %d (MADV_POPULATE_READ needs Linux 5.14)", rss, size)
	}
	l2 := acquire(t, s, o)
	l2.Populate() // the same mapping: once is enough
	l3 := l2
	release(t, l2)
	l3.Populate() // released: nothing
	release(t, l)
	var zero Lease
	zero.Populate()
	checkInvariants(t, s)
}
