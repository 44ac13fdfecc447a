package gpu

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"testing"
)

func TestBenchFake(t *testing.T) {
	b := must2[*Fake](t)(NewFake(FakeConfig{}))
	defer b.Close()
	cfg := BenchConfig{Size: 3<<20 + 123, Reps: 2, Pool: PoolConfig{Buffers: 2, Size: 1 << 20}, Workers: 2, ShmDir: t.TempDir()}
	rep, err := Bench(t.Context(), b, 0, cfg)
	if err != nil {
		t.Fatalf("Bench: %v", err)
	}
	checkBenchReport(t, rep, "fake")
}

func TestBenchCUDAFakeLib(t *testing.T) {
	lib, ctl := fakeLib(t, 1)
	b := must2[Backend](t)(OpenConfig(t.Context(), Config{Mode: ModeCUDA, LibCUDA: lib, Logger: slog.New(slog.DiscardHandler)}))
	rep, err := Bench(t.Context(), b, 0, BenchConfig{Size: 2 << 20, Reps: 1, Pool: PoolConfig{Size: 512 << 10}, ShmDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Bench: %v", err)
	}
	checkBenchReport(t, rep, "cuda")
	must(t, b.Close())
	ctl.CheckNoLeaks(t)
}

func checkBenchReport(t *testing.T, rep BenchReport, backend string) {
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
	var back BenchReport
	if js, err := json.Marshal(rep); err != nil || json.Unmarshal(js, &back) != nil || !bytes.Contains(js, []byte(`"gbps"`)) {
		t.Errorf("JSON round trip: %s, %v", js, err)
	}
}

func TestBenchPathErrors(t *testing.T) {
	injected := errors.New("no registration today")
	b := must2[*Fake](t)(NewFake(FakeConfig{Fault: func(op string, _ int) error {
		if op == "Register" {
			return injected
		}
		return nil
	}}))
	defer b.Close()
	rep, err := Bench(t.Context(), b, 0, BenchConfig{Size: 1 << 20, Reps: 1, ShmDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Bench = %v; a failing path must not fail the bench", err)
	}
	if r := rep.Results[3]; r.Error == "" || r.GBps != 0 {
		t.Errorf("registered = %+v; want its error", r)
	}
	if _, err := Bench(t.Context(), &None{}, 0, BenchConfig{}); !errors.Is(err, ErrNoGPU) {
		t.Errorf("Bench(None) = %v; want ErrNoGPU", err)
	}
	if _, err := Bench(t.Context(), b, 0, BenchConfig{Reps: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Bench(Reps -1) = %v; want ErrInvalid", err)
	}
}

func TestParallelCopy(t *testing.T) {
	for _, n := range []int{0, 1, 1<<20 - 1, 3<<20 + 7} {
		for _, w := range []int{1, 3, 8} {
			src, dst := pattern(n, 4), make([]byte, n)
			parallelCopy(dst, src, w)
			if !bytes.Equal(dst, src) {
				t.Errorf("parallelCopy(%d bytes, %d workers) differs", n, w)
			}
		}
	}
}
