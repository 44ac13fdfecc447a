package tokens

import (
	"encoding/binary"
	"testing"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// TestWiden converts tokens of every integer type to int32 and int64, from
// aligned and misaligned buffers.
func TestWiden(t *testing.T) {
	vals := []int64{0, 1, 7, 100, 127}
	for _, in := range []array.DType{array.Int8, array.Uint8, array.Int16, array.Uint16, array.Int32, array.Uint32,
		array.Int64, array.Uint64} {
		for _, out := range []array.DType{array.Int32, array.Int64} {
			if !widens(in, out) {
				continue
			}
			for _, shift := range []int{0, 1} {
				n, osize := in.Size(), out.Size()
				src := make([]byte, shift+n*len(vals)+n)[shift : shift+n*len(vals)]
				for i, v := range vals {
					for k := range n {
						src[i*n+k] = byte(uint64(v) >> (8 * k))
					}
				}
				dst := make([]byte, osize*len(vals))
				widen(dst, src, in, out)
				for i, v := range vals {
					var got int64
					if osize == 4 {
						got = int64(int32(binary.LittleEndian.Uint32(dst[4*i:])))
					} else {
						got = int64(binary.LittleEndian.Uint64(dst[8*i:]))
					}
					if got != v {
						t.Errorf("widen %s to %s (shift %d): token %d = %d; want %d", in, out, shift, i, got, v)
					}
				}
			}
		}
	}
}
