package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"gopkg.in/yaml.v3"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/mount"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// Defaults for zero Config fields (see Config.WithDefaults).
const (
	DefaultMetricsListen = "127.0.0.1:9464"
	DefaultConnections   = 64
	DefaultSlice         = 32 << 20
	DefaultSmallObject   = fetch.DefaultSmallObjectSize
	DefaultRevalidate    = time.Minute
	DefaultGPU           = "auto"
	// MetricsOff as metrics.listen turns the metrics server off.
	MetricsOff = "none"
)

// maxConfigSize bounds a config file: anything larger is not a config.
const maxConfigSize = 1 << 20

// ErrConfig is matched by every error about the contents of a config.
var ErrConfig = errors.New("daemon: invalid config")

// Config is the daemon's configuration: the YAML file, with command-line
// flags applied on top by the caller. The zero value of a field selects its
// default (WithDefaults). Example:
//
//	sources: [{uri: gs://bucket/prefix, warm: true}]
//	tiers:
//	  disk: {dir: /mnt/disks/local-ssd/cacheagent, max: 300GiB}
//	  shm:  {dir: /dev/shm/cacheagent, max: 32GiB}
//	fetch: {connections: 64, slice: 32MiB}
//	mount: {path: /mnt/gcs}
//	control: {socket: /run/cacheagent/control.sock}
//	metrics: {listen: 127.0.0.1:9464}
//	gpu: auto
//	checkpoint: {connections: 16, part_size: 32MiB, keep_local: 2, replicas: 1}
//	fleet:                 # absent: one node
//	  listen: 10.0.0.2:7946
//	  peer_listen: 10.0.0.2:7947
//	  join: [cacheagent-peers.ml.svc.cluster.local:7946]
//	  key_file: /etc/cacheagent/fleet.key
//
// The per-agent keys (EnvFields) may name environment variables as
// ${NAME}: name: ${NODE_NAME}, listen: ${POD_IP}:7946.
type Config struct {
	// Sources are the datasets the daemon knows; warm ones are prefetched
	// at start (and when added by a reload) at warm priority.
	Sources []SourceConfig `yaml:"sources"`
	Tiers   TiersConfig    `yaml:"tiers"`
	Fetch   FetchConfig    `yaml:"fetch"`
	Mount   MountConfig    `yaml:"mount"`
	Control ControlConfig  `yaml:"control"`
	Metrics MetricsConfig  `yaml:"metrics"`
	// GPU is the GPU backend: auto, cuda, fake or none. Default auto.
	GPU string `yaml:"gpu"`
	// Fleet joins the agents of a cluster into one cache (fleet.Config
	// documents its keys); nil (no fleet: section) runs one node.
	Fleet *fleet.Config `yaml:"fleet"`
	// Checkpoint tunes checkpoint saves (CheckpointConfig).
	Checkpoint CheckpointConfig `yaml:"checkpoint"`
}

// SourceConfig is one dataset.
type SourceConfig struct {
	// URI is gs://BUCKET/PREFIX: a bucket or a prefix, no generation.
	URI object.URI `yaml:"uri"`
	// Warm prefetches the source at start, below demand and plan reads.
	Warm bool `yaml:"warm"`
	// uriErr is why the config file's uri did not parse; check reports it
	// with the key's path and line.
	uriErr error
}

// UnmarshalYAML decodes a source's mapping, strictly (unknown keys are
// errors, as everywhere in the config file), parsing its uri.
func (s *SourceConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: a source is a mapping (uri, warm)", n.Line)}}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k := n.Content[i].Value; k {
		case "uri", "warm":
		default:
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: field %s not found in type daemon.SourceConfig", n.Content[i].Line, k)}}
		}
	}
	var raw struct {
		URI  string `yaml:"uri"`
		Warm bool   `yaml:"warm"`
	}
	if err := n.Decode(&raw); err != nil {
		return err
	}
	*s = SourceConfig{Warm: raw.Warm}
	s.URI, s.uriErr = object.ParsePrefix(raw.URI)
	return nil
}

