//go:build !linux

package memhint

// Pages does nothing where MADV_POPULATE_READ does not exist: reading the
// memory faults its pages in.
func Pages([]byte) {}
