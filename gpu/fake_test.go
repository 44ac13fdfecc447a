package gpu

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// fakeDev opens device 0 of a new Fake, closed at cleanup.
func fakeDev(t *testing.T, cfg FakeConfig) *FakeDevice {
	t.Helper()
	b, err := NewFake(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return openDev(t, b, 0).(*FakeDevice)
}

func cancelledCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

// TestFakeHoldKeepsCopyInFlight shows the pool refusing a buffer whose copy
// has not run, and handing it out once it has.
func TestFakeHoldKeepsCopyInFlight(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{})
	p := must2[*Pool](t)(NewPool(ctx, d, PoolConfig{Buffers: 1, Size: 4096}))
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 4096))
	s := must2[Stream](t)(d.NewStream(ctx))

	release := d.Hold()
	buf := must2[*Staging](t)(p.Get(ctx))
	copy(buf.Bytes(), pattern(4096, 5))
	must(t, s.CopyHtoD(ctx, dev, 0, buf.Bytes()))
	ev := must2[Event](t)(s.Record(ctx))
	if done, err := ev.Done(); done || err != nil {
		t.Fatalf("Done while held = %v, %v; want false", done, err)
	}
	if _, err := ev.Elapsed(ev); !errors.Is(err, ErrNotReady) {
		t.Errorf("Elapsed while held = %v; want ErrNotReady", err)
	}
	reuse := must2[Event](t)(s.Record(ctx))
	must(t, p.Put(buf, reuse))
	if _, err := p.Get(cancelledCtx(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get while the buffer's copy is held = %v; want context.Canceled", err)
	}
	release()
	release() // harmless
	if got := must2[*Staging](t)(p.Get(ctx)); got != buf {
		t.Error("Get after release returned another buffer")
	}
	must(t, ev.Wait(ctx))
	if got := deviceBytes(t, d, s, dev, 0, 4096); !bytes.Equal(got, pattern(4096, 5)) {
		t.Error("device bytes differ from the staged batch")
	}
}

// TestFakeDetectsReuse is the bug the Fake exists to catch: overwriting a
// pinned buffer before the copy out of it has run.
func TestFakeDetectsReuse(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{})
	host := must2[*HostMem](t)(d.HostAlloc(ctx, 4096))
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 4096))
	s := must2[Stream](t)(d.NewStream(ctx))

	release := d.Hold()
	copy(host.Bytes(), pattern(4096, 1))
	must(t, s.CopyHtoD(ctx, dev, 0, host.Bytes()))
	ev := must2[Event](t)(s.Record(ctx))
	copy(host.Bytes(), pattern(4096, 2)) // the bug: the copy has not run
	release()
	if err := ev.Wait(ctx); !errors.Is(err, ErrSourceModified) {
		t.Fatalf("Wait = %v; want ErrSourceModified", err)
	}
	// The error is sticky: later work on the stream reports it too.
	if err := s.Sync(ctx); !errors.Is(err, ErrSourceModified) {
		t.Errorf("Sync = %v; want ErrSourceModified", err)
	}
}

// TestFakePageableSnapshot: pageable sources are staged at CopyHtoD, so
// reusing them at once is correct and not reported.
func TestFakePageableSnapshot(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{})
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 4096))
	s := must2[Stream](t)(d.NewStream(ctx))
	release := d.Hold()
	src := pattern(4096, 1)
	must(t, s.CopyHtoD(ctx, dev, 0, src))
	copy(src, pattern(4096, 2))
	release()
	if got := deviceBytes(t, d, s, dev, 0, 4096); !bytes.Equal(got, pattern(4096, 1)) {
		t.Error("pageable copy saw the later bytes")
	}
}

// TestFakeStreamsIndependent: events wait only for their own stream.
func TestFakeStreamsIndependent(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{})
	s1 := must2[Stream](t)(d.NewStream(ctx))
	s2 := must2[Stream](t)(d.NewStream(ctx))
	release := d.Hold()
	e1 := must2[Event](t)(s1.Record(ctx))
	e2 := must2[Event](t)(s2.Record(ctx))
	if done, _ := e2.Done(); done {
		t.Error("event completed while the device was held")
	}
	release()
	must(t, e1.Wait(ctx))
	must(t, e2.Wait(ctx))
	// The streams are unordered, so the difference may have either sign.
	if _, err := e2.Elapsed(e1); err != nil {
		t.Errorf("Elapsed across streams: %v", err)
	}
}

