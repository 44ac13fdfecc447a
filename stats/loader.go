package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// Loader counts what a loader delivered and where its consumer waited.
// Every field is a total since the loader started. A stall is time the
// consumer spent blocked in Next; it is split by what the batch it waited
// for was doing at each moment:
//
//   - WaitFetch: its shard was being fetched (staged, or the whole Acquire
//     when there is no stager);
//   - WaitPromote: its shard was being copied from disk to shm and mapped;
//   - WaitGather: its rows were being copied into the batch buffer;
//   - WaitOther: anything else: the batch not yet sampled because every
//     buffer was in use (the consumer holds its prefetched batches), or
//     waiting for a gathering goroutine.
//
// The four add up to Wait. On the wire (JSON) durations are float seconds,
// under keys ending in _seconds.
//
// Add, Sub and Below do the arithmetic of reports (the daemon sums what
// each loader's totals grew); a new field goes in the struct, in wire, and
// in fields.
type Loader struct {
	// Batches and Samples count what Next returned; Bytes the size of
	// their arrays; ZeroCopy the batches served without a copy.
	Batches, Samples, Bytes, ZeroCopy int64
	// Wait is the time Next blocked, split as the type's documentation
	// says.
	Wait, WaitFetch, WaitPromote, WaitGather, WaitOther time.Duration
	// Gather is the time spent copying rows, over all gathering
	// goroutines; BytesGathered the bytes they copied.
	Gather        time.Duration
	BytesGathered int64
	// ShardsOpened counts shard openings (once per shard per epoch);
	// OpenTime their total time, staging included.
	ShardsOpened int64
	OpenTime     time.Duration
	// PlanErrors and StageErrors count advisory failures of the planner
	// and of promotions; the loader carried on.
	PlanErrors, StageErrors int64
}

// fields returns a pointer to every field of s, each as an int64 (a
// time.Duration is one), for the arithmetic below.
func (s *Loader) fields() []*int64 {
	return []*int64{&s.Batches, &s.Samples, &s.Bytes, &s.ZeroCopy,
		(*int64)(&s.Wait), (*int64)(&s.WaitFetch), (*int64)(&s.WaitPromote), (*int64)(&s.WaitGather),
		(*int64)(&s.WaitOther), (*int64)(&s.Gather), &s.BytesGathered, &s.ShardsOpened,
		(*int64)(&s.OpenTime), &s.PlanErrors, &s.StageErrors}
}

// Add returns s + o, field by field.
func (s Loader) Add(o Loader) Loader {
	a, b := s.fields(), o.fields()
	for i := range a {
		*a[i] += *b[i]
	}
	return s
}

// Sub returns s - o, field by field.
func (s Loader) Sub(o Loader) Loader {
	a, b := s.fields(), o.fields()
	for i := range a {
		*a[i] -= *b[i]
	}
	return s
}

// Below reports whether s is below o in any field: totals s cannot have
// grown from o.
func (s Loader) Below(o Loader) bool {
	a, b := s.fields(), o.fields()
	for i := range a {
		if *a[i] < *b[i] {
			return true
		}
	}
	return false
}

// loaderWire is Loader on the wire: durations in seconds.
type loaderWire struct {
	Batches        int64   `json:"batches"`
	Samples        int64   `json:"samples"`
	Bytes          int64   `json:"bytes"`
	ZeroCopy       int64   `json:"zero_copy"`
	WaitSeconds    float64 `json:"wait_seconds"`
	FetchSeconds   float64 `json:"fetch_seconds"`
	PromoteSeconds float64 `json:"promote_seconds"`
	GatherSeconds  float64 `json:"gather_seconds"`
	OtherSeconds   float64 `json:"other_seconds"`
	GatherWork     float64 `json:"gather_work_seconds"`
	BytesGathered  int64   `json:"bytes_gathered"`
	ShardsOpened   int64   `json:"shards_opened"`
	OpenSeconds    float64 `json:"open_seconds"`
	PlanErrors     int64   `json:"plan_errors"`
	StageErrors    int64   `json:"stage_errors"`
}

// MarshalJSON encodes s with its durations in seconds.
func (s Loader) MarshalJSON() ([]byte, error) {
	return json.Marshal(loaderWire{Batches: s.Batches, Samples: s.Samples, Bytes: s.Bytes, ZeroCopy: s.ZeroCopy,
		WaitSeconds: s.Wait.Seconds(), FetchSeconds: s.WaitFetch.Seconds(),
		PromoteSeconds: s.WaitPromote.Seconds(), GatherSeconds: s.WaitGather.Seconds(),
		OtherSeconds: s.WaitOther.Seconds(), GatherWork: s.Gather.Seconds(), BytesGathered: s.BytesGathered,
		ShardsOpened: s.ShardsOpened, OpenSeconds: s.OpenTime.Seconds(), PlanErrors: s.PlanErrors,
		StageErrors: s.StageErrors})
}

// UnmarshalJSON decodes what MarshalJSON encodes; missing keys are zero.
// It rejects a number of seconds a time.Duration cannot hold.
func (s *Loader) UnmarshalJSON(b []byte) error {
	var w loaderWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	v := Loader{Batches: w.Batches, Samples: w.Samples, Bytes: w.Bytes, ZeroCopy: w.ZeroCopy,
		BytesGathered: w.BytesGathered, ShardsOpened: w.ShardsOpened, PlanErrors: w.PlanErrors,
		StageErrors: w.StageErrors}
	for _, d := range []struct {
		key string
		sec float64
		to  *time.Duration
	}{
		{"wait_seconds", w.WaitSeconds, &v.Wait},
		{"fetch_seconds", w.FetchSeconds, &v.WaitFetch},
		{"promote_seconds", w.PromoteSeconds, &v.WaitPromote},
		{"gather_seconds", w.GatherSeconds, &v.WaitGather},
		{"other_seconds", w.OtherSeconds, &v.WaitOther},
		{"gather_work_seconds", w.GatherWork, &v.Gather},
		{"open_seconds", w.OpenSeconds, &v.OpenTime},
	} {
		var err error
		if *d.to, err = seconds(d.sec); err != nil {
			return fmt.Errorf("stats: loader %s: %w", d.key, err)
		}
	}
	*s = v
	return nil
}

// seconds converts a number of seconds to a Duration, rounded to the
// nanosecond, or fails if it does not fit.
func seconds(sec float64) (time.Duration, error) {
	ns := math.Round(sec * 1e9)
	if math.IsNaN(ns) || ns < math.MinInt64 || ns >= math.MaxInt64 {
		return 0, fmt.Errorf("%g seconds is out of range", sec)
	}
	return time.Duration(ns), nil
}
