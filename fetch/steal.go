package fetch

import (
	"cmp"
	"context"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// A connection that frees up while nothing waits for one would idle until
// the next download asks; meanwhile the downloads still running each stream
// on one connection, and the last of them finish one after another. So a
// freed connection with no waiter takes the second half of the unwritten
// part of the range with the most time left, anywhere on the Downloader:
// the range's reader stops at the split point and the connection fetches
// the rest as a new range of the same download.
//
// A split pays a new request's time to first byte, so it is made only when
// the half handed over would take its reader well over that long: at least
// stealTTFBs times the Downloader's running average time to first byte.
const (
	// minSteal is the least a range must have left to be split at all.
	minSteal = 2 << 20
	// stealTTFBs is how many times the average time to first byte half a
	// range's remaining time must be for a split.
	stealTTFBs = 2
	// minRateSample is how long a range must have been receiving before its
	// rate is trusted for that estimate.
	minRateSample = 10 * time.Millisecond
	// stealAlign aligns split points (object offsets).
	stealAlign = 64 << 10
)

// download is one fetchOnce in flight: what its slices, and the ranges
// split off them, share.
type download struct {
	o     object.Object
	dst   io.WriterAt
	u     *object.Urgency
	order uint64
	sem   *connSem // the lane its ranges hold slots of
	ctx   context.Context
	abort context.CancelCauseFunc
	wg    *sync.WaitGroup // waited for by fetchOnce; a split adds to it

	mu     sync.Mutex // guards slices
	slices []*slice
}

// add appends s to the download's slices.
func (dl *download) add(s *slice) {
	dl.mu.Lock()
	dl.slices = append(dl.slices, s)
	dl.mu.Unlock()
}

// sorted returns the download's slices in object order.
func (dl *download) sorted() []*slice {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return slices.SortedFunc(slices.Values(dl.slices), func(a, b *slice) int { return cmp.Compare(a.off, b.off) })
}

// track registers s, fetched for dl, as a range a freed connection may
// split; untrack removes it.
func (d *Downloader) track(s *slice, dl *download) {
	d.stealMu.Lock()
	d.inflight[s] = dl
	d.stealMu.Unlock()
}

func (d *Downloader) untrack(s *slice) {
	d.stealMu.Lock()
	delete(d.inflight, s)
	d.stealMu.Unlock()
}

// steal is called by a range that has finished, holding its connection
// slot. If no one waits for the slot, it splits the in-flight range with
// the most time left, if worthSplitting, and starts its second half on the
// slot, as part of that range's download, and reports true: the slot is
// the new range's. Otherwise it reports false and the caller releases the
// slot. It scans every range in flight: at most the connection budget.
func (d *Downloader) steal() bool {
	if d.cfg.NoSplit || !d.sem.idle() {
		return false
	}
	ttfb := time.Duration(d.ttfb.Load())
	now := time.Now()
	d.stealMu.Lock()
	defer d.stealMu.Unlock()
	var victim *slice
	var vdl *download
	var most time.Duration
	for s, dl := range d.inflight {
		if dl.ctx.Err() != nil {
			continue
		}
		if t := s.timeLeft(now); t > most {
			victim, vdl, most = s, dl, t
		}
	}
	if victim == nil || !worthSplitting(most, ttfb) {
		return false
	}
	ns := victim.split()
	if ns == nil {
		return false
	}
	vdl.add(ns)
	d.stats.splits.Add(1)
	// The victim is tracked, so its goroutine has not returned and the
	// download's WaitGroup counter is positive: Add may race with Wait.
	vdl.wg.Add(1)
	go func() {
		defer vdl.wg.Done()
		d.fetchSlice(vdl, ns)
	}()
	return true
}

// spread hands every connection slot that is free while nothing waits to a
// range split off the range in flight with the most time left (see
// steal), until no split is worth its time to first byte. Without it, one
// object on an idle Downloader (a single read through the mount, say) would
// stream on one connection until its first range finished.
func (d *Downloader) spread() {
	for d.sem.tryAcquire() {
		if !d.steal() {
			d.sem.release()
			return
		}
	}
}

// worthSplitting reports whether a range with left time to go (at its own
// rate) should be split, given the average time to first byte.
func worthSplitting(left, ttfb time.Duration) bool {
	return ttfb > 0 && left/2 > stealTTFBs*ttfb
}

// timeLeft estimates how long s's reader needs for its unwritten bytes at
// the rate of its current attempt; 0 if it has less than minSteal left or
// has not been receiving for minRateSample.
func (s *slice) timeLeft(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.n - s.done
	since := now.Sub(s.recvStart)
	got := s.done - s.recvDone
	if left < minSteal || s.recvStart.IsZero() || since < minRateSample || got <= 0 {
		return 0
	}
	return time.Duration(float64(since) * float64(left) / float64(got))
}

// receiving marks the first byte of an attempt (s.done bytes written before
// it), for timeLeft's rate.
func (s *slice) receiving(at time.Time) {
	s.mu.Lock()
	s.recvStart, s.recvDone = at, s.done
	s.mu.Unlock()
}

// state returns how much of s is written and its current length.
func (s *slice) state() (done, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done, s.n
}

// split shortens s to end halfway through its unwritten part (at a
// stealAlign boundary) and returns a slice for the rest, or nil if less
// than minSteal is unwritten. The cut is at least minSteal/2 past what is
// written, more than one read (copyBufSize) can add before the reader sees
// the new length.
func (s *slice) split() *slice {
	s.mu.Lock()
	defer s.mu.Unlock()
	left := s.n - s.done
	if left < minSteal {
		return nil
	}
	mid := s.off + s.done + left/2
	mid -= mid % stealAlign
	end := s.off + s.n
	if mid <= s.off+s.done || mid >= end {
		return nil
	}
	s.n = mid - s.off
	return &slice{off: mid, unit: s.unit, n: end - mid}
}
