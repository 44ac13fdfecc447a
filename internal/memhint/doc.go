// Package memhint hints the CPU to load memory into its caches ahead of
// use, without waiting for it: the loader's gather issues these for the
// rows it copies next, so that the misses of many small random rows
// overlap instead of each stalling its copy.
//
// The hint never faults (a prefetch of an unmapped address is dropped)
// and never changes memory; on architectures without an implementation it
// does nothing.
//
// Pages is the same idea one level down: it asks the kernel to map a file
// mapping's pages into the process ahead of use, so that the reads that
// follow take no page faults.
package memhint

// Line is the cache-line stride the hints step by.
const Line = 64
