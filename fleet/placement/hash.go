package placement

import "math"

// mix is a 64-bit finalizer (the SplitMix64 output function): a bijection
// whose every output bit depends on every input bit. It combines a key's hash
// with a member's seed in a few cycles.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// draw returns the top 52 bits of member seed's hash of a key: the integer
// behind the member's uniform u = (2*draw+1) / 2^53 (see unit). Larger draws
// mean larger u and so a higher score at any fixed weight.
func draw(keyHash, seed uint64) uint64 {
	return mix(keyHash^seed) >> 12
}

// unitScale is 2^-53.
const unitScale = 1.0 / (1 << 53)

// unit returns u = (2x+1) / 2^53 for a 52-bit x: the midpoint of one of 2^52
// equal cells of (0, 1), so never 0 or 1, and exact (2x+1 < 2^53 fits a
// float64 mantissa).
func unit(x uint64) float64 {
	return float64(2*x+1) * unitScale
}

// ln2 is the natural logarithm of 2, rounded to float64 by the compiler.
const ln2 = 0.693147180559945309417232121458176568

// tableBits is how many leading mantissa bits pick a row of lnTable.
const tableBits = 6

// lnTable[j] is ln(1 + j/2^tableBits) for j < 2^tableBits, and 0 in the
// last row (m near 2 is taken as 2 * (m/2), folding ln 2 into the exponent
// so that u near 1 keeps its precision). It is built by init from lnSeries,
// which uses only basic IEEE operations, so every architecture builds the
// same table.
var lnTable [1<<tableBits + 1]float64

func init() {
	for j := range 1 << tableBits {
		lnTable[j] = lnSeries(1 + float64(j)/(1<<tableBits))
	}
}

// atanhCoef holds 1/(2k+1) for k = 11 down to 1, rounded by the compiler.
var atanhCoef = [...]float64{
	1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
	1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3,
}

// sqrt2 is the square root of 2, rounded to float64 by the compiler.
const sqrt2 = 1.41421356237309504880168872420969808

// lnSeries returns ln(m) for m in [1, 2): for m >= sqrt(2) as ln 2 +
// ln(m/2), then as 2*atanh(s) with s = (m-1)/(m+1), |s| < 0.172, summed to
// below 1e-16. It is exact enough to build lnTable and too slow for the
// per-member path.
func lnSeries(m float64) float64 {
	var k float64
	if m >= sqrt2 {
		m /= 2 // exact
		k = ln2
	}
	s := (m - 1) / (m + 1)
	z := float64(s * s)
	p := atanhCoef[0]
	for _, c := range atanhCoef[1:] {
		p = float64(p*z) + c
	}
	return k + (float64(2*s) + float64(float64(2*s)*float64(z*p)))
}

// negLnUnit returns -ln(u) for u = unit(x), which is positive and finite,
// with a relative error below 1e-13 (the worst seen is 2e-14, near u = 0.996,
// where (e-53) ln 2 and ln(m) nearly cancel).
//
// It is computed without math.Log so that every architecture gets the same
// bits. v = 2x+1 is split exactly into m * 2^e with m in [1, 2); c is m
// rounded to a multiple of 2^-tableBits, so ln(m) = ln(c) + 2*atanh(s) with
// s = (m-c)/(m+c), |s| < 2^-(tableBits+2), and four terms of the odd series
// reach 1e-20. Only IEEE-rounded +, -, *, / are used, and each product is
// converted to float64 explicitly, which the Go specification says prevents
// fusing it into a multiply-add.
func negLnUnit(x uint64) float64 {
	b := math.Float64bits(float64(2*x + 1)) // exact: 2x+1 < 2^53
	e := int(b>>52) - 1023
	m := math.Float64frombits(b&(1<<52-1) | 1023<<52)
	j := int((b>>(52-tableBits-1)&(1<<(tableBits+1)-1) + 1) >> 1) // mantissa rounded to tableBits
	c := 1 + float64(j)/(1<<tableBits)
	if j == 1<<tableBits {
		e++ // m near 2: ln(m) = ln 2 + ln(m/2), and lnTable's last row is 0
	}
	s := (m - c) / (m + c)
	z := float64(s * s)
	p := float64(float64(float64(z*(1.0/9))+1.0/7)*z) + 1.0/5
	p = float64(p*z) + 1.0/3
	lnM := lnTable[j] + (float64(2*s) + float64(float64(2*s)*float64(z*p)))
	// ln(u) = ln(v) - 53 ln 2 = (e-53) ln 2 + ln(m), with e-53 <= 0.
	return float64(float64(53-e)*ln2) - lnM
}