// TiersConfig places and sizes the tiers.
type TiersConfig struct {
	// Disk is the disk tier (data and index). Its Dir is required.
	Disk TierConfig `yaml:"disk"`
	// Shm is the optional shm (hot) tier, on a tmpfs.
	Shm TierConfig `yaml:"shm"`
	// Scrub is the background verification of the cached copies; off
	// unless its rate is set.
	Scrub ScrubConfig `yaml:"scrub"`
}

// ScrubConfig sets the background scrub: a pass reads every cached copy
// (both tiers) and checks it against the CRC32C the index records, like
// `cacheagent verify`; a copy that fails is dropped and refetched when next
// opened. Changes apply on reload (a pass in progress stops; the next starts
// at once on the new settings).
type ScrubConfig struct {
	// Rate bounds the bytes the scrub reads per second, e.g. 50MiB. 0 (the
	// default) turns the scrub off.
	Rate Size `yaml:"rate"`
	// Interval is the time from the start of one pass to the start of the
	// next (at once if a pass takes longer). Default 24h.
	Interval Duration `yaml:"interval"`
}

// DefaultScrubInterval is tiers.scrub.interval's default.
const DefaultScrubInterval = 24 * time.Hour

// interval returns the interval, defaulted.
func (c ScrubConfig) interval() time.Duration { return durationOr(c.Interval, DefaultScrubInterval) }

// TierConfig is one tier's directory and byte budget.
type TierConfig struct {
	Dir string `yaml:"dir"`
	// Max is the byte budget, e.g. 300GiB. 0 means the tier's default share
	// of its filesystem (90% for disk, 25% for shm).
	Max Size `yaml:"max"`
	// PromoteHits (shm only) is how many opens within the promotion window
	// promote an object to shm; 0 means the tier's default (2), negative
	// turns promotion by use off.
	PromoteHits int `yaml:"promote_hits"`
	// PackBelow (disk only): objects smaller than this are packed into
	// segment files (page-aligned, synced and indexed in groups) instead of
	// a file each. Unset means the cache's default (1MiB); 0 packs nothing.
	PackBelow *Size `yaml:"pack_below"`
}

// packBelow maps PackBelow onto tier.Config.PackBelow.
func (t TierConfig) packBelow() int64 {
	switch {
	case t.PackBelow == nil:
		return 0 // the cache's default
	case *t.PackBelow == 0:
		return -1 // nothing packed
	}
	return int64(*t.PackBelow)
}

// FetchConfig tunes downloads.
type FetchConfig struct {
	// Endpoint is a GCS-compatible endpoint; "" means GCS itself (or
	// $STORAGE_EMULATOR_HOST).
	Endpoint string `yaml:"endpoint"`
	// Connections is the process-wide budget of parallel range reads.
	// Default 64; changes apply live on reload.
	Connections int `yaml:"connections"`
	// Slice is the size of the ranges an object is split into. Default 32MiB.
	Slice Size `yaml:"slice"`
	// SmallObject is the size up to which an object is read on the
	// small-object lane (fetch.Config.SmallObjectSize). Default 1MiB.
	SmallObject Size `yaml:"small_object"`
	// SmallConnections is the small-object lane's budget of range reads,
	// beside Connections; 0 means as many as Connections (following it on
	// reload), negative turns the lane off.
	SmallConnections int `yaml:"small_connections"`
	// Revalidate is how long a cached generation is served before the
	// source is asked again. Default 1m; negative means never.
	Revalidate Duration `yaml:"revalidate"`
	// ChecksumAttempts is how many rounds of reads a download may take
	// before a CRC32C mismatch fails it (fetch.Config.ChecksumAttempts):
	// the second reads the object again, later ones only the parts the
	// reads disagree on, or everything through other ranges when they all
	// agree. Default 8.
	ChecksumAttempts int `yaml:"checksum_attempts"`
}

