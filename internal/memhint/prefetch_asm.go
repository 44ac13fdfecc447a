//go:build amd64 || arm64

package memhint

// Bytes hints the CPU to bring every cache line of b into its caches. It
// returns at once.
//
//go:noescape
func Bytes(b []byte)
