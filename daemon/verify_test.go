package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// flipCached flips one byte of the cached copy of o behind the cache's
// back (cachetest.FlipByte).
func flipCached(t *testing.T, c *control.Client, o object.Object) {
	t.Helper()
	l, err := c.Acquire(testCtx(t), o)
	if err != nil {
		t.Fatal(err)
	}
	p := l.Path()
	l.Close()
	cachetest.FlipByte(t, p, 10)
}

// cacheAll fetches the n objects of dataset(bucket, prefix, n, …) through
// the daemon.
func cacheAll(t *testing.T, c *control.Client, bucket, prefix string, n int) []object.Object {
	t.Helper()
	var refs []object.Object
	for i := range n {
		refs = append(refs, object.Object{Bucket: bucket, Name: fmt.Sprintf("%s%02d", prefix, i)})
	}
	if err := c.Fetch(testCtx(t), refs); err != nil {
		t.Fatal(err)
	}
	return refs
}

func TestVerifyRoute(t *testing.T) {
	objs := dataset("bkt", "v/", 3, 100_000)
	emu := startEmulator(t, objs)
	d := startDaemon(t, unpacked(testConfig(t.TempDir(), emu)))
	c := dial(t, d)
	ctx := testCtx(t)
	refs := cacheAll(t, c, "bkt", "v/", 3)
	flipCached(t, c, refs[1])

	if _, err := c.Verify(ctx, control.VerifyRequest{Rate: -1}, nil); !errors.Is(err, control.ErrInvalid) {
		t.Errorf("Verify(rate -1) error = %v; want ErrInvalid", err)
	}
	rep, err := c.Verify(ctx, control.VerifyRequest{Bucket: "bkt", Prefix: "v/"}, func(stats.Verify) {})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !rep.Done || rep.Objects != 3 || rep.Verified != 2 || rep.Corrupt != 1 || len(rep.Dropped) != 1 ||
		rep.Dropped[0].Object.Name != "v/01" || rep.Dropped[0].Tier != "disk" {
		t.Errorf("Verify = %+v; want 3 objects, 2 verified, v/01 dropped from disk", rep)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.Tiers[len(st.Tiers)-1]; b.Corrupt != 1 || b.Verified != 2 || b.VerifiedBytes != 300_003 {
		t.Errorf("disk tier = %+v; want 1 corrupt, 2 verified, 300003 bytes read", b)
	}
	var buf bytes.Buffer
	if _, err := c.Read(ctx, refs[1], &buf, nil); err != nil || !bytes.Equal(buf.Bytes(), objs[1].Content) {
		t.Errorf("Read after Verify: %d bytes, %v; want the object intact", buf.Len(), err)
	}
}

func TestScrub(t *testing.T) {
	old := scrubStartDelay
	scrubStartDelay = 0
	t.Cleanup(func() { scrubStartDelay = old })
	objs := dataset("bkt", "s/", 2, 50_000)
	emu := startEmulator(t, objs)
	cfg := unpacked(testConfig(t.TempDir(), emu))
	cfg.Tiers.Scrub = ScrubConfig{Rate: 1 << 30, Interval: Duration(time.Hour)}
	d := startDaemon(t, cfg)
	c := dial(t, d)
	refs := cacheAll(t, c, "bkt", "s/", 2)
	flipCached(t, c, refs[0])
	passes := make(chan stats.Verify, 16)
	fn := func(v stats.Verify, err error) {
		if err == nil {
			passes <- v
		}
	}
	d.scrub.onPass.Store(&fn)
	// A reload with new settings starts a pass at once.
	next := cfg
	next.Tiers.Scrub.Rate = 2 << 30
	changed, err := d.Reload(testCtx(t), next)
	if err != nil || !slices.Contains(changed, "tiers.scrub") {
		t.Fatalf("Reload(scrub rate) = %v, %v; want tiers.scrub changed", changed, err)
	}
	for {
		v := await(t, passes, "a scrub pass")
		if v.Objects == 2 {
			if v.Corrupt != 1 || v.Verified != 1 {
				t.Errorf("scrub pass = %+v; want 1 corrupt, 1 verified", v)
			}
			break
		}
	}
	if got := d.Config().Tiers.Scrub.Rate; got != 2<<30 {
		t.Errorf("running scrub rate = %d; want %d", got, 2<<30)
	}
	// Turning it off applies too; Close stops the goroutine (the cleanup).
	next.Tiers.Scrub.Rate = 0
	if changed, err := d.Reload(testCtx(t), next); err != nil || !slices.Contains(changed, "tiers.scrub") {
		t.Errorf("Reload(scrub off) = %v, %v; want tiers.scrub changed", changed, err)
	}
}