// MountConfig places the FUSE mount.
type MountConfig struct {
	// Path is the mountpoint; "" means no mount.
	Path string `yaml:"path"`
	// Open says whether the kernel asks the daemon to open each file
	// (mount.Config.Open): "auto" (the default) decides at the first open,
	// from the dataset; "ask" always asks (and the kernel reads the cached
	// files itself, by passthrough, where it can); "skip" never asks (many
	// small files read about twice as fast; no passthrough).
	Open string `yaml:"open"`
	// SkipOpen true is the older spelling of open: skip.
	SkipOpen bool `yaml:"skip_open"`
}

// OpenMode returns the mount's open mode, from Open and SkipOpen (checked
// by Validate).
func (m MountConfig) OpenMode() mount.OpenMode {
	if m.SkipOpen {
		return mount.OpenSkip
	}
	o, _ := mount.ParseOpenMode(m.Open)
	return o
}

// ControlConfig places the control socket.
type ControlConfig struct {
	// Socket is the Unix socket path. Default control.DefaultSocket.
	Socket string `yaml:"socket"`
}

// MetricsConfig places the Prometheus endpoint.
type MetricsConfig struct {
	// Listen is the TCP address of /metrics, /healthz and /readyz. Default
	// 127.0.0.1:9464; "none" turns it off.
	Listen string `yaml:"listen"`
}

// Size is a byte count written as 300GiB, 32MiB, 1.5GB or 1048576.
type Size int64

// UnmarshalYAML parses a size.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %w: bad size %q (want e.g. 300GiB)", n.Line, ErrConfig, n.Value)
	}
	*s = v
	return nil
}

// String formats s in IEC units.
func (s Size) String() string { return humanize.IBytes(uint64(max(s, 0))) }

// ParseSize parses a byte count such as 300GiB, 32MiB, 1.5GB or 1048576.
func ParseSize(v string) (Size, error) {
	n, err := humanize.ParseBytes(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("bad size %q: %w", v, err)
	}
	if n > 1<<62 {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return Size(n), nil
}

// Duration is a time.Duration written as 1m, 90s or 1h30m.
type Duration time.Duration

// UnmarshalYAML parses a duration.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %w: bad duration %q (want e.g. 1m or 30s)", n.Line, ErrConfig, n.Value)
	}
	*d = Duration(v)
	return nil
}

// LoadConfig reads and parses the config file at path.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("daemon: read config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("daemon: read config %s: %w", path, err)
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig parses a YAML config strictly (unknown keys, bad sizes and
// bad values are errors naming their line), replaces the ${NAME}
// references in EnvFields with environment variables, and validates it. An
// empty document is the zero Config.
func ParseConfig(b []byte) (Config, error) { return parseConfig(b, os.LookupEnv) }

// parseConfig is ParseConfig with the environment given by lookup.
func parseConfig(b []byte, lookup func(string) (string, bool)) (Config, error) {
	if len(b) > maxConfigSize {
		return Config{}, fmt.Errorf("%w: larger than %d bytes", ErrConfig, maxConfigSize)
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, ErrConfig) {
			return Config{}, err
		}
		return Config{}, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("%w: more than one YAML document", ErrConfig)
	}
	err := c.expandEnv(lookup)
	if err == nil {
		err = c.check()
	}
	if err != nil {
		var root yaml.Node
		_ = yaml.Unmarshal(b, &root) // it decoded above, so this does too
		return Config{}, err.withLine(&root)
	}
	return c, nil
}

// Validate checks a config, flags applied, for values that cannot work.
func (c Config) Validate() error {
	if err := c.check(); err != nil {
		return err
	}
	return nil
}

// fieldError is a validation error about one field, named by its path of
// YAML keys and sequence indexes.
type fieldError struct {
	path []string
	msg  string
	line int // 0 if unknown
}

