// Package formats lists every format the loader reads. A request that
// names no format gets the first that guesses it, in this order; NPY, the
// loader's own, is the fallback.
//
// Adding a format is a package of its own under loader/formats that
// implements loader.Format, and one line here.
package formats

import (
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats/megatron"
	"github.com/cacheagent/cacheagent/loader/formats/safetensors"
	"github.com/cacheagent/cacheagent/loader/formats/tokens"
	"github.com/cacheagent/cacheagent/loader/formats/webdataset"
)

// All are the loader's formats, in guessing order.
var All = []loader.Format{
	megatron.Format,    // a {bin,idx} pattern
	webdataset.Format,  // a .tar pattern
	safetensors.Format, // a .safetensors pattern
	tokens.Format,      // a token type or sequence length given
	loader.NPY,         // anything else
}

// Names returns the formats' names, in order.
func Names() []string {
	names := make([]string, len(All))
	for i, f := range All {
		names[i] = f.Name()
	}
	return names
}
