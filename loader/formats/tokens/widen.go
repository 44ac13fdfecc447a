package tokens

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Token widening (loader.Config.TokenOut): a window's tokens converted to int32
// or int64 as they are gathered, on the gathering goroutine, in place of
// the byte copy.

// widens reports whether tokens of type in can be output as out.
func widens(in, out array.DType) bool {
	switch out {
	case array.Int64:
		return true
	case array.Int32:
		return in.Size() <= 2 || in == array.Int32
	}
	return false
}

// copyWindow fills dst, one window, with the tokens from t on: their bytes,
// or, with Config.TokenOut, the tokens widened.
func (r *windowReader) copyWindow(dst []byte, segs []Segment, t int64, item int) error {
	out := r.out
	if out == r.ds.Token.DType {
		return copyTokens(dst, segs, t, item)
	}
	in, osize := r.ds.Token.DType, out.Size()
	j := find(segs, t, item)
	for len(dst) > 0 {
		if j >= len(segs) || segs[j].Start > t {
			return fmt.Errorf("%w: token %d is in no mapped segment (a gap in the stream)", loader.ErrDataset, t)
		}
		src := segs[j].Data[(t-segs[j].Start)*int64(item):]
		n := min(len(src)/item, len(dst)/osize)
		widen(dst[:n*osize], src[:n*item], in, out)
		dst = dst[n*osize:]
		t += int64(n)
		j++
	}
	return nil
}

// widen converts the little-endian tokens of type in in src to out (Int32
// or Int64) in dst. The common cases run over typed slices when both are
// aligned; the rest decode one token at a time.
func widen(dst, src []byte, in, out array.DType) {
	if aligned(dst, out.Size()) && aligned(src, in.Size()) {
		// Int32 output is only for tokens of at most 16 bits or int32.
		wide := out == array.Int64
		switch {
		case in == array.Uint16 && wide:
			convert(typed[int64](dst), typed[uint16](src))
		case in == array.Uint16:
			convert(typed[int32](dst), typed[uint16](src))
		case in == array.Uint32 && wide:
			convert(typed[int64](dst), typed[uint32](src))
		case in == array.Int32 && wide:
			convert(typed[int64](dst), typed[int32](src))
		default:
			widenEach(dst, src, in, out)
		}
		return
	}
	widenEach(dst, src, in, out)
}

// widenEach is widen one token at a time.
func widenEach(dst, src []byte, in, out array.DType) {
	le := binary.LittleEndian
	for i := range len(src) / in.Size() {
		var v int64
		switch in {
		case array.Int8:
			v = int64(int8(src[i]))
		case array.Uint8:
			v = int64(src[i])
		case array.Int16:
			v = int64(int16(le.Uint16(src[2*i:])))
		case array.Uint16:
			v = int64(le.Uint16(src[2*i:]))
		case array.Int32:
			v = int64(int32(le.Uint32(src[4*i:])))
		case array.Uint32:
			v = int64(le.Uint32(src[4*i:]))
		default: // Int64, Uint64: as they are
			v = int64(le.Uint64(src[8*i:]))
		}
		if out == array.Int32 {
			le.PutUint32(dst[4*i:], uint32(int32(v)))
		} else {
			le.PutUint64(dst[8*i:], uint64(v))
		}
	}
}

// aligned reports whether b's first byte is aligned to size.
func aligned(b []byte, size int) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0
}

// typed returns b as a slice of T, in the host's byte order (little-endian
// on every platform the loader runs on); b must be aligned for T.
func typed[T int32 | int64 | uint16 | uint32](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(z)))
}

// convert widens src into dst (of the same length).
func convert[D int32 | int64, S uint16 | uint32 | int32](dst []D, src []S) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = D(v)
	}
}
