package plan

import (
	"math"
	"time"
)

// DefaultHalfLife is the half-life of a zero Meter's average.
const DefaultHalfLife = 5 * time.Second

// Meter estimates a rate, in units per second, from observations of an
// amount done over a span of time: an exponentially weighted moving average
// in which each observation weighs by its span, so that the weight of the
// past halves every HalfLife of observed time. The zero Meter is ready to
// use. A Meter is not safe for concurrent use.
type Meter struct {
	// HalfLife is how much observed time halves the weight of older
	// observations. 0 means DefaultHalfLife.
	HalfLife time.Duration

	rate float64
	seen bool
}

// Observe records that n units were done over span d. Observations with a
// non-positive span or a negative amount are ignored.
func (m *Meter) Observe(d time.Duration, n float64) {
	if d <= 0 || n < 0 || math.IsNaN(n) || math.IsInf(n, 0) {
		return
	}
	inst := n / d.Seconds()
	if !m.seen {
		m.rate, m.seen = inst, true
		return
	}
	hl := m.HalfLife
	if hl <= 0 {
		hl = DefaultHalfLife
	}
	alpha := 1 - math.Exp2(-d.Seconds()/hl.Seconds())
	m.rate += alpha * (inst - m.rate)
}

// Rate returns the estimated rate in units per second, and whether any
// observation was made.
func (m *Meter) Rate() (float64, bool) { return m.rate, m.seen }

// Rates are measured throughputs in bytes per second; 0 means unknown.
type Rates struct {
	// Fetch is how fast the cache brings objects in (aggregate).
	Fetch float64
	// Consume is how fast readers use them.
	Consume float64
}

// LookaheadMargin is how many fetch times of one object Lookahead covers
// beyond the object itself, against jitter in either rate.
const LookaheadMargin = 2

// Lookahead returns how many bytes ahead of the reader the cache should
// hold (counting the object the reader needs next), given the measured
// rates, the size of the objects (item), the bytes the plans still hold
// ahead of their cursors (remaining) and a cap (limit, e.g. a share of the
// cache's budget; 0 means none).
//
// While fetching keeps up (Fetch >= Consume) the reader consumes
// Consume/Fetch*item bytes while one object is fetched, so holding item
// plus LookaheadMargin times that is enough. When it cannot keep up, the
// reader drains the lookahead at Consume-Fetch bytes per second, and only
// a lookahead of remaining*(1-Fetch/Consume) bytes lets it finish without
// stalling, so that much is added. Unknown rates give two objects. The
// result is at least one object (or remaining, if less) and at most limit.
func Lookahead(r Rates, item, remaining, limit int64) int64 {
	if item <= 0 || remaining <= 0 {
		return 0
	}
	want := 2 * float64(item)
	if r.Fetch > 0 && r.Consume > 0 {
		ratio := r.Consume / r.Fetch
		want = float64(item) * (1 + LookaheadMargin*ratio)
		if ratio > 1 {
			want += float64(remaining) * (1 - 1/ratio)
		}
	}
	n := int64(min(want, math.MaxInt64/2))
	n = min(n, remaining)
	if limit > 0 {
		n = min(n, limit)
	}
	return max(n, min(item, remaining))
}
