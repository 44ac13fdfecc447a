package daemon

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/object"
)

// TestShmTier pins objects hot through the daemon and checks that status
// reports the shm tier first and that a lease maps the shm copy.
func TestShmTier(t *testing.T) {
	objs := dataset("bkt", "h/", 2, 100_000)
	emu := startEmulator(t, objs)
	dir := t.TempDir()
	cfg := testConfig(dir, emu)
	cfg.Tiers.Shm = TierConfig{Dir: filepath.Join(dir, "shm"), Max: 64 << 20}
	d := startDaemon(t, cfg)
	c := dial(t, d)
	ctx := testCtx(t)
	if n, err := c.Pin(ctx, "bkt", "h/", true); err != nil || n != 2 {
		t.Fatalf("Pin(hot) = %d, %v; want 2", n, err)
	}
	st, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tiers) != 2 || st.Tiers[0].Name != "shm" || st.Tiers[0].Entries != 2 || st.Tiers[0].Promotions != 2 ||
		st.Tiers[1].Name != "disk" || st.Tiers[1].Entries != 2 {
		t.Fatalf("tiers = %+v; want shm (2 entries, 2 promotions) then disk (2)", st.Tiers)
	}
	l, err := c.Acquire(ctx, object.Object{Bucket: "bkt", Name: "h/01"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Tier() != "shm" || !strings.HasPrefix(l.Path(), cfg.Tiers.Shm.Dir) {
		t.Errorf("lease on a hot object: tier %q path %q; want the shm copy", l.Tier(), l.Path())
	}
	if got, err := os.ReadFile(l.Path()); err != nil || !bytes.Equal(got, objs[1].Content) {
		t.Errorf("shm copy: %d bytes, %v; want the object", len(got), err)
	}
	// The shm budget reloads live; the hot-pinned copies stay even above it.
	next := cfg
	next.Tiers.Shm.Max = 120_000
	changed, err := d.Reload(ctx, next)
	if err != nil || !slices.Equal(changed, []string{"tiers.shm.max"}) {
		t.Fatalf("Reload(shm max) = %v, %v; want [tiers.shm.max]", changed, err)
	}
	if st, err = c.Status(ctx); err != nil || st.Tiers[0].MaxBytes != 120_000 || st.Tiers[0].Entries != 2 {
		t.Errorf("shm after the reload: %+v, %v; want max 120000 and both pinned copies", st.Tiers, err)
	}
	if got := d.Config().Tiers.Shm.Max; got != 120_000 {
		t.Errorf("running config's shm max = %d; want 120000", got)
	}
	// A move of the shm tier needs a restart; a budget changed with it
	// still applies.
	moved := next
	moved.Tiers.Shm.Dir = filepath.Join(dir, "shm2")
	moved.Tiers.Shm.Max = 100_000
	if changed, err := d.Reload(ctx, moved); err != nil || !slices.Equal(changed, []string{"tiers.shm.max"}) {
		t.Fatalf("Reload(shm dir and max) = %v, %v; want [tiers.shm.max]", changed, err)
	}
	if got := d.Config().Tiers.Shm; got.Max != 100_000 || got.Dir != cfg.Tiers.Shm.Dir {
		t.Errorf("running config's shm tier = %+v; want max 100000 in %s", got, cfg.Tiers.Shm.Dir)
	}
}

// TestMount serves the sources at mount.path, in each mount.open mode, and
// reads an object through it; Close unmounts.
func TestMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Cannot(t, "no FUSE device: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil && os.Geteuid() != 0 {
		testenv.Cannot(t, "not root and no fusermount3: %v", err)
	}
	objs := dataset("bkt", "m/", 1, 70_000)
	emu := startEmulator(t, objs)
	for _, open := range []string{"auto", "ask", "skip"} {
		t.Run("open="+open, func(t *testing.T) {
			dir := t.TempDir()
			cfg := testConfig(dir, emu)
			cfg.Sources = []SourceConfig{{URI: object.URI{Bucket: "bkt", Path: "m/"}}}
			cfg.Mount.Path, cfg.Mount.Open = filepath.Join(dir, "mnt"), open
			d := startDaemon(t, cfg)
			got, err := os.ReadFile(filepath.Join(cfg.Mount.Path, "bkt", "m", "00"))
			if err != nil || !bytes.Equal(got, objs[0].Content) {
				t.Fatalf("read through the mount: %d bytes, %v; want the object", len(got), err)
			}
			// Small files: auto skips opens as skip does.
			want := map[string]string{"auto": "skip", "ask": "ask", "skip": "skip"}[open]
			if m := d.status().Mount; m == nil || m.Path != cfg.Mount.Path || m.Open != want || m.Buckets != 1 ||
				(want == "ask") != (m.Opens == 1) {
				t.Errorf("status().Mount = %+v; want %s at %s, 1 bucket, an open served only when asked", m, want, cfg.Mount.Path)
			}
			if err := d.Close(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			mounts, err := os.ReadFile("/proc/self/mountinfo")
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(mounts), " "+cfg.Mount.Path+" ") {
				t.Errorf("%s is still mounted after Close", cfg.Mount.Path)
			}
		})
	}
}
