package linkshape

import (
	"errors"
	"math"
	"net/http"
	"testing"
)

func TestRandomRejectsBadConfigs(t *testing.T) {
	for _, r := range []Random{
		{StatusRate: -0.1},
		{StatusRate: 1.5},
		{StatusRate: math.NaN()},
		{ResetRate: math.Inf(1)},
		{StatusRate: 0.6, ResetRate: 0.5},
		{StatusRate: 0.1, Status: http.StatusNotFound},
		{StatusRate: 0.1, Status: 42},
		{ResetRate: 0.1, ResetWithin: -1},
		{CorruptRate: -0.1},
		{CorruptRate: math.NaN()},
		{StatusRate: 0.5, ResetRate: 0.3, CorruptRate: 0.3},
		{CorruptRate: 0.1, CorruptWithin: -1},
		{CloseRate: -0.1},
		{StatusRate: 0.3, ResetRate: 0.3, CorruptRate: 0.3, CloseRate: 0.2},
	} {
		if _, err := r.Plan(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v.Plan() error = %v; want ErrConfig", r, err)
		}
	}
}

func TestRandomWithoutFaultsIsNil(t *testing.T) {
	plan, err := Random{Seed: 3}.Plan()
	if err != nil || plan != nil {
		t.Errorf("Random{}.Plan() = %v, %v; want nil, nil", plan != nil, err)
	}
}

func TestRandomRatesAndDeterminism(t *testing.T) {
	const n = 100_000
	cfg := Random{Seed: 11, StatusRate: 0.1, ResetRate: 0.2, ResetWithin: 5000, CorruptRate: 0.1, CorruptWithin: 300,
		CloseRate: 0.1}
	a, err := cfg.Plan()
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	b, _ := cfg.Plan()
	other, _ := Random{Seed: 12, StatusRate: 0.1, ResetRate: 0.2, ResetWithin: 5000}.Plan()
	var statuses, resets, corrupts, closes, differ int
	for i := 1; i <= n; i++ {
		f := a(nil, i)
		if g := b(nil, i); g != f {
			t.Fatalf("draw %d: %+v, then %+v from the same seed", i, f, g)
		}
		if other(nil, i) != f {
			differ++
		}
		switch {
		case f.Status != 0:
			statuses++
			if f.Status != http.StatusServiceUnavailable || f.ResetAfter != 0 {
				t.Fatalf("draw %d: %+v; want a bare 503", i, f)
			}
		case f.ResetAfter != 0:
			resets++
			if f.ResetAfter < 1 || f.ResetAfter > cfg.ResetWithin {
				t.Fatalf("draw %d: reset after %d; want in [1, %d]", i, f.ResetAfter, cfg.ResetWithin)
			}
		case f.Corrupt:
			corrupts++
			if f.CorruptAt < 0 || f.CorruptAt >= cfg.CorruptWithin {
				t.Fatalf("draw %d: corrupt at %d; want in [0, %d)", i, f.CorruptAt, cfg.CorruptWithin)
			}
		case f.CloseAfter != 0:
			closes++
			if f.CloseAfter < 1 || f.CloseAfter > cfg.ResetWithin {
				t.Fatalf("draw %d: close after %d; want in [1, %d]", i, f.CloseAfter, cfg.ResetWithin)
			}
		case f != Fault{}:
			t.Fatalf("draw %d: %+v; want a status, a reset, a flipped byte, a close or nothing", i, f)
		}
	}
	// The draws are fixed by the seed, so these bounds are not flaky: they
	// check that the shares are about right (±10%).
	if statuses < 0.09*n || statuses > 0.11*n {
		t.Errorf("%d statuses in %d draws; want about %d", statuses, n, int(0.1*n))
	}
	if resets < 0.18*n || resets > 0.22*n {
		t.Errorf("%d resets in %d draws; want about %d", resets, n, int(0.2*n))
	}
	if corrupts < 0.09*n || corrupts > 0.11*n {
		t.Errorf("%d flipped bytes in %d draws; want about %d", corrupts, n, int(0.1*n))
	}
	if closes < 0.09*n || closes > 0.11*n {
		t.Errorf("%d closes in %d draws; want about %d", closes, n, int(0.1*n))
	}
	if differ < n/10 {
		t.Errorf("seeds 11 and 12 differ in %d of %d draws; want independent streams", differ, n)
	}
}

func TestRandomAllFail(t *testing.T) {
	plan, err := Random{StatusRate: 1, Status: http.StatusTooManyRequests}.Plan()
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	for i := 1; i <= 1000; i++ {
		if f := plan(nil, i); f.Status != http.StatusTooManyRequests {
			t.Fatalf("draw %d: %+v; want 429", i, f)
		}
	}
}
