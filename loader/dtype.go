package loader

import (
	"fmt"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// ParseDType parses a numpy-style integer type name ("uint16", "int32"…),
// the types token files hold.
func ParseDType(s string) (array.DType, error) {
	for _, dt := range []array.DType{array.Int8, array.Int16, array.Int32, array.Int64,
		array.Uint8, array.Uint16, array.Uint32, array.Uint64} {
		if dt.String() == s {
			return dt, nil
		}
	}
	return 0, fmt.Errorf("%w: token type %q (want an integer type such as uint16 or int32)", ErrConfig, s)
}
