package gpubench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/gpu"
)

// Config sizes Run. Zero fields take their defaults.
type Config struct {
	// Size is the bytes moved per timed copy; 0 means 256 MiB.
	Size int
	// Reps is the number of timed repetitions per path, after one warm-up;
	// the median counts. 0 means 5.
	Reps int
	// Pool sizes the staging pool (default 4 x 64 MiB).
	Pool gpu.PoolConfig
	// Workers is the number of goroutines filling a staging buffer; 0
	// means min(4, GOMAXPROCS).
	Workers int
	// ShmDir holds the file mapped for the registered path; "" means
	// /dev/shm.
	ShmDir string
}

// Report is what Run measured.
type Report struct {
	// Backend is the backend's mode: "cuda", or "fake" (host memcpy
	// speeds, not PCIe).
	Backend string `json:"backend"`
	// Device is the device measured.
	Device gpu.DeviceInfo `json:"device"`
	// CeilingGBps is the device's PCIe link ceiling, 0 if unknown.
	CeilingGBps float64 `json:"link_ceiling_gbps"`
	// Size and Reps are the bytes per copy and repetitions used.
	Size int `json:"size"`
	Reps int `json:"reps"`
	// Results has one entry per path: pinned, pageable, staging,
	// registered.
	Results []Result `json:"results"`
	// RegisterMsPerGB and UnregisterMsPerGB are the cost of registering
	// and unregistering the /dev/shm mapping; 0 if not measured.
	RegisterMsPerGB   float64 `json:"register_ms_per_gb,omitempty"`
	UnregisterMsPerGB float64 `json:"unregister_ms_per_gb,omitempty"`
}

// Result is one path's host-to-device throughput.
type Result struct {
	// Name is the path: "pinned" (cuMemHostAlloc source, the peak),
	// "pageable" (Go heap), "staging" (pageable rows gathered through the
	// staging pool) or "registered" (a /dev/shm mapping, registered
	// read-only).
	Name string `json:"name"`
	// GBps is the median throughput in GB/s (10^9 bytes), wall-clocked
	// from the first enqueue to the stream's completion.
	GBps float64 `json:"gbps"`
	// PctOfPinned and PctOfLink relate GBps to the pinned peak and the
	// link ceiling; 0 when either is unknown.
	PctOfPinned float64 `json:"pct_of_pinned"`
	PctOfLink   float64 `json:"pct_of_link"`
	// Error says why the path could not be measured.
	Error string `json:"error,omitempty"`
}

// Run measures host-to-device copy throughput on device ordinal of b
// along each path the agent can use. A path that fails is reported with its
// error; Run itself fails only if the device cannot be used at all.
func Run(ctx context.Context, b gpu.Backend, ordinal int, cfg Config) (Report, error) {
	if cfg.Size == 0 {
		cfg.Size = 256 << 20
	}
	if cfg.Reps == 0 {
		cfg.Reps = 5
	}
	if cfg.Workers == 0 {
		cfg.Workers = min(4, runtime.GOMAXPROCS(0))
	}
	if cfg.ShmDir == "" {
		cfg.ShmDir = "/dev/shm"
	}
	if cfg.Size < 1 || cfg.Reps < 1 || cfg.Workers < 1 {
		return Report{}, fmt.Errorf("gpu: bench: size, reps and workers must be positive: %w", gpu.ErrInvalid)
	}
	d, err := b.Open(ctx, ordinal)
	if err != nil {
		return Report{}, err
	}
	defer d.Close()
	r := &benchRun{d: d, cfg: cfg}
	if r.dst, err = d.Alloc(ctx, cfg.Size); err != nil {
		return Report{}, err
	}
	if r.s, err = d.NewStream(ctx); err != nil {
		return Report{}, err
	}
	rep := Report{Backend: b.Kind().String(), Device: d.Info(), Size: cfg.Size, Reps: cfg.Reps}
	rep.CeilingGBps = rep.Device.Link.Ceiling()
	rep.Results = []Result{
		r.result(ctx, "pinned", r.pinned),
		r.result(ctx, "pageable", r.pageable),
		r.result(ctx, "staging", r.staging),
		r.result(ctx, "registered", r.registered),
	}
	rep.RegisterMsPerGB, rep.UnregisterMsPerGB = r.regMsPerGB, r.unregMsPerGB
	peak := rep.Results[0].GBps
	for i := range rep.Results {
		res := &rep.Results[i]
		if peak > 0 {
			res.PctOfPinned = 100 * res.GBps / peak
		}
		if rep.CeilingGBps > 0 {
			res.PctOfLink = 100 * res.GBps / rep.CeilingGBps
		}
	}
	return rep, ctx.Err()
}

// benchRun is one Run's state.
type benchRun struct {
	d   gpu.Device
	s   gpu.Stream
	dst *gpu.DeviceMem
	cfg Config

	regMsPerGB, unregMsPerGB float64
}

// result runs one path, turning its error into the result's Error.
func (r *benchRun) result(ctx context.Context, name string, path func(context.Context) (float64, error)) Result {
	res := Result{Name: name}
	gbps, err := path(ctx)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.GBps = gbps
	return res
}

