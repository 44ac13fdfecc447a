package npy

import "github.com/cacheagent/cacheagent/mmapstore/array"

// typestrs maps numpy type strings, without the byte-order character, to
// element types.
var typestrs = map[string]array.DType{
	"b1":  array.Bool,
	"i1":  array.Int8,
	"i2":  array.Int16,
	"i4":  array.Int32,
	"i8":  array.Int64,
	"u1":  array.Uint8,
	"u2":  array.Uint16,
	"u4":  array.Uint32,
	"u8":  array.Uint64,
	"f2":  array.Float16,
	"f4":  array.Float32,
	"f8":  array.Float64,
	"c8":  array.Complex64,
	"c16": array.Complex128,
}

// parseDescr maps a simple numpy dtype string such as "<f4" to an element
// type and byte order. It returns a zero DType for types it does not
// support. As in numpy, '|', '=' and no byte-order character mean the
// host's order; single-byte types have no byte order.
func parseDescr(s string) (array.DType, array.ByteOrder) {
	order := array.HostByteOrder()
	if s != "" {
		switch s[0] {
		case '<':
			order, s = array.Little, s[1:]
		case '>':
			order, s = array.Big, s[1:]
		case '|', '=':
			s = s[1:]
		}
	}
	d, ok := typestrs[s]
	if !ok {
		return 0, array.NotApplicable
	}
	if d.Size() == 1 {
		order = array.NotApplicable
	}
	return d, order
}
