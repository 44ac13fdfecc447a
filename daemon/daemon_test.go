package daemon

import (
	"bytes"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
)

// TestLeaseHoldsCopy acquires a lease and reads its file; evicts the
// object, which leaves the cache but stays readable (pending) while leased,
// and turns the lease stale; then releases the lease, which deletes the
// file.
func TestLeaseHoldsCopy(t *testing.T) {
	objs := dataset("bkt", "d/", 2, 300_000)
	emu := startEmulator(t, objs)
	d := startDaemon(t, unpacked(testConfig(t.TempDir(), emu)))
	c := dial(t, d)
	ctx := testCtx(t)

	l, err := c.Acquire(ctx, object.Object{Bucket: "bkt", Name: "d/00"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, objs[0].Content) || l.Size() != int64(len(got)) {
		t.Fatalf("lease file: %d bytes (Size %d) differ from the object's %d", len(got), l.Size(), len(objs[0].Content))
	}
	if l.Attrs().Generation == 0 || l.Stale() || l.Tier() != "disk" {
		t.Errorf("lease attrs %+v tier %q stale %v; want a generation, disk, not stale", l.Attrs(), l.Tier(), l.Stale())
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sessions != 1 || st.Leases != 1 || st.Tiers[0].InUseBytes == 0 {
		t.Errorf("status: %d sessions, %d leases, %d bytes in use; want 1, 1, some", st.Sessions, st.Leases,
			st.Tiers[0].InUseBytes)
	}
	ev, err := c.Evict(ctx, "bkt", "d/")
	if err != nil {
		t.Fatal(err)
	}
	if ev.Evicted != 0 || ev.Pending != 1 {
		t.Errorf("evict with a lease held = %+v; want 1 pending", ev)
	}
	await(t, l.Done(), "the evicted lease to turn stale")
	if got, err := os.ReadFile(l.Path()); err != nil || !bytes.Equal(got, objs[0].Content) {
		t.Errorf("evicted but leased file: %d bytes, %v; want it intact", len(got), err)
	}
	if st, err = c.Status(ctx); err != nil || st.Tiers[0].PendingBytes == 0 {
		t.Errorf("status after evict: %+v, %v; want pending bytes", st.Tiers, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, control.ErrReleased) {
		t.Errorf("second Release = %v; want ErrReleased", err)
	}
	if _, err := os.Stat(l.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("file after the last release: %v; want deleted", err)
	}
	if st, err = c.Status(ctx); err != nil || st.Tiers[0].PendingBytes != 0 || st.Leases != 0 {
		t.Errorf("status after release: %+v, %d leases, %v; want nothing pending or leased", st.Tiers, st.Leases, err)
	}
}

// TestSessionEndReleases closes a client holding leases and checks that
// the daemon releases them with the session.
func TestSessionEndReleases(t *testing.T) {
	emu := startEmulator(t, dataset("bkt", "d/", 3, 10_000))
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	ended := make(chan int, 1)
	d.sessions.onEnd = func(_ string, released int) { ended <- released }
	c := dial(t, d)
	ctx := testCtx(t)
	var leases []*control.Lease
	for _, n := range []string{"d/00", "d/01", "d/02"} {
		l, err := c.Acquire(ctx, object.Object{Bucket: "bkt", Name: n})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := await(t, ended, "the session to end"); n != 3 {
		t.Errorf("session ended releasing %d leases; want 3", n)
	}
	for _, l := range leases {
		if !l.Stale() {
			t.Errorf("lease on %s not stale after Close", l.Attrs().Object)
		}
		if err := l.Close(); err != nil {
			t.Errorf("Close of a lease of an ended session = %v; want nil", err)
		}
	}
	if _, s := d.sessions.counts(); s != 0 {
		t.Errorf("daemon holds %d leases after the session ended", s)
	}
}

// TestLeaseStaleOnNewGeneration replaces a leased object at the source,
// reads it again so the cache takes the new generation, and checks that
// the lease turns stale while its file stays readable.
func TestLeaseStaleOnNewGeneration(t *testing.T) {
	objs := dataset("bkt", "d/", 1, 50_000)
	emu := startEmulator(t, objs)
	d := startDaemon(t, unpacked(testConfig(t.TempDir(), emu)))
	c := dial(t, d)
	ctx := testCtx(t)
	l, err := c.Acquire(ctx, object.Object{Bucket: "bkt", Name: "d/00"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := emu.Put("bkt", "d/00", []byte("second generation")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zero := new(time.Duration)
	if _, err := c.Read(ctx, object.Object{Bucket: "bkt", Name: "d/00"}, &buf, zero); err != nil {
		t.Fatal(err)
	}
	if buf.String() != "second generation" {
		t.Fatalf("read after replacement = %q; want the new generation", buf.String())
	}
	await(t, l.Done(), "the lease to turn stale")
	got, err := os.ReadFile(l.Path())
	if err != nil || !bytes.Equal(got, objs[0].Content) {
		t.Errorf("stale lease's file: %d bytes, %v; want the old generation intact", len(got), err)
	}
}

// TestDaemonRestartEndsSession restarts the daemon under a client: its
// lease turns stale, and the next Acquire opens a new session.
func TestDaemonRestartEndsSession(t *testing.T) {
	emu := startEmulator(t, dataset("bkt", "d/", 1, 1000))
	cfg := testConfig(t.TempDir(), emu)
	d := startDaemon(t, cfg)
	c := dial(t, d)
	ctx := testCtx(t)
	o := object.Object{Bucket: "bkt", Name: "d/00"}
	l, err := c.Acquire(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	await(t, l.Done(), "the lease to turn stale when the daemon stops")
	startDaemon(t, cfg)
	l2, err := c.Acquire(ctx, o)
	if err != nil {
		t.Fatalf("Acquire after a daemon restart: %v", err)
	}
	if l2.Stale() || l2.Path() != l.Path() {
		t.Errorf("new lease stale %v path %q; want fresh, %q", l2.Stale(), l2.Path(), l.Path())
	}
	l2.Close()
}

// TestMmapstoreOverClient maps a daemon's copy through mmapstore with the
// client as its Opener.
func TestMmapstoreOverClient(t *testing.T) {
	objs := dataset("bkt", "d/", 1, 123_456)
	emu := startEmulator(t, objs)
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	s := mmapstore.New(c, mmapstore.Config{})
	defer s.Close()
	ctx := testCtx(t)
	err := s.View(ctx, object.Object{Bucket: "bkt", Name: "d/00"}, func(b []byte) error {
		if !bytes.Equal(b, objs[0].Content) {
			t.Errorf("mapped %d bytes differ from the object's %d", len(b), len(objs[0].Content))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestErrors checks that the client maps the daemon's errors back to
// sentinels.
func TestErrors(t *testing.T) {
	emu := startEmulator(t, dataset("bkt", "d/", 1, 10))
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	c := dial(t, d)
	ctx := testCtx(t)
	_, err := c.Acquire(ctx, object.Object{Bucket: "bkt", Name: "missing"})
	if !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Acquire(missing) = %v; want object.ErrNotFound", err)
	}
	if _, err := c.Job(ctx, "nope"); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("Job(nope) = %v; want control.ErrNotFound", err)
	}
	if _, err := c.Prefetch(ctx, "", "x", object.Warm); !errors.Is(err, control.ErrInvalid) {
		t.Errorf("Prefetch without bucket = %v; want control.ErrInvalid", err)
	}
	err = c.Plan(ctx, "p", []object.Object{{Bucket: "bkt"}})
	if !errors.Is(err, object.ErrInvalidName) {
		t.Errorf("Plan with a nameless object = %v; want object.ErrInvalidName", err)
	}
	// Hostile bodies: not JSON, unknown fields, trailing data.
	for _, body := range []string{"{", `{"bucket":"b","bogus":1}`, `{"bucket":"b"} {}`, strings.Repeat("[", 1<<16)} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://x/v1/prefetch", strings.NewReader(body))
		resp, err := unixClient(t, d).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST /v1/prefetch %.20q: status %d; want 400", body, resp.StatusCode)
		}
	}
}
