package linkshape

import (
	"context"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// ackPoll is how often awaitAcked re-reads the send queue; ackWait bounds
// the whole wait (a client that stopped reading never acknowledges).
const (
	ackPoll = time.Millisecond
	ackWait = 2 * time.Second
)

// awaitAcked waits until the peer has acknowledged every byte written to c
// (the kernel's send queue, SIOCOUTQ, is empty), ctx is done or ackWait
// passes. The kernel offers no wake-up for this, so it polls.
func awaitAcked(ctx context.Context, c *net.TCPConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	tick := time.NewTicker(ackPoll)
	defer tick.Stop()
	for {
		queued := 0
		cerr := raw.Control(func(fd uintptr) {
			queued, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		})
		if cerr != nil || err != nil || queued == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}
