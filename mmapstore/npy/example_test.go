package npy_test

import (
	"fmt"
	"log"
	"os"

	"github.com/cacheagent/cacheagent/mmapstore/npy"
)

func ExampleParse() {
	// In the daemon b is a read-only mapping held by a lease.
	b, err := os.ReadFile("testdata/f4_lt_3x4_C_v1.npy")
	if err != nil {
		log.Fatal(err)
	}
	a, err := npy.Parse(b)
	if err != nil {
		log.Fatal(err)
	}
	v, err := a.Float32s()
	if err != nil {
		log.Fatal(err)
	}
	row, err := a.Row(1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.DType, a.Shape, a.Order, a.Offset)
	fmt.Println(v[:4], len(row))
	// Output:
	// float32 [3 4] C 128
	// [-2.5 -2.25 -2 -1.75] 16
}

func ExampleParseHeader() {
	b, err := os.ReadFile("testdata/unicode.npy")
	if err != nil {
		log.Fatal(err)
	}
	h, err := npy.ParseHeader(b)
	fmt.Println(err)
	fmt.Printf("version %d.%d, descr %q, shape %v, data at %d\n", h.Major, h.Minor, h.Descr, h.Shape, h.DataOffset)
	// Output:
	// npy: unsupported dtype "<U2"
	// version 1.0, descr "<U2", shape [2], data at 128
}
