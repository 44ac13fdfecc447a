package linkshape

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/internal/wait"
)

// uploadBody is an upload's request body as the server reads it: paced at
// rate bytes per second (0: unpaced), counted, and cut (the connection
// reset) after resetAfter bytes when that is positive.
type uploadBody struct {
	ctx        context.Context
	r          io.ReadCloser
	rate       int64
	resetAfter int64
	read       *atomic.Int64
	start      time.Time
	n          int64
}

func (b *uploadBody) Read(p []byte) (int, error) {
	if b.resetAfter > 0 {
		if b.n >= b.resetAfter {
			panic(http.ErrAbortHandler) // net/http drops the connection
		}
		p = p[:min(int64(len(p)), b.resetAfter-b.n)]
	}
	if b.rate > 0 {
		p = p[:min(len(p), chunkSize)]
		due := b.start.Add(time.Duration(float64(b.n+int64(len(p))) / float64(b.rate) * float64(time.Second)))
		if err := wait.Sleep(b.ctx, time.Until(due)); err != nil {
			return 0, err
		}
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	b.read.Add(int64(n))
	return n, err
}

func (b *uploadBody) Close() error { return b.r.Close() }
