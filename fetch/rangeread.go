package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/object"
)

// slice is one range of an object and how much of it is in dst. The
// goroutine fetching it is the only writer of done and crc; steal may
// shorten n (split) meanwhile, so n and done are read and written under mu.
type slice struct {
	off  int64 // the range starts at off
	unit int64 // its download's check unit (see checkunits.go)

	mu   sync.Mutex
	n    int64 // the range is [off, off+n); only ever shortened, by split
	done int64 // bytes [off, off+done) are written
	// recvStart is when the current attempt's first byte arrived (zero
	// before it), with recvDone bytes written then: timeLeft's rate.
	recvStart time.Time
	recvDone  int64

	// crcs are the CRC32Cs of the bytes written, one per check unit the
	// range overlaps (see addCRC); the fetching goroutine's.
	crcs []uint32
}

// String returns the slice's byte range, inclusive, as in an HTTP Range.
func (s *slice) String() string {
	_, n := s.state()
	return fmt.Sprintf("bytes %d-%d", s.off, s.off+n-1)
}

// dstError marks a failure of the destination: never retried.
type dstError struct{ err error }

func (e *dstError) Error() string { return "write destination: " + e.err.Error() }
func (e *dstError) Unwrap() error { return e.err }

// fetchSlice fetches s for dl, retrying failed attempts, and resumes each
// retry where the last one stopped. It is called holding one slot of dl's
// lane and releases it before returning (or, on the main lane, hands it to
// a range it splits off another, see steal); it gives the slot back while
// it backs off. On failure it calls dl.abort with its error before freeing
// the slot.
func (d *Downloader) fetchSlice(dl *download, s *slice) (err error) {
	ctx, u := dl.ctx, dl.u
	held := true
	// Only the main lane splits ranges: a small object's slot taking on
	// half a large range would be one more large stream.
	main := dl.sem == d.sem
	// A range shorter than minSteal can never be split (split only ever
	// shortens it): steal need not see it.
	_, n := s.state()
	tracked := main && n >= minSteal
	if tracked {
		d.track(s, dl)
	}
	defer func() {
		if tracked {
			d.untrack(s)
		}
		if err != nil {
			dl.abort(err)
		}
		if held {
			dl.sem.release()
		}
	}()
	failures := 0
	for {
		before, _ := s.state()
		err := d.readRange(ctx, dl.o, s, dl.dst)
		if err == nil {
			held = !main || !d.steal()
			return nil
		}
		if done, _ := s.state(); done > before {
			failures = 0
		}
		failures++
		cause, retry := classify(ctx, err)
		if cause == CauseStall {
			d.stats.stalls.Add(1)
		}
		switch {
		case errors.Is(err, object.ErrNotFound) && !errors.Is(err, object.ErrGenerationChanged):
			return fmt.Errorf("%s: %w: %w", s, object.ErrGenerationChanged, err)
		case !retry:
			return fmt.Errorf("%s: %w", s, err)
		case failures >= d.cfg.MaxAttempts:
			return fmt.Errorf("%s: giving up after %d attempts without progress: %w", s, failures, err)
		}
		d.stats.retries[cause].Add(1)
		dl.sem.release()
		held = false
		if err := wait.Sleep(ctx, backoff(failures, d.cfg.BackoffInitial, d.cfg.BackoffMax)); err != nil {
			return err
		}
		if err := dl.sem.acquire(ctx, u, dl.order); err != nil {
			return err
		}
		held = true
	}
}

