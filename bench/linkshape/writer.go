package linkshape

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/internal/wait"
)

// chunkSize is the largest unit in which bodies are paced, flushed and cut;
// slow links use pieces of about minPacing, down to minChunk bytes.
const (
	chunkSize = 256 << 10
	minChunk  = 1 << 10
	minPacing = 10 * time.Millisecond
)

// chunkPool recycles ReadFrom buffers.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

// faultWriter wraps the fake's ResponseWriter for one media GET: it paces
// the body, applies the body faults at exact offsets and counts the bytes
// sent. It is used by a single handler goroutine.
type faultWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	ctx    context.Context
	f      Fault
	rate   int64 // body bytes per second; <= 0 is unpaced
	chunk  int   // bytes per write
	served *atomic.Int64

	wroteHeader bool
	start       time.Time // when the body began, moved forward by stalls
	off         int64     // body bytes accepted so far (sent or swallowed)
	limit       int64     // body bytes to send; -1 means all
	stalled     bool      // the stall has happened
	err         error     // sticky: the first failure ends the body
}

func newFaultWriter(ctx context.Context, w http.ResponseWriter, f Fault, rate int64, served *atomic.Int64) *faultWriter {
	chunk := chunkSize
	if rate > 0 {
		chunk = int(min(max(int64(float64(rate)*minPacing.Seconds()), minChunk), chunkSize))
	}
	return &faultWriter{
		w: w, rc: http.NewResponseController(w), ctx: ctx,
		f: f, rate: rate, chunk: chunk, served: served, limit: -1,
	}
}

// Header returns the wrapped writer's header map.
func (fw *faultWriter) Header() http.Header { return fw.w.Header() }

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (fw *faultWriter) Unwrap() http.ResponseWriter { return fw.w }

// WriteHeader applies TruncateTo to a 2xx response, sends the headers at
// once on a paced link and starts the body clock.
func (fw *faultWriter) WriteHeader(code int) {
	if fw.wroteHeader {
		fw.w.WriteHeader(code) // superfluous: net/http reports it
		return
	}
	fw.wroteHeader = true
	if fw.f.Corrupt && fw.f.CorruptMiddle {
		fw.f.CorruptAt = -1
		if cl, err := strconv.ParseInt(fw.w.Header().Get("Content-Length"), 10, 64); err == nil {
			fw.f.CorruptAt = cl / 2
		}
	}
	if t := fw.f.TruncateTo; t > 0 && code >= 200 && code < 300 {
		cl, err := strconv.ParseInt(fw.w.Header().Get("Content-Length"), 10, 64)
		if err == nil && t < cl {
			fw.w.Header().Set("Content-Length", strconv.FormatInt(t, 10))
			fw.limit = t
		}
	}
	fw.w.WriteHeader(code)
	if fw.rate > 0 {
		fw.rc.Flush() // on a modelled link the headers arrive before the body
	}
	fw.start = time.Now()
}

// Write sends p in chunks, pacing and faulting at exact offsets. Bytes past
// a truncation are swallowed and reported as written.
func (fw *faultWriter) Write(p []byte) (int, error) {
	if !fw.wroteHeader {
		fw.WriteHeader(http.StatusOK)
	}
	total := len(p)
	for len(p) > 0 {
		if fw.err != nil {
			return total - len(p), fw.err
		}
		if fw.err = fw.event(); fw.err != nil {
			continue
		}
		if fw.limit >= 0 && fw.off >= fw.limit {
			fw.off += int64(len(p))
			return total, nil
		}
		n := fw.chunkLen(len(p))
		if fw.err = fw.send(p[:n]); fw.err != nil {
			return total - len(p), fw.err
		}
		p = p[n:]
	}
	return total, nil
}

// ReadFrom copies src through Write in chunkSize pieces, so bodies that are
// not a WriterTo (range reads) are paced in the same units as whole ones.
func (fw *faultWriter) ReadFrom(src io.Reader) (int64, error) {
	bp := chunkPool.Get().(*[]byte)
	defer chunkPool.Put(bp)
	return io.CopyBuffer(struct{ io.Writer }{fw}, src, *bp)
}

// finish runs an event due exactly at the end of the body (a stall at the
// body's length, for example) once the fake's handler has returned, and
// returns the error that ended the body early, if any.
func (fw *faultWriter) finish() error {
	if fw.err == nil && fw.wroteHeader {
		fw.err = fw.event()
	}
	return fw.err
}

// event fires the body fault due at the current offset, if any (none past a
// truncation). Reset and close do not return: they abort the handler.
func (fw *faultWriter) event() error {
	f := fw.f
	switch {
	case fw.limit >= 0 && fw.off > fw.limit:
		return nil
	case f.ResetAfter > 0 && fw.off == f.ResetAfter:
		fw.reset()
	case f.CloseAfter > 0 && fw.off == f.CloseAfter:
		fw.rc.Flush()
		panic(http.ErrAbortHandler) // net/http closes the connection: FIN
	case f.Stall > 0 && !fw.stalled && fw.off == f.StallAt:
		fw.stalled = true
		if err := fw.rc.Flush(); err != nil {
			return err
		}
		began := time.Now()
		err := wait.Sleep(fw.ctx, f.Stall)
		fw.start = fw.start.Add(time.Since(began)) // the pacer does not catch up
		return err
	}
	return nil
}

// chunkLen returns how many of the next n bytes to send in one piece: at
// most fw.chunk, and never past the next fault offset.
func (fw *faultWriter) chunkLen(n int) int {
	size := int64(min(n, fw.chunk))
	cut := func(at int64) {
		if at > fw.off && at-fw.off < size {
			size = at - fw.off
		}
	}
	if fw.f.ResetAfter > 0 {
		cut(fw.f.ResetAfter)
	}
	if fw.f.CloseAfter > 0 {
		cut(fw.f.CloseAfter)
	}
	if fw.f.Stall > 0 && !fw.stalled {
		cut(fw.f.StallAt)
	}
	if fw.limit >= 0 {
		cut(fw.limit)
	}
	return int(size)
}

// send waits until the link would have carried b, writes it (corrupted if
// the fault's offset falls inside) and flushes it to the client.
func (fw *faultWriter) send(b []byte) error {
	if at := fw.f.CorruptAt; fw.f.Corrupt && at >= fw.off && at < fw.off+int64(len(b)) {
		c := make([]byte, len(b))
		copy(c, b)
		c[at-fw.off] ^= 0xff
		b = c
	}
	if fw.rate > 0 {
		secs := float64(fw.off+int64(len(b))) / float64(fw.rate)
		due := fw.start.Add(time.Duration(secs * float64(time.Second)))
		if err := wait.Sleep(fw.ctx, time.Until(due)); err != nil {
			return err
		}
	}
	n, err := fw.w.Write(b)
	fw.off += int64(n)
	fw.served.Add(int64(n))
	if err != nil {
		return err
	}
	return fw.rc.Flush()
}

// reset flushes what was written, waits for the peer to acknowledge it and
// aborts the connection with an RST. It does not return.
func (fw *faultWriter) reset() {
	fw.rc.Flush()
	conn, bufrw, err := fw.rc.Hijack()
	if err == nil {
		bufrw.Flush()
		if tc, ok := conn.(*net.TCPConn); ok {
			// An abortive close discards unsent data; let it drain first
			// so the client sees exactly ResetAfter bytes.
			awaitAcked(fw.ctx, tc)
			tc.SetLinger(0)
		}
		conn.Close()
	}
	panic(http.ErrAbortHandler)
}
