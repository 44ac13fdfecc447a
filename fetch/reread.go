package fetch

import "context"

// rereadKey marks the context of a checksum re-read round; see Reread.
type rereadKey struct{}

// withReread returns ctx marked as the context of a round of reads that
// follows a CRC32C mismatch.
func withReread(ctx context.Context) context.Context {
	return context.WithValue(ctx, rereadKey{}, true)
}

// Reread reports whether ctx is the context of a range read made by a
// round after a CRC32C mismatch (the second and later rounds of
// Config.ChecksumAttempts). An object.Source that may read from a copy less
// trusted than the origin, such as another agent's cache, should read from
// the origin under such a context: a copy that served wrong bytes once
// likely serves the same bytes again, and two reads returning the same
// wrong bytes end the download with object.ErrChecksum at once.
func Reread(ctx context.Context) bool {
	v, _ := ctx.Value(rereadKey{}).(bool)
	return v
}
