package fetch

import "context"

// aliveKey carries a range read's keep-alive function; see Alive.
type aliveKey struct{}

// withAlive returns ctx carrying fn as its range read's keep-alive.
func withAlive(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, aliveKey{}, fn)
}

// Alive tells the Downloader that the range read whose context is ctx is
// making progress although no bytes have come yet, and restarts its stall
// timeout (Config.StallTimeout). An object.Source calls it when it knows its
// server is working on the range: a peer agent that fills the object
// before answering sends heartbeats meanwhile. Outside a Downloader's range
// read it does nothing.
func Alive(ctx context.Context) {
	if fn, ok := ctx.Value(aliveKey{}).(func()); ok {
		fn()
	}
}
