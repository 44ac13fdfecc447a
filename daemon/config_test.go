package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/mount"
	"github.com/cacheagent/cacheagent/object"
)

func TestParseConfig(t *testing.T) {
	full := `
sources: [{uri: gs://bucket/prefix, warm: true}, {uri: gs://other}]
tiers:
  disk: {dir: /mnt/disks/local-ssd/cacheagent, max: 300GiB}
  shm:  {dir: /dev/shm/cacheagent, max: 32GiB}
  scrub: {rate: 50MiB, interval: 12h}
fetch: {connections: 64, slice: 32MiB, endpoint: "http://127.0.0.1:4443", revalidate: 90s, small_object: 256KiB, small_connections: 8, checksum_attempts: 6}
mount: {path: /mnt/gcs, open: ask}
control: {socket: /run/cacheagent/control.sock}
metrics: {listen: 127.0.0.1:9464}
gpu: auto
`
	c, err := ParseConfig([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sources) != 2 || !c.Sources[0].Warm || c.Sources[1].URI != (object.URI{Bucket: "other"}) ||
		c.Tiers.Disk.Max != 300<<30 || c.Tiers.Shm.Max != 32<<30 || c.Fetch.Slice != 32<<20 ||
		c.Fetch.Connections != 64 || c.Fetch.SmallObject != 256<<10 || c.Fetch.SmallConnections != 8 || time.Duration(c.Fetch.Revalidate) != 90*time.Second ||
		c.Mount.Path != "/mnt/gcs" || c.Mount.OpenMode() != mount.OpenAsk || c.Control.Socket != control.DefaultSocket || c.GPU != "auto" ||
		c.Tiers.Scrub.Rate != 50<<20 || c.Tiers.Scrub.interval() != 12*time.Hour || c.Fetch.Downloader().ChecksumAttempts != 6 {
		t.Errorf("ParseConfig(full) = %+v", c)
	}
	for in, want := range map[string]mount.OpenMode{"": mount.OpenAuto, "mount: {open: skip}": mount.OpenSkip,
		"mount: {skip_open: true}": mount.OpenSkip, "mount: {open: skip, skip_open: true}": mount.OpenSkip} {
		if c, err := ParseConfig([]byte(in)); err != nil || c.Mount.OpenMode() != want {
			t.Errorf("ParseConfig(%q): open mode %v, %v; want %v", in, c.Mount.OpenMode(), err, want)
		}
	}
	for _, empty := range []string{"", "\n", "# only a comment\n", "---\n"} {
		if c, err := ParseConfig([]byte(empty)); err != nil || len(c.Sources) != 0 {
			t.Errorf("ParseConfig(%q) = %+v, %v; want the zero config", empty, c, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // in the error
	}{
		{"tiers:\n  disk: {dir: /x}\n  nvme: {dir: /y}\n", "line 3"},
		{"bogus: 1\n", "line 1: field bogus not found"},
		{"tiers:\n  disk:\n    max: 3 apples\n", `line 3`},
		{"tiers:\n  disk:\n    max: -1GiB\n", `line 3`},
		{"fetch:\n  revalidate: soon\n", "line 2"},
		{"sources:\n  - uri: gs://b/p\n  - uri: s3://b/p\n", "line 3: sources.1.uri"},
		{"sources:\n  - uri: gs://b/p\n  - uri: gs://b/p\n", "listed twice"},
		{"sources:\n  - uri: gs://b\n  - uri: gs://b/\n", "listed twice"},
		{"sources:\n  - uri: gs://b/p\n    wram: true\n", "line 3: field wram not found"},
		{"sources:\n  - uri: gs://b/p#12\n", "line 2: sources.0.uri"},
		{"sources:\n  - warm: true\n", "line 2: sources.0.uri"},
		{"sources:\n  - gs://b/p\n", "line 2: a source is a mapping"},
		{"fetch:\n  connections: -4\n", "line 2: fetch.connections"},
		{"fetch:\n  connections: many\n", "line 2"},
		{"fetch:\n  small_connections: 70000\n", "line 2: fetch.small_connections"},
		{"fetch:\n  small_object: -1MiB\n", "line 2"},
		{"gpu: tpu\n", "line 1: gpu"},
		{"mount:\n  open: never\n", "line 2: mount.open"},
		{"mount:\n  open: ask\n  skip_open: true\n", "line 3: mount.skip_open"},
		{"tiers:\n  scrub: {rate: 1MiB, interval: -1h}\n", "line 2: tiers.scrub.interval"},
		{"fetch:\n  checksum_attempts: -1\n", "line 2: fetch.checksum_attempts"},
		{"tiers:\n  shm: {max: 1GiB}\n", "tiers.shm.max"},
		{"tiers:\n  shm: {dir: /x, pack_below: 1MiB}\n", "tiers.shm.pack_below"},
		{"tiers:\n  disk:\n    pack_below: lots\n", "line 3"},
		{"gpu: auto\n---\ngpu: none\n", "more than one YAML document"},
		{"sources: {uri: gs://b}\n", "line 1"},
		{"[1, 2", "yaml"},
		{"x: &a [*a, *a]\n", ""},
		{"control: {socket: \"" + strings.Repeat("s", 200) + "\"}\n", "control.socket"},
	} {
		_, err := ParseConfig([]byte(tc.in))
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q) = %v; want an ErrConfig containing %q", tc.in, err, tc.want)
		}
	}
}

// tiers.disk.pack_below reaches the cache: unset is its default, 0 packs
// nothing, a size is that size.
func TestPackBelowConfig(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want int64
	}{
		{"tiers:\n  disk: {dir: /x}\n", 0},
		{"tiers:\n  disk: {dir: /x, pack_below: 0}\n", -1},
		{"tiers:\n  disk: {dir: /x, pack_below: 256KiB}\n", 256 << 10},
	} {
		c, err := ParseConfig([]byte(tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Tier(nil, nil, nil).PackBelow; got != tc.want {
			t.Errorf("%q: tier.Config.PackBelow = %d; want %d", tc.yaml, got, tc.want)
		}
	}
}

// The fetch section reaches the downloader: the small-object lane on by
// default, sized by small_connections, off when that is negative.
func TestFetchConfigDownloader(t *testing.T) {
	def := Config{}.WithDefaults().Fetch
	for _, tc := range []struct {
		name  string
		small int
		want  fetch.Config
	}{
		{"default", 0, fetch.Config{SliceSize: DefaultSlice, Connections: DefaultConnections, SmallObjectSize: DefaultSmallObject}},
		{"sized", 4, fetch.Config{SliceSize: DefaultSlice, Connections: DefaultConnections, SmallObjectSize: DefaultSmallObject, SmallConnections: 4}},
		{"off", -1, fetch.Config{SliceSize: DefaultSlice, Connections: DefaultConnections, SmallObjectSize: fetch.NoSmallLane}},
	} {
		f := def
		f.SmallConnections = tc.small
		if got := f.Downloader(); got != tc.want {
			t.Errorf("%s: Downloader() = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

// FuzzParseConfig checks that no input makes ParseConfig panic, and that
// what it accepts passes Validate.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"", "gpu: auto\n", "tiers: {disk: {dir: /x, max: 1GiB}}\n",
		"sources: [{uri: gs://b/p, warm: true}]\n", "x: &a [*a, *a, *a]\n", "fetch: {slice: 1e40}\n",
		"tiers: {disk: {max: [1]}}\n", "fetch: {revalidate: {a: 1}}\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted %q but Validate says %v", b, err)
		}
	})
}

// TestTierInFlight: prefetch and the planner keep as many objects in
// flight as the fetch section allows range reads, both lanes counted.
func TestTierInFlight(t *testing.T) {
	for _, c := range []struct {
		conns, small, want int
	}{
		{0, 0, 128},          // the defaults: 64 + 64
		{16, 0, 64},          // 16 + 16, at least tier's default
		{64, -1, 64},         // no small lane
		{100, 50, 150},       // both set
		{60000, 60000, 4096}, // bounded
	} {
		var cfg Config
		cfg.Fetch.Connections, cfg.Fetch.SmallConnections = c.conns, c.small
		if got := cfg.Tier(nil, nil, nil).PrefetchParallelism; got != c.want {
			t.Errorf("connections %d, small %d: PrefetchParallelism %d; want %d", c.conns, c.small, got, c.want)
		}
	}
}