// measure runs copyAll (which enqueues one Size-byte transfer) once to
// warm up and Reps times timed, checks the device got src, and returns the
// median GB/s.
func (r *benchRun) measure(ctx context.Context, src []byte, copyAll func() error) (float64, error) {
	var times []time.Duration
	for i := range r.cfg.Reps + 1 {
		start := time.Now()
		if err := copyAll(); err != nil {
			return 0, err
		}
		if err := r.s.Sync(ctx); err != nil {
			return 0, err
		}
		if i > 0 {
			times = append(times, time.Since(start))
		}
	}
	if err := r.verify(ctx, src); err != nil {
		return 0, err
	}
	slices.Sort(times)
	med := times[len(times)/2]
	return float64(r.cfg.Size) / 1e9 / med.Seconds(), nil
}

// verify compares the head and tail of the device buffer with src.
func (r *benchRun) verify(ctx context.Context, src []byte) error {
	n := min(4096, len(src))
	for _, off := range []int{0, len(src) - n} {
		got := make([]byte, n)
		if err := r.d.CopyDtoH(ctx, got, r.dst, off); err != nil {
			return err
		}
		if !bytes.Equal(got, src[off:off+n]) {
			return fmt.Errorf("gpu: bench: device bytes at %d differ from the source", off)
		}
	}
	return nil
}

func benchPattern(b []byte) {
	for i := range b {
		b[i] = byte(i*131 + i>>12)
	}
}

func (r *benchRun) pinned(ctx context.Context) (float64, error) {
	h, err := r.d.HostAlloc(ctx, r.cfg.Size)
	if err != nil {
		return 0, err
	}
	defer h.Free()
	benchPattern(h.Bytes())
	return r.measure(ctx, h.Bytes(), func() error { return r.s.CopyHtoD(ctx, r.dst, 0, h.Bytes()) })
}

func (r *benchRun) pageable(ctx context.Context) (float64, error) {
	src := make([]byte, r.cfg.Size)
	benchPattern(src)
	return r.measure(ctx, src, func() error { return r.s.CopyHtoD(ctx, r.dst, 0, src) })
}

// staging gathers pageable rows into staging buffers with Workers
// goroutines and copies each buffer as it fills, as the loader does.
func (r *benchRun) staging(ctx context.Context) (float64, error) {
	p, err := gpu.NewPool(ctx, r.d, r.cfg.Pool)
	if err != nil {
		return 0, err
	}
	if err := warmPool(ctx, p); err != nil {
		return 0, errors.Join(err, p.Close(ctx))
	}
	src := make([]byte, r.cfg.Size)
	benchPattern(src)
	gbps, err := r.measure(ctx, src, func() error {
		for off := 0; off < len(src); off += p.Size() {
			n := min(p.Size(), len(src)-off)
			buf, err := p.Get(ctx)
			if err != nil {
				return err
			}
			parallelCopy(buf.Bytes()[:n], src[off:off+n], r.cfg.Workers)
			if err := r.s.CopyHtoD(ctx, r.dst, off, buf.Bytes()[:n]); err != nil {
				return errors.Join(err, p.Put(buf, nil))
			}
			ev, err := r.s.Record(ctx)
			if err != nil {
				return errors.Join(err, r.s.Sync(ctx), p.Put(buf, nil))
			}
			if err := p.Put(buf, ev); err != nil {
				return err
			}
		}
		return nil
	})
	return gbps, errors.Join(err, p.Close(ctx))
}

// warmPool writes every buffer once, so no timed copy pays for first
// touches (CUDA's pinned pages are resident already; a fake's may not be).
func warmPool(ctx context.Context, p *gpu.Pool) error {
	bufs := make([]*gpu.Staging, 0, p.Len())
	var err error
	for range p.Len() {
		var s *gpu.Staging
		if s, err = p.Get(ctx); err != nil {
			break
		}
		clear(s.Bytes())
		bufs = append(bufs, s)
	}
	for _, s := range bufs {
		err = errors.Join(err, p.Put(s, nil))
	}
	return err
}

// registered maps a /dev/shm file read-only, registers it and copies from
// it directly, timing registration too.
func (r *benchRun) registered(ctx context.Context) (float64, error) {
	m, err := mapShm(r.cfg.ShmDir, r.cfg.Size, benchPattern)
	if err != nil {
		return 0, err
	}
	defer m.unmap()
	start := time.Now()
	reg, err := r.d.Register(ctx, m.b, true)
	if err != nil {
		return 0, err
	}
	gb := float64(r.cfg.Size) / 1e9
	r.regMsPerGB = float64(time.Since(start)) / float64(time.Millisecond) / gb
	gbps, err := r.measure(ctx, m.b, func() error { return r.s.CopyHtoD(ctx, r.dst, 0, m.b) })
	start = time.Now()
	if uerr := reg.Unregister(); uerr != nil {
		return 0, errors.Join(err, uerr)
	}
	r.unregMsPerGB = float64(time.Since(start)) / float64(time.Millisecond) / gb
	return gbps, err
}

// parallelCopy copies src to dst with up to workers goroutines.
func parallelCopy(dst, src []byte, workers int) {
	const minChunk = 1 << 20
	workers = max(1, min(workers, len(src)/minChunk))
	chunk := (len(src) + workers - 1) / workers
	var wg sync.WaitGroup
	for off := 0; off < len(src); off += chunk {
		end := min(off+chunk, len(src))
		wg.Go(func() { copy(dst[off:end], src[off:end]) })
	}
	wg.Wait()
}
