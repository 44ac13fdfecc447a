package gpubench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/cacheagent/cacheagent/gpu"
)

// must2 returns a function that returns v, failing t if err is not nil.
func must2[T any](t *testing.T) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func TestBenchFake(t *testing.T) {
	b := must2[*gpu.Fake](t)(gpu.NewFake(gpu.FakeConfig{}))
	defer b.Close()
	cfg := Config{Size: 3<<20 + 123, Reps: 2, Pool: gpu.PoolConfig{Buffers: 2, Size: 1 << 20}, Workers: 2, ShmDir: t.TempDir()}
	rep, err := Run(t.Context(), b, 0, cfg)
	if err != nil {
		t.Fatalf("Bench: %v", err)
	}
	checkBenchReport(t, rep, "fake")
}

func checkBenchReport(t *testing.T, rep Report, backend string) {
	t.Helper()
	if rep.Backend != backend || len(rep.Results) != 4 {
		t.Fatalf("report = %+v; want backend %s, 4 results", rep, backend)
	}
	for i, name := range []string{"pinned", "pageable", "staging", "registered"} {
		r := rep.Results[i]
		if r.Name != name || r.Error != "" || r.GBps <= 0 || r.PctOfPinned <= 0 {
			t.Errorf("result %d = %+v; want %s measured", i, r, name)
		}
		if rep.CeilingGBps > 0 && r.PctOfLink <= 0 {
			t.Errorf("%s: no %% of link with a ceiling of %v", name, rep.CeilingGBps)
		}
	}
	if p := rep.Results[0].PctOfPinned; math.Abs(p-100) > 1e-9 {
		t.Errorf("pinned is %v%% of itself", p)
	}
	var back Report
	if js, err := json.Marshal(rep); err != nil || json.Unmarshal(js, &back) != nil || !bytes.Contains(js, []byte(`"gbps"`)) {
		t.Errorf("JSON round trip: %s, %v", js, err)
	}
}

func TestBenchPathErrors(t *testing.T) {
	injected := errors.New("no registration today")
	b := must2[*gpu.Fake](t)(gpu.NewFake(gpu.FakeConfig{Fault: func(op string, _ int) error {
		if op == "Register" {
			return injected
		}
		return nil
	}}))
	defer b.Close()
	rep, err := Run(t.Context(), b, 0, Config{Size: 1 << 20, Reps: 1, ShmDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Bench = %v; a failing path must not fail the bench", err)
	}
	if r := rep.Results[3]; r.Error == "" || r.GBps != 0 {
		t.Errorf("registered = %+v; want its error", r)
	}
	if _, err := Run(t.Context(), &gpu.None{}, 0, Config{}); !errors.Is(err, gpu.ErrNoGPU) {
		t.Errorf("Run(gpu.None) = %v; want ErrNoGPU", err)
	}
	if _, err := Run(t.Context(), b, 0, Config{Reps: -1}); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("Run(Reps -1) = %v; want gpu.ErrInvalid", err)
	}
}

func TestParallelCopy(t *testing.T) {
	for _, n := range []int{0, 1, 1<<20 - 1, 3<<20 + 7} {
		for _, w := range []int{1, 3, 8} {
			src, dst := make([]byte, n), make([]byte, n)
			benchPattern(src)
			parallelCopy(dst, src, w)
			if !bytes.Equal(dst, src) {
				t.Errorf("parallelCopy(%d bytes, %d workers) differs", n, w)
			}
		}
	}
}
