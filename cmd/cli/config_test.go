package cli

import (
	"testing"

	"github.com/cacheagent/cacheagent/daemon"
)

// FuzzSize checks that size parsing never panics and never yields a
// negative size.
func FuzzSize(f *testing.F) {
	for _, s := range []string{"300GiB", "32MiB", "1.5GB", "0", "1048576", "-1", "1e30", "9EiB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v Size
		if err := v.Set(s); err == nil && v < 0 {
			t.Fatalf("Set(%q) = %d; want a non-negative size", s, v)
		}
	})
}

func TestShmDefault(t *testing.T) {
	for _, tc := range []struct {
		disk, shm, want string
	}{
		{defaultCacheDir(), shmAuto, defaultShmDir()},
		{"/tmp/other-cache", shmAuto, ""},
		{defaultCacheDir(), "none", ""},
		{"/tmp/other-cache", "/dev/shm/mine", "/dev/shm/mine"},
	} {
		var cfg daemon.Config
		cfg.Tiers.Disk.Dir, cfg.Tiers.Shm.Dir = tc.disk, tc.shm
		if got := withShmDefault(cfg).Tiers.Shm.Dir; got != tc.want {
			t.Errorf("withShmDefault(disk %q, shm %q) = %q; want %q", tc.disk, tc.shm, got, tc.want)
		}
	}
}
