package loader

import (
	"context"
	"fmt"

	"github.com/cacheagent/cacheagent/fetch"
)

// IndexCache keeps WebDataset member indexes (webdataset.Shard's
// MarshalBinary) across runs, keyed by object generation.
type IndexCache interface {
	// Load returns the saved index of o (a pinned generation), if any.
	Load(o fetch.Object) ([]byte, bool)
	// Store saves the index of o.
	Store(o fetch.Object, b []byte) error
}

// fromRecords builds a WebDataset dataset.
func fromRecords(ctx context.Context, src fetch.Source, bucket, prefix, pattern string, o Options) (Dataset, error) {
	return Dataset{}, fmt.Errorf("%w: webdataset: not yet", ErrConfig)
}