// readRange makes one attempt at the missing tail of s, advancing s.done and
// s.crcs as bytes are written. A stall watchdog cancels the attempt if no
// bytes arrive for Config.StallTimeout.
func (d *Downloader) readRange(ctx context.Context, o object.Object, s *slice, dst io.WriterAt) (err error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := startWatchdog(d.cfg.StallTimeout, cancel)
	defer w.stop()
	defer func() {
		if err != nil && errors.Is(context.Cause(rctx), errStalled) {
			err = fmt.Errorf("%w: %w", errStalled, err)
		}
	}()

	d.stats.ranges.Add(1)
	start, n := s.state()
	asked := n - start
	requested := time.Now()
	defer s.receiving(time.Time{}) // no rate between attempts
	r, err := d.src.NewRangeReader(withAlive(rctx, w.alive), o, s.off+start, asked)
	if err != nil {
		return err
	}
	defer r.Close()
	buf, put := d.bufs.get(asked)
	defer put()

	// A range too short to be split (and so to need its progress while it
	// runs) is gathered in buf and written when buf is full or the range
	// whole: one pwrite for a small object, not one per read from the
	// connection. Longer ranges write every read as it comes.
	gather := asked < minSteal
	held := 0 // bytes in buf after s.done, not yet written
	flush := func() error {
		if held == 0 {
			return nil
		}
		done, n := s.state()
		m := int64(held)
		held = 0
		// A split may have shortened s since: never write past its end
		// (split leaves far more than one read, so this is a guard).
		m = min(m, n-done)
		if _, werr := dst.WriteAt(buf[:m], s.off+done); werr != nil {
			return &dstError{werr}
		}
		s.addCRC(s.off+done, buf[:m])
		s.mu.Lock()
		s.done += m
		s.mu.Unlock()
		d.stats.bytes.Add(m)
		return nil
	}
	var first time.Time // when this attempt's first byte came
	spread := gather
	empty := 0 // reads in a row that returned nothing and no error
	for {
		done, n := s.state()
		pos := done + int64(held)
		if pos >= n {
			break
		}
		m, rerr := r.Read(buf[held : held+int(min(int64(len(buf)-held), n-pos))])
		if m > 0 && pos == start {
			first = time.Now()
			d.observeTTFB(first.Sub(requested))
			s.receiving(first)
		}
		if m > 0 && !spread && time.Since(first) >= minRateSample {
			// The rates are known now: connections idle meanwhile take
			// their share of the ranges in flight, this one included.
			spread = true
			d.spread()
		}
		if m == 0 && rerr == nil {
			if empty++; empty >= maxEmptyReads {
				rerr = io.ErrNoProgress // a broken reader: never spin
			}
		}
		if m > 0 {
			empty = 0
			w.alive()
			held += m
			if !gather || held == len(buf) || pos+int64(m) >= n {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if rerr != nil {
			if err := flush(); err != nil { // what came is kept for the next attempt
				return err
			}
			done, n = s.state()
			switch {
			case rerr == io.EOF && done < n:
				return fmt.Errorf("%w: got %d of %d bytes", object.ErrShortRead, done, n)
			case rerr == io.EOF:
				return nil
			default:
				return rerr
			}
		}
	}
	if _, n := s.state(); n-start < asked {
		// Split while reading: the rest of the body is another range's.
		// Closing it unread drops the connection; the split paid for that.
		return nil
	}
	return expectEOF(r, buf[:1])
}

// maxEmptyReads is how many reads in a row may return neither bytes nor
// an error before a reader is taken for broken (io.Reader allows such
// reads but discourages them; bufio gives up after as many).
const maxEmptyReads = 100

// expectEOF checks that a reader which delivered everything asked of it has
// nothing more.
func expectEOF(r io.Reader, one []byte) error {
	for range maxEmptyReads {
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
	return io.ErrNoProgress
}

// watchdog cancels a range read with errStalled unless alive is called at
// least every timeout. It is a timer, not a goroutine: alive only records
// the time, and the timer, when it fires, either cancels or sleeps again
// for what is left of the timeout since the last call.
type watchdog struct {
	timeout time.Duration
	cancel  context.CancelCauseFunc
	base    time.Time    // monotonic origin of last
	last    atomic.Int64 // since base, at the last alive

	mu      sync.Mutex // orders the timer's arming, re-arming and stop
	t       *time.Timer
	stopped bool
}

// startWatchdog starts a watchdog that calls cancel(errStalled).
func startWatchdog(timeout time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{timeout: timeout, cancel: cancel, base: time.Now()}
	w.mu.Lock()
	w.t = time.AfterFunc(timeout, w.fire)
	w.mu.Unlock()
	return w
}

// alive records progress.
func (w *watchdog) alive() { w.last.Store(int64(time.Since(w.base))) }

// fire runs when the timer expires.
func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	idle := time.Since(w.base) - time.Duration(w.last.Load())
	if idle >= w.timeout {
		w.stopped = true
		w.cancel(errStalled)
		return
	}
	w.t.Reset(w.timeout - idle)
}

// stop stops the watchdog; it never cancels after stop returns.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.t.Stop()
}
