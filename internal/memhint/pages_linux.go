package memhint

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageSize is the host's page size.
var pageSize = uintptr(os.Getpagesize())

// Pages asks the kernel to map every page of b, part of a file mapping,
// into the process now (MADV_POPULATE_READ, Linux 5.14 and later), reading
// in any that are not in memory, so that touching b later does not take a
// page fault every few kilobytes: the caller pays once, with one system
// call. It is best effort: an older kernel's EINVAL is ignored, and so is
// any other error, since reading b faults the pages in anyway. Pages
// already mapped still cost a walk of b's page tables, so callers populate
// a mapping once, not on every use.
func Pages(b []byte) {
	if len(b) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	aligned := (start + pageSize - 1) &^ (pageSize - 1) // madvise wants a page-aligned start
	if aligned >= end {
		return
	}
	unix.Madvise(b[aligned-start:], unix.MADV_POPULATE_READ)
}