func (e *fieldError) Error() string {
	where := strings.Join(e.path, ".")
	if e.line > 0 {
		return fmt.Sprintf("%v: line %d: %s: %s", ErrConfig, e.line, where, e.msg)
	}
	return fmt.Sprintf("%v: %s: %s", ErrConfig, where, e.msg)
}

func (e *fieldError) Is(target error) bool { return target == ErrConfig }

// withLine finds the line of e's field in the document root.
func (e *fieldError) withLine(root *yaml.Node) error {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, p := range e.path {
		n = child(n, p)
		if n == nil {
			return e
		}
		e.line = n.Line
	}
	return e
}

// child returns the value of key p in a mapping, or element p of a
// sequence; nil if there is none.
func child(n *yaml.Node, p string) *yaml.Node {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == p {
				return n.Content[i+1]
			}
		}
	case yaml.SequenceNode:
		if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(n.Content) {
			return n.Content[i]
		}
	}
	return nil
}

// check validates every field; the first problem is returned.
func (c Config) check() *fieldError {
	bad := func(msg string, path ...string) *fieldError { return &fieldError{path: path, msg: msg} }
	seen := make(map[object.URI]bool)
	for i, s := range c.Sources {
		idx := strconv.Itoa(i)
		switch {
		case s.uriErr != nil:
			return bad(s.uriErr.Error(), "sources", idx, "uri")
		case s.URI.Bucket == "":
			return bad("no gs://BUCKET[/PREFIX] given", "sources", idx, "uri")
		case s.URI.Generation != 0:
			return bad(fmt.Sprintf("%s: a source cannot pin a generation", s.URI), "sources", idx, "uri")
		}
		if seen[s.URI] {
			return bad(fmt.Sprintf("%s is listed twice", s.URI), "sources", idx, "uri")
		}
		seen[s.URI] = true
	}
	switch {
	case c.Tiers.Disk.Max < 0:
		return bad("negative", "tiers", "disk", "max")
	case c.Tiers.Shm.Max < 0:
		return bad("negative", "tiers", "shm", "max")
	case c.Tiers.Shm.Max > 0 && c.Tiers.Shm.Dir == "":
		return bad("set without tiers.shm.dir", "tiers", "shm", "max")
	case c.Tiers.Shm.PackBelow != nil:
		return bad("applies to the disk tier only", "tiers", "shm", "pack_below")
	case c.Tiers.Scrub.Interval < 0:
		return bad("negative", "tiers", "scrub", "interval")
	case c.Fetch.ChecksumAttempts < 0 || c.Fetch.ChecksumAttempts > 100:
		return bad(fmt.Sprintf("%d is out of range [1, 100]", c.Fetch.ChecksumAttempts), "fetch", "checksum_attempts")
	case c.Fetch.Connections < 0 || c.Fetch.Connections > 1<<16:
		return bad(fmt.Sprintf("%d is out of range [1, 65536]", c.Fetch.Connections), "fetch", "connections")
	case c.Fetch.Slice < 0 || c.Fetch.Slice > 1<<34:
		return bad(fmt.Sprintf("%s is out of range (at most 16GiB)", c.Fetch.Slice), "fetch", "slice")
	case c.Fetch.SmallObject < 0 || c.Fetch.SmallObject > 1<<34:
		return bad(fmt.Sprintf("%s is out of range (at most 16GiB)", c.Fetch.SmallObject), "fetch", "small_object")
	case c.Fetch.SmallConnections > 1<<16:
		return bad(fmt.Sprintf("%d is out of range (at most 65536)", c.Fetch.SmallConnections), "fetch", "small_connections")
	case strings.ContainsRune(c.Control.Socket, 0) || len(c.Control.Socket) > 104:
		return bad("not a usable socket path (at most 104 bytes)", "control", "socket")
	}
	if e := c.Checkpoint.check(); e != nil {
		return e
	}
	if o, err := mount.ParseOpenMode(c.Mount.Open); err != nil {
		return bad(fmt.Sprintf("%q is not one of auto, ask, skip", c.Mount.Open), "mount", "open")
	} else if c.Mount.SkipOpen && o != mount.OpenSkip && o != mount.OpenAuto {
		return bad(fmt.Sprintf("skip_open: true contradicts open: %s", o), "mount", "skip_open")
	}
	switch c.GPU {
	case "", "auto", "cuda", "fake", "none":
	default:
		return bad(fmt.Sprintf("%q is not one of auto, cuda, fake, none", c.GPU), "gpu")
	}
	return c.checkFleet()
}

