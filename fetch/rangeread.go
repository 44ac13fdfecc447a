package fetch

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"
)

// slice is one range of an object and how much of it is in dst. It is owned
// by the goroutine fetching it.
type slice struct {
	off, n int64  // the range [off, off+n) of the object
	done   int64  // bytes [off, off+done) are written
	crc    uint32 // CRC32C of those bytes
}

// String returns the slice's byte range, inclusive, as in an HTTP Range.
func (s *slice) String() string { return fmt.Sprintf("bytes %d-%d", s.off, s.off+s.n-1) }

// dstError marks a failure of the destination: never retried.
type dstError struct{ err error }

func (e *dstError) Error() string { return "write destination: " + e.err.Error() }
func (e *dstError) Unwrap() error { return e.err }

// fetchSlice fetches s, retrying failed attempts, and resumes each retry
// where the last one stopped. It is called holding one connection slot and
// releases it before returning; it gives the slot back while it backs off.
// On failure it calls abort with its error before freeing the slot.
func (d *Downloader) fetchSlice(ctx context.Context, abort context.CancelCauseFunc, o Object, s *slice,
	dst io.WriterAt, u *Urgency, order uint64) (err error) {
	held := true
	defer func() {
		if err != nil {
			abort(err)
		}
		if held {
			d.sem.release()
		}
	}()
	failures := 0
	for {
		before := s.done
		err := d.readRange(ctx, o, s, dst)
		if err == nil {
			return nil
		}
		if s.done > before {
			failures = 0
		}
		failures++
		cause, retry := classify(ctx, err)
		if cause == CauseStall {
			d.stats.stalls.Add(1)
		}
		switch {
		case errors.Is(err, ErrNotFound) && !errors.Is(err, ErrGenerationChanged):
			return fmt.Errorf("%s: %w: %w", s, ErrGenerationChanged, err)
		case !retry:
			return fmt.Errorf("%s: %w", s, err)
		case failures >= d.cfg.MaxAttempts:
			return fmt.Errorf("%s: giving up after %d attempts without progress: %w", s, failures, err)
		}
		d.stats.retries[cause].Add(1)
		d.sem.release()
		held = false
		if err := sleepCtx(ctx, backoff(failures, d.cfg.BackoffInitial, d.cfg.BackoffMax)); err != nil {
			return err
		}
		if err := d.sem.acquire(ctx, u, order); err != nil {
			return err
		}
		held = true
	}
}

// readRange makes one attempt at the missing tail of s, advancing s.done and
// s.crc as bytes are written. A stall watchdog cancels the attempt if no
// bytes arrive for Config.StallTimeout.
func (d *Downloader) readRange(ctx context.Context, o Object, s *slice, dst io.WriterAt) (err error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	progress, stop := make(chan struct{}, 1), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { watchdog(d.cfg.StallTimeout, progress, stop, cancel) })
	defer wg.Wait()
	defer close(stop)
	defer func() {
		if err != nil && errors.Is(context.Cause(rctx), errStalled) {
			err = fmt.Errorf("%w: %w", errStalled, err)
		}
	}()

	d.stats.ranges.Add(1)
	r, err := d.src.NewRangeReader(rctx, o, s.off+s.done, s.n-s.done)
	if err != nil {
		return err
	}
	defer r.Close()
	var buf []byte
	if left := s.n - s.done; left < copyBufSize {
		// A small range (a small object) gets a buffer of its size: 64
		// connections fetching 1 KiB objects would otherwise hold 16 MiB.
		buf = make([]byte, max(left, 1))
	} else {
		bp := d.bufs.Get().(*[]byte)
		defer d.bufs.Put(bp)
		buf = *bp
	}

	for s.done < s.n {
		m, rerr := r.Read(buf[:min(int64(len(buf)), s.n-s.done)])
		if m > 0 {
			if _, werr := dst.WriteAt(buf[:m], s.off+s.done); werr != nil {
				return &dstError{werr}
			}
			s.crc = crc32.Update(s.crc, castagnoli, buf[:m])
			s.done += int64(m)
			d.stats.bytes.Add(int64(m))
			select {
			case progress <- struct{}{}:
			default:
			}
		}
		switch {
		case rerr == io.EOF && s.done < s.n:
			return fmt.Errorf("%w: got %d of %d bytes", ErrShortRead, s.done, s.n)
		case rerr == io.EOF:
			return nil
		case rerr != nil:
			return rerr
		}
	}
	return expectEOF(r, buf[:1])
}

// expectEOF checks that a reader which delivered everything asked of it has
// nothing more.
func expectEOF(r io.Reader, one []byte) error {
	for {
		m, err := r.Read(one)
		switch {
		case m > 0:
			return errOverlong
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// watchdog calls cancel(errStalled) unless a value arrives on progress at
// least every timeout; it returns when stop is closed or after cancelling.
func watchdog(timeout time.Duration, progress <-chan struct{}, stop <-chan struct{}, cancel context.CancelCauseFunc) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-progress:
			t.Reset(timeout)
		case <-t.C:
			cancel(errStalled)
			return
		case <-stop:
			return
		}
	}
}
