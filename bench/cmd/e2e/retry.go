package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// Retry policy of the baseline readers: what gcloud and most GCS data
// loaders do, so that a faulty link (gcsproxy -error-rate, -reset-rate)
// slows them down instead of failing the benchmark.
const (
	retryAttempts = 8
	retryBackoff  = 50 * time.Millisecond
)

// retrying is a Source whose range reads retry a failed open and resume a
// body that breaks, from the byte where it stopped. The agent does not use
// it: its downloader has its own retries.
type retrying struct{ object.Source }

// NewRangeReader implements object.Source.
func (r retrying) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	rc, err := r.open(ctx, o, off, n)
	if err != nil {
		return nil, err
	}
	return &resuming{ctx: ctx, src: r, o: o, off: off, left: n, rc: rc}, nil
}

// open opens a range read, retrying failures with exponential backoff.
func (r retrying) open(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	wait := retryBackoff
	for attempt := 1; ; attempt++ {
		rc, err := r.Source.NewRangeReader(ctx, o, off, n)
		if err == nil || attempt == retryAttempts || !retryable(ctx, err) {
			return rc, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (after %v)", ctx.Err(), err)
		}
		wait *= 2
	}
}

// retryable reports whether a failed read is worth another try.
func retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, object.ErrNotFound)
}

// resuming reads a range, reopening it at the current offset when the body
// breaks, at most retryAttempts times in a row without progress.
type resuming struct {
	ctx    context.Context // the reader's: reads are bound to the ctx of NewRangeReader
	src    retrying
	o      object.Object
	off    int64 // next byte to read
	left   int64 // bytes still to read
	rc     io.ReadCloser
	broken int // consecutive breaks without a byte read
}

// Read implements io.Reader.
func (r *resuming) Read(p []byte) (int, error) {
	for {
		n, err := r.rc.Read(p)
		r.off += int64(n)
		r.left -= int64(n)
		if n > 0 {
			r.broken = 0
		}
		if err == nil || errors.Is(err, io.EOF) || r.left <= 0 || !retryable(r.ctx, err) {
			return n, err
		}
		r.broken++
		if r.broken >= retryAttempts {
			return n, err
		}
		r.rc.Close()
		rc, oerr := r.src.open(r.ctx, r.o, r.off, r.left)
		if oerr != nil {
			r.rc = io.NopCloser(errReader{oerr})
			return n, oerr
		}
		r.rc = rc
		if n > 0 {
			return n, nil
		}
	}
}

// Close implements io.Closer.
func (r *resuming) Close() error { return r.rc.Close() }

// errReader fails every Read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
