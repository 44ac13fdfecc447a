package safetensors_test

import (
	"fmt"
	"log"
	"os"

	"github.com/cacheagent/cacheagent/mmapstore/safetensors"
)

func ExampleParse() {
	// In the daemon b is a read-only mapping held by a lease.
	b, err := os.ReadFile("testdata/no_metadata.safetensors")
	if err != nil {
		log.Fatal(err)
	}
	f, err := safetensors.Parse(b)
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range f.Names {
		a := f.Tensors[name]
		v, err := a.Float32s()
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(name, a.DType, a.Shape, a.Offset, v[:2])
	}
	// Output:
	// bias float32 [4] 128 [-2.5 -2.25]
	// weight float32 [3 4] 144 [-2.5 -2.25]
}
