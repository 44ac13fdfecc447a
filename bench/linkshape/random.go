package linkshape

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrConfig is matched by every error about a Random configuration.
var ErrConfig = errors.New("linkshape: invalid fault configuration")

// DefaultResetWithin is Random.ResetWithin's default: 1 MiB.
const DefaultResetWithin = 1 << 20

// DefaultCorruptWithin is Random.CorruptWithin's default: 4 KiB, so that
// the flipped byte lands in most bodies.
const DefaultCorruptWithin = 4 << 10

// Random describes a fault plan that fails a share of media GETs at random.
// Each media GET's draw depends only on Seed and its number n, so the same
// sequence of requests gets the same faults on every run (under concurrency
// which request is the n-th may vary).
type Random struct {
	// Seed seeds the draws.
	Seed uint64
	// StatusRate is the share of media GETs, in [0, 1], answered with
	// Status and no body.
	StatusRate float64
	// Status is the error status of StatusRate's answers: 429 or 5xx.
	// 0 means 503.
	Status int
	// ResetRate is the share of media GETs, in [0, 1], whose connection is
	// reset after a random number of body bytes in [1, ResetWithin]. A body
	// shorter than the draw is delivered whole. StatusRate + ResetRate must
	// not exceed 1.
	ResetRate float64
	// ResetWithin bounds the reset offsets, in bytes. 0 means
	// DefaultResetWithin.
	ResetWithin int64
	// CorruptRate is the share of media GETs, in [0, 1], whose body has one
	// byte flipped (Fault.Corrupt) at a random offset in [0,
	// CorruptWithin). A body shorter than the draw is delivered intact. The
	// three rates together must not exceed 1.
	CorruptRate float64
	// CorruptWithin bounds the offsets of flipped bytes. 0 means
	// DefaultCorruptWithin.
	CorruptWithin int64
	// CorruptMiddle flips the middle byte of the body instead
	// (Fault.CorruptMiddle): a corruption tied to a position in the
	// response, which repeats itself whenever the same range is read.
	CorruptMiddle bool
	// CloseRate is the share of media GETs, in [0, 1], whose connection is
	// closed cleanly (Fault.CloseAfter: a truncated body) after a random
	// number of body bytes in [1, ResetWithin]. The four rates together
	// must not exceed 1.
	CloseRate float64
}

// Plan validates r and returns its fault plan, or nil if every rate is 0.
func (r Random) Plan() (FaultPlan, error) {
	switch {
	case !(r.StatusRate >= 0 && r.StatusRate <= 1): // also rejects NaN
		return nil, fmt.Errorf("%w: status rate %v is not in [0, 1]", ErrConfig, r.StatusRate)
	case !(r.ResetRate >= 0 && r.ResetRate <= 1):
		return nil, fmt.Errorf("%w: reset rate %v is not in [0, 1]", ErrConfig, r.ResetRate)
	case !(r.CorruptRate >= 0 && r.CorruptRate <= 1):
		return nil, fmt.Errorf("%w: corrupt rate %v is not in [0, 1]", ErrConfig, r.CorruptRate)
	case !(r.CloseRate >= 0 && r.CloseRate <= 1):
		return nil, fmt.Errorf("%w: close rate %v is not in [0, 1]", ErrConfig, r.CloseRate)
	case r.StatusRate+r.ResetRate+r.CorruptRate+r.CloseRate > 1:
		return nil, fmt.Errorf("%w: status rate %v + reset rate %v + corrupt rate %v + close rate %v exceed 1",
			ErrConfig, r.StatusRate, r.ResetRate, r.CorruptRate, r.CloseRate)
	case r.Status != 0 && r.Status != http.StatusTooManyRequests && (r.Status < 500 || r.Status > 599):
		return nil, fmt.Errorf("%w: status %d is not 429 or 5xx", ErrConfig, r.Status)
	case r.ResetWithin < 0:
		return nil, fmt.Errorf("%w: negative reset offset bound %d", ErrConfig, r.ResetWithin)
	case r.CorruptWithin < 0:
		return nil, fmt.Errorf("%w: negative corrupt offset bound %d", ErrConfig, r.CorruptWithin)
	}
	if r.StatusRate == 0 && r.ResetRate == 0 && r.CorruptRate == 0 && r.CloseRate == 0 {
		return nil, nil
	}
	if r.Status == 0 {
		r.Status = http.StatusServiceUnavailable
	}
	if r.ResetWithin == 0 {
		r.ResetWithin = DefaultResetWithin
	}
	if r.CorruptWithin == 0 {
		r.CorruptWithin = DefaultCorruptWithin
	}
	return func(_ *http.Request, n int) Fault {
		u := unit(mix(r.Seed, 2*uint64(n)))
		switch {
		case u < r.StatusRate:
			return Fault{Status: r.Status}
		case u < r.StatusRate+r.ResetRate:
			return Fault{ResetAfter: 1 + int64(mix(r.Seed, 2*uint64(n)+1)%uint64(r.ResetWithin))}
		case u < r.StatusRate+r.ResetRate+r.CorruptRate:
			return Fault{Corrupt: true, CorruptAt: int64(mix(r.Seed, 2*uint64(n)+1) % uint64(r.CorruptWithin)),
				CorruptMiddle: r.CorruptMiddle}
		case u < r.StatusRate+r.ResetRate+r.CorruptRate+r.CloseRate:
			return Fault{CloseAfter: 1 + int64(mix(r.Seed, 2*uint64(n)+1)%uint64(r.ResetWithin))}
		}
		return Fault{}
	}, nil
}

// mix returns the i-th word of SplitMix64's stream for seed: independent
// draws without shared state.
func mix(seed, i uint64) uint64 {
	z := seed*0xd1342543de82ef95 + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// unit maps a word to [0, 1) with 53 bits of precision.
func unit(w uint64) float64 { return float64(w>>11) / (1 << 53) }
