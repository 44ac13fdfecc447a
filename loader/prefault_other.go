//go:build !linux

package loader

// prefault does nothing where MADV_POPULATE_READ does not exist.
func prefault([]byte) {}