// WithDefaults returns c with its zero fields set to their defaults. The
// disk tier's directory has no default here: the caller supplies it.
func (c Config) WithDefaults() Config {
	if c.Control.Socket == "" {
		c.Control.Socket = control.DefaultSocket
	}
	if c.Metrics.Listen == "" {
		c.Metrics.Listen = DefaultMetricsListen
	}
	if c.Fetch.Connections == 0 {
		c.Fetch.Connections = DefaultConnections
	}
	if c.Fetch.Slice == 0 {
		c.Fetch.Slice = DefaultSlice
	}
	if c.Fetch.SmallObject == 0 {
		c.Fetch.SmallObject = DefaultSmallObject
	}
	if c.Fetch.Revalidate == 0 {
		c.Fetch.Revalidate = Duration(DefaultRevalidate)
	}
	if c.GPU == "" {
		c.GPU = DefaultGPU
	}
	return c
}

// GCS maps the fetch section onto the GCS source's settings.
func (f FetchConfig) GCS() fetch.GCSConfig { return fetch.GCSConfig{Endpoint: f.Endpoint} }

// Downloader maps the fetch section onto a downloader's settings.
func (f FetchConfig) Downloader() fetch.Config {
	c := fetch.Config{SliceSize: int64(f.Slice), Connections: f.Connections,
		SmallObjectSize: int64(f.SmallObject), SmallConnections: max(f.SmallConnections, 0),
		ChecksumAttempts: f.ChecksumAttempts}
	if f.SmallConnections < 0 {
		c.SmallObjectSize = fetch.NoSmallLane
	}
	return c
}

// maxInFlight bounds the objects prefetch and the planner keep in flight
// (each is a goroutine and a reservation of disk space).
const maxInFlight = 4096

// inFlight is how many objects prefetch and the planner keep in flight
// (see Tier).
func (c Config) inFlight() int {
	return min(max(tier.DefaultPrefetchParallelism, c.Fetch.Reads()), maxInFlight)
}

// Reads is how many range reads the fetch section allows at once: the main
// budget and the small-object lane's (see fetch.Config.Reads).
func (f FetchConfig) Reads() int { return f.Downloader().Reads() }

// Tier maps the tiers and fetch sections onto a cache's settings, filled
// through dl from src. The daemon and the CLI's standalone agent open
// their caches with it alike. Prefetch and the planner keep as many
// objects in flight as the fetch section allows range reads (at least
// tier.DefaultPrefetchParallelism, at most maxInFlight): with small
// objects, one read each, fewer would leave connections idle (at 64 + 64,
// half of them).
func (c Config) Tier(src object.Source, dl tier.Downloader, log *slog.Logger) tier.Config {
	return tier.Config{
		PrefetchParallelism: c.inFlight(),
		Dir:                 c.Tiers.Disk.Dir,
		MaxBytes:            int64(c.Tiers.Disk.Max),
		ShmDir:              c.Tiers.Shm.Dir,
		ShmMaxBytes:         int64(c.Tiers.Shm.Max),
		PromoteHits:         c.Tiers.Shm.PromoteHits,
		PackBelow:           c.Tiers.Disk.packBelow(),
		Revalidate:          durationOr(c.Fetch.Revalidate, DefaultRevalidate),
		Source:              src,
		Downloader:          dl,
		Logger:              log,
	}
}

// durationOr returns d, or def if d is 0.
func durationOr(d Duration, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return time.Duration(d)
}
