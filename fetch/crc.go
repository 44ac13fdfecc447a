package fetch

import "hash/crc32"

// CRC32C arithmetic for verifying an object assembled from slices.
//
// Each slice's CRC32C is computed as its bytes stream in; the object's CRC is
// then derived from the slice CRCs and lengths alone, without touching the
// data again.
//
// # The math
//
// A CRC is the remainder of the message polynomial modulo the generator P
// over GF(2), with pre- and post-conditioning (register starts at all ones,
// result is inverted). Write raw(s, M) for the register after feeding message
// M into a register holding s. Feeding is linear in s:
//
//	raw(s, B) = s·x^(8|B|) ⊕ raw(0, B)   (mod P)
//
// With crc(M) = raw(~0, M) ⊕ ~0, expanding both sides shows that the
// conditioning terms cancel:
//
//	crc(A‖B) = crc(A)·x^(8|B|) ⊕ crc(B)   (mod P)
//
// so combining needs one multiplication by x^(8|B|) mod P. That power is
// built by square-and-multiply from a table of x^(2^k) mod P, which costs
// O(log |B|) multiplications of 32-bit polynomials.
//
// Polynomials are stored reflected, as hash/crc32 does: bit 31 holds the
// coefficient of x^0 and bit 0 that of x^31; the reflected Castagnoli
// generator (without its x^32 term) is crc32.Castagnoli.

// castagnoli is the table for hash/crc32's hardware-accelerated CRC32C.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// xPow2k[k] is x^(2^k) mod P, reflected.
var xPow2k = func() (t [64]uint32) {
	t[0] = 1 << 30 // x^1
	for k := 1; k < len(t); k++ {
		t[k] = gfMul(t[k-1], t[k-1])
	}
	return t
}()

// gfMul returns a·b mod P for reflected polynomials a and b.
func gfMul(a, b uint32) uint32 {
	var p uint32
	// Walk a's coefficients from x^0 (bit 31) upwards; b tracks b·x^i mod P.
	for bit := uint32(1) << 31; bit != 0; bit >>= 1 {
		if a&bit != 0 {
			p ^= b
		}
		// b·x: shift towards higher powers, reducing the x^32 overflow by P.
		if b&1 != 0 {
			b = b>>1 ^ crc32.Castagnoli
		} else {
			b >>= 1
		}
	}
	return p
}

// xPowBytes returns x^(8n) mod P, reflected, for n ≥ 0.
func xPowBytes(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	// 8n = n << 3: bit j of n selects x^(2^(j+3)).
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = gfMul(p, xPow2k[k])
		}
	}
	return p
}

// crc32cShift returns what a CRC32C of crc at the start of a part
// contributes to the CRC32C of that part followed by n more bytes: the
// combination is linear in it (crc32cCombine(a, b, n) is
// crc32cShift(a, n) ^ b).
func crc32cShift(crc uint32, n int64) uint32 {
	if n <= 0 {
		return crc
	}
	return gfMul(crc, xPowBytes(n))
}

// crc32cCombine returns the CRC32C of A‖B given crcA = CRC32C(A),
// crcB = CRC32C(B) and lenB = len(B). A zero-length B leaves crcA unchanged.
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	return crc32cShift(crcA, lenB) ^ crcB // crcB is 0 for an empty B
}
