package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// scrubStartDelay is how long after start-up the first scrub pass waits, so
// that warming and the first readers go first. Tests lower it.
var scrubStartDelay = 5 * time.Minute

// scrubber is the background scrub: one goroutine, owned by the Daemon,
// that verifies every cached copy (tier.Cache.Verify) at tiers.scrub.rate,
// a pass every tiers.scrub.interval. The first pass starts scrubStartDelay
// after the daemon, each later one an interval after the previous one
// started (at once if that one took longer). A reload that changes the
// settings stops the pass in progress and starts one on the new settings at
// once (if the rate is not 0).
type scrubber struct {
	cache *tier.Cache
	log   *slog.Logger
	// onPass, if set (by tests), is called after each pass.
	onPass atomic.Pointer[func(stats.Verify, error)]

	mu     sync.Mutex // protects cfg and cancel
	cfg    ScrubConfig
	cancel context.CancelFunc // stops the pass in progress; nil between passes

	changed chan struct{} // the settings changed; buffered
	stop    chan struct{} // closed by close
	done    sync.WaitGroup
}

// startScrubber starts the scrub goroutine on cfg.
func startScrubber(cache *tier.Cache, log *slog.Logger, cfg ScrubConfig) *scrubber {
	s := &scrubber{cache: cache, log: log, cfg: cfg, changed: make(chan struct{}, 1), stop: make(chan struct{})}
	s.done.Go(s.loop)
	return s
}

// close stops the pass in progress and waits for the goroutine.
func (s *scrubber) close() {
	close(s.stop)
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.done.Wait()
}

// set applies new settings and reports whether they differ from the
// running ones.
func (s *scrubber) set(cfg ScrubConfig) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cfg == s.cfg {
		return false
	}
	s.cfg = cfg
	if s.cancel != nil {
		s.cancel()
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return true
}

// settings returns the running settings.
func (s *scrubber) settings() ScrubConfig {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// loop runs passes when due until close.
func (s *scrubber) loop() {
	next := time.Now().Add(scrubStartDelay)
	for {
		cfg := s.settings()
		switch s.wait(cfg, next) {
		case waitStop:
			return
		case waitChanged:
			next = time.Now()
			continue
		}
		start := time.Now()
		if s.pass(cfg) {
			next = start.Add(cfg.interval())
		}
	}
}

// What wait saw.
const (
	waitDue = iota
	waitChanged
	waitStop
)

// wait waits until next if cfg scrubs at all (forever if not), until the
// settings change or until close.
func (s *scrubber) wait(cfg ScrubConfig, next time.Time) int {
	var due <-chan time.Time
	if cfg.Rate > 0 {
		t := time.NewTimer(time.Until(next))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-s.stop:
		return waitStop
	case <-s.changed:
		return waitChanged
	case <-due:
		return waitDue
	}
}

// pass verifies the whole cache on cfg and logs what it found. It reports
// false if it did not run to its end: the settings changed, or close.
func (s *scrubber) pass(cfg ScrubConfig) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		return false
	default:
	}
	if s.cfg != cfg { // changed since the loop read it: s.changed says so
		s.mu.Unlock()
		return false
	}
	s.cancel = cancel
	s.mu.Unlock()
	start := time.Now()
	res, err := s.cache.Verify(ctx, tier.VerifyOptions{Rate: int64(cfg.Rate)})
	s.mu.Lock()
	s.cancel = nil
	s.mu.Unlock()
	if fn := s.onPass.Load(); fn != nil {
		(*fn)(res.Verify, err)
	}
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil && !errors.Is(err, tier.ErrClosed):
		s.log.Warn("scrub failed", "err", err)
		return true
	}
	level := slog.LevelInfo
	if res.Corrupt+res.Damaged > 0 {
		level = slog.LevelWarn
	}
	s.log.Log(context.Background(), level, "scrub pass done", "objects", res.Objects, "copies", res.Copies,
		"bytes", res.Bytes, "verified", res.Verified, "unverifiable", res.Unverifiable,
		"corrupt", res.Corrupt, "damaged", res.Damaged, "took", time.Since(start).Round(time.Second).String())
	return true
}
