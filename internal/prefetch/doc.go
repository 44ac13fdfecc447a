// Package prefetch hints the CPU to load memory into its caches ahead of
// use, without waiting for it: the loader's gather issues these for the
// rows it copies next, so that the misses of many small random rows
// overlap instead of each stalling its copy.
//
// The hint never faults (a prefetch of an unmapped address is dropped)
// and never changes memory; on architectures without an implementation it
// does nothing.
package prefetch

// Line is the cache-line stride the hints step by.
const Line = 64