func TestFakeCloseWhileHeld(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{})
	host := must2[*HostMem](t)(d.HostAlloc(ctx, 4096))
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 4096))
	s := must2[Stream](t)(d.NewStream(ctx))
	d.Hold()
	for range 10 {
		must(t, s.CopyHtoD(ctx, dev, 0, host.Bytes()))
	}
	ev := must2[Event](t)(s.Record(ctx))
	must(t, d.Close()) // drops the hold, runs the queue, waits for the stream
	if release := d.Hold(); release == nil {
		t.Error("Hold after Close returned nil")
	}
	if err := ev.Wait(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Wait on a closed device's event = %v; want ErrClosed", err)
	}
}

func TestFakeFault(t *testing.T) {
	ctx := t.Context()
	injected := errors.New("injected")
	var ops []string
	d := fakeDev(t, FakeConfig{Fault: func(op string, ordinal int) error {
		ops = append(ops, op)
		if op == "CopyHtoD" || op == "Register" {
			return injected
		}
		return nil
	}})
	dev := must2[*DeviceMem](t)(d.Alloc(ctx, 16))
	s := must2[Stream](t)(d.NewStream(ctx))
	if err := s.CopyHtoD(ctx, dev, 0, make([]byte, 16)); !errors.Is(err, injected) {
		t.Errorf("CopyHtoD = %v; want the injected error", err)
	}
	if _, err := d.Register(ctx, make([]byte, 16), false); !errors.Is(err, injected) {
		t.Errorf("Register = %v; want the injected error", err)
	}
	if want := []string{"Alloc", "NewStream", "CopyHtoD", "Register"}; !equalStrings(ops, want) {
		t.Errorf("Fault saw %v; want %v", ops, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestFakeRegisterOverlapsPinned(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{})
	host := must2[*HostMem](t)(d.HostAlloc(ctx, 8192))
	if _, err := d.Register(ctx, host.Bytes()[100:200], true); !errors.Is(err, ErrAlreadyRegistered) {
		t.Errorf("Register inside pinned memory = %v; want ErrAlreadyRegistered", err)
	}
	must(t, host.Free())
	r := must2[*Registration](t)(d.Register(ctx, host.Bytes()[100:200], true))
	must(t, r.Unregister())
}

func TestFakeMemoryAccounting(t *testing.T) {
	ctx := t.Context()
	d := fakeDev(t, FakeConfig{MemBytes: 1 << 20})
	a := must2[*DeviceMem](t)(d.Alloc(ctx, 768<<10))
	if free, total, _ := d.MemInfo(ctx); free != 256<<10 || total != 1<<20 {
		t.Errorf("MemInfo = %d of %d; want 256 KiB of 1 MiB", free, total)
	}
	if _, err := d.Alloc(ctx, 512<<10); !errors.Is(err, ErrOutOfMemory) {
		t.Errorf("Alloc past the budget = %v; want ErrOutOfMemory", err)
	}
	bm := must2[*DeviceMem](t)(d.Alloc(ctx, 100))
	if bm.Ptr() < a.Ptr()+DevicePtr(a.Len()) || bm.Ptr()%256 != 0 {
		t.Errorf("second allocation at %#x overlaps or is unaligned (first %#x + %d)", bm.Ptr(), a.Ptr(), a.Len())
	}
	must(t, a.Free())
	if free, _, _ := d.MemInfo(ctx); free != 1<<20-100 {
		t.Errorf("free after Free = %d; want 1 MiB - 100", free)
	}
}

func TestNewFakeConfig(t *testing.T) {
	for _, cfg := range []FakeConfig{{Devices: 17}, {Devices: -1}, {MemBytes: -1}} {
		if _, err := NewFake(cfg); err == nil {
			t.Errorf("NewFake(%+v): no error", cfg)
		}
	}
	f := must2[*Fake](t)(NewFake(FakeConfig{Devices: 3}))
	if sys := f.System(); len(sys.Devices) != 3 || sys.Devices[2].BusID != "0000:f2:00.0" || f.Kind() != ModeFake {
		t.Errorf("System = %+v", sys)
	}
}
