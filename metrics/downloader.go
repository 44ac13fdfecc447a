package metrics

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// Downloader fetches one object generation into dst; *fetch.Downloader and
// tier.Downloader have this shape.
type Downloader interface {
	Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error
}

// WrapDownloader returns a Downloader that forwards to d and records each
// download's duration (cacheagent_fetch_duration_seconds) and, while it
// runs, its current priority (cacheagent_fetch_inflight).
func (m *Metrics) WrapDownloader(d Downloader) Downloader {
	return &timedDownloader{d: d, m: m}
}

// timedDownloader is the wrapper WrapDownloader returns.
type timedDownloader struct {
	d Downloader
	m *Metrics
}

// Fetch implements Downloader.
func (t *timedDownloader) Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error {
	if u == nil {
		u = object.NewUrgency(object.Warm)
	}
	prio := u.Level()
	t.m.inflight.add(u)
	start := time.Now()
	err := t.d.Fetch(ctx, a, dst, u)
	el := time.Since(start)
	t.m.inflight.remove(u)
	result := "ok"
	if err != nil {
		result = "error"
	}
	t.m.fetches.WithLabelValues(prio.String(), result).Observe(el.Seconds())
	return err
}

// inflight tracks the urgencies of downloads in progress, so that a scrape
// counts them by their current priority.
type inflight struct {
	mu sync.Mutex
	us map[*object.Urgency]int // protected by mu
}

func newInflight() *inflight { return &inflight{us: make(map[*object.Urgency]int)} }

func (f *inflight) add(u *object.Urgency) {
	f.mu.Lock()
	f.us[u]++
	f.mu.Unlock()
}

func (f *inflight) remove(u *object.Urgency) {
	f.mu.Lock()
	if f.us[u]--; f.us[u] <= 0 {
		delete(f.us, u)
	}
	f.mu.Unlock()
}

// byPriority counts downloads in progress by their urgency's level now.
func (f *inflight) byPriority() map[object.Priority]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[object.Priority]int, 3)
	for u, n := range f.us {
		out[u.Level()] += n
	}
	return out
}
