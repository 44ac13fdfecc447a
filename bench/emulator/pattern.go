package emulator

import "encoding/binary"

// Pattern returns n deterministic pseudo-random bytes for seed: the same
// (seed, n) always gives the same bytes, and Pattern(seed, n)[i] does not
// depend on n. It returns an empty slice for n <= 0. Any range can be
// regenerated cheaply with FillPattern.
func Pattern(seed uint64, n int) []byte {
	if n <= 0 {
		return []byte{}
	}
	b := make([]byte, n)
	FillPattern(b, seed, 0)
	return b
}

// FillPattern fills p with the bytes of Pattern(seed, …) starting at offset
// off, so a range read of a Pattern object can be checked without
// generating its prefix. Offsets wrap modulo 2^64 (a negative off is valid
// and deterministic).
func FillPattern(p []byte, seed uint64, off int64) {
	pos := uint64(off)
	// Head: finish the word that pos falls into.
	if r := pos & 7; r != 0 && len(p) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], patternWord(seed, pos>>3))
		n := copy(p, w[r:])
		p, pos = p[n:], pos+uint64(n)
	}
	// Body: whole words, 8 bytes per PRNG step.
	i := pos >> 3
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, patternWord(seed, i))
		p, i = p[8:], i+1
	}
	// Tail: the start of the next word.
	if len(p) > 0 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], patternWord(seed, i))
		copy(p, w[:])
	}
}

// patternWord returns the i-th 64-bit word of the stream for seed: the
// SplitMix64 generator evaluated at position i, so every word is
// independent of the others and costs a few multiplies.
func patternWord(seed, i uint64) uint64 {
	z := seed*0xd1342543de82ef95 + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
