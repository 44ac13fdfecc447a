package loader

import (
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// pageSize is the host's page size.
var pageSize = uintptr(os.Getpagesize())

// prefault asks the kernel to map every page of b now (MADV_POPULATE_READ,
// Linux 5.14 and later), so that gathering rows does not take a page fault
// every few rows: the opener pays for it once, ahead of the workers, with
// one system call (reading the pages in if they are not in memory yet). It
// is best effort: an older kernel's EINVAL is ignored, and so is any other
// error, since the gather faults the pages in anyway.
func prefault(b []byte) {
	if len(b) == 0 {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	aligned := (start + pageSize - 1) &^ (pageSize - 1) // madvise wants a page-aligned start
	if aligned >= end {
		return
	}
	off := aligned - start
	unix.Madvise(b[off:], unix.MADV_POPULATE_READ)
}
