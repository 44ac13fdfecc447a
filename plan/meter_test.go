package plan

import (
	"math"
	"testing"
	"time"
)

func TestMeter(t *testing.T) {
	var m Meter
	if _, ok := m.Rate(); ok {
		t.Fatalf("zero Meter has a rate")
	}
	m.Observe(2*time.Second, 200)
	if r, ok := m.Rate(); !ok || r != 100 {
		t.Fatalf("Rate after one observation = %v, %v; want 100, true", r, ok)
	}
	// One half-life at 300/s moves the average half way: 200.
	m.Observe(DefaultHalfLife, 300*DefaultHalfLife.Seconds())
	if r, _ := m.Rate(); math.Abs(r-200) > 1e-9 {
		t.Errorf("Rate after one half-life at 300/s = %v; want 200", r)
	}
	// Ignored observations.
	m.Observe(0, 5)
	m.Observe(time.Second, -1)
	m.Observe(time.Second, math.NaN())
	if r, _ := m.Rate(); math.Abs(r-200) > 1e-9 {
		t.Errorf("ignored observations changed the rate to %v", r)
	}
	// Many short observations of a steady rate converge on it.
	m2 := Meter{HalfLife: time.Second}
	m2.Observe(time.Second, 1)
	for range 3000 { // 30 half-lives
		m2.Observe(10*time.Millisecond, 50)
	}
	if r, _ := m2.Rate(); math.Abs(r-5000) > 1 {
		t.Errorf("steady 5000/s: Rate = %v", r)
	}
}

func TestLookahead(t *testing.T) {
	const mb = 1 << 20
	tests := []struct {
		name                   string
		r                      Rates
		item, remaining, limit int64
		want                   int64
	}{
		{"unknown rates", Rates{}, 10 * mb, 1000 * mb, 0, 20 * mb},
		{"fetch 4x faster", Rates{Fetch: 400, Consume: 100}, 8 * mb, 1000 * mb, 0, 12 * mb},
		{"equal rates", Rates{Fetch: 100, Consume: 100}, 8 * mb, 1000 * mb, 0, 24 * mb},
		// Consume twice the fetch rate: item*(1+2*2) plus half of what remains.
		{"fetch too slow", Rates{Fetch: 50, Consume: 100}, 8 * mb, 1000 * mb, 0, 40*mb + 500*mb},
		{"capped by limit", Rates{Fetch: 50, Consume: 100}, 8 * mb, 1000 * mb, 100 * mb, 100 * mb},
		{"capped by remaining", Rates{Fetch: 100, Consume: 100}, 8 * mb, 10 * mb, 0, 10 * mb},
		{"at least one item", Rates{Fetch: 100, Consume: 100}, 8 * mb, 1000 * mb, mb, 8 * mb},
		{"nothing left", Rates{Fetch: 100, Consume: 100}, 8 * mb, 0, 0, 0},
		{"no item size", Rates{}, 0, 100, 0, 0},
	}
	for _, tt := range tests {
		if got := Lookahead(tt.r, tt.item, tt.remaining, tt.limit); got != tt.want {
			t.Errorf("%s: Lookahead = %d; want %d", tt.name, got, tt.want)
		}
	}
}
