package peer

import "context"

// noForwardKey marks a context whose range reads must not go to a peer.
type noForwardKey struct{}

// WithNoForward returns ctx marked so that a Source sends its range reads
// to the origin, never to a peer. The Server fills a peer's miss on such a
// context; tier fills keep context values (they detach with
// context.WithoutCancel), so the mark reaches the Source.
func WithNoForward(ctx context.Context) context.Context {
	return context.WithValue(ctx, noForwardKey{}, true)
}

// NoForward reports whether ctx was marked by WithNoForward.
func NoForward(ctx context.Context) bool {
	v, _ := ctx.Value(noForwardKey{}).(bool)
	return v
}
