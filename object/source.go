package object

import (
	"context"
	"io"
	"iter"
)

// Source is where objects come from. Implementations are safe for concurrent use.
type Source interface {
	// Stat returns the attributes of the object's live generation, or of
	// o.Generation if it is non-zero. A missing object yields ErrNotFound.
	Stat(ctx context.Context, o Object) (Attrs, error)
	// List yields the objects whose names start with prefix, in name order.
	List(ctx context.Context, bucket, prefix string) iter.Seq2[Attrs, error]
	// NewRangeReader reads n bytes at off of exactly generation o.Generation.
	// A reader may return fewer bytes than asked (callers check the length);
	// a generation that no longer exists yields ErrGenerationChanged or ErrNotFound.
	NewRangeReader(ctx context.Context, o Object, off, n int64) (io.ReadCloser, error)
}
