package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/cacheagent/cacheagent/bench/linkshape"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/object"
)

// Reader names, in the order they run by default.
const (
	readerDirect   = "direct-gcs"
	readerDownload = "download-then-read"
	readerAgent    = "agent"
	// readerAgentAhead is the agent with the loader staging as many shards
	// ahead as the daemon has connections.
	readerAgentAhead = "agent-ahead"
)

// setupRecord is the first JSON line of `e2e run`: what was read, over
// which link, and the link-limited ideal epoch.
type setupRecord struct {
	Kind        string  `json:"kind"` // "setup"
	Bucket      string  `json:"bucket"`
	Prefix      string  `json:"prefix"`
	Objects     int     `json:"objects"`
	Shards      int     `json:"shards"`
	Samples     int64   `json:"samples"`
	Bytes       int64   `json:"bytes"`
	Batch       int     `json:"batch"`
	Epochs      int     `json:"epochs"`
	Connections int     `json:"connections"`
	BytesPerSec int64   `json:"bytes_per_sec"`
	FirstByteMS float64 `json:"first_byte_ms"`
	// IdealSec is Bytes / (Connections × BytesPerSec): the epoch time of a
	// reader limited only by the link.
	IdealSec float64 `json:"ideal_sec"`
	// SmallObjects and SmallBytes count the objects of at most SmallMax
	// bytes, which the daemon reads on its small-object lane, beside its
	// Connections (fetch.Config.SmallObjectSize).
	SmallObjects int   `json:"small_objects"`
	SmallBytes   int64 `json:"small_bytes"`
	SmallMax     int64 `json:"small_max"`
	// CeilingSec is how long Connections plain streams took to copy the
	// dataset to nowhere over the same path with the link unshaped: what
	// this machine can move at all (0: not measured).
	CeilingSec float64 `json:"ceiling_sec,omitempty"`
}

// epochRecord is one epoch of one reader.
type epochRecord struct {
	Kind          string  `json:"kind"` // "epoch"
	Reader        string  `json:"reader"`
	Epoch         int     `json:"epoch"`
	Seconds       float64 `json:"seconds"`
	Samples       int64   `json:"samples"`
	SamplesPerSec float64 `json:"samples_per_sec"`
	// GCSBytes is the object bytes the link carried during the epoch.
	GCSBytes int64 `json:"gcs_bytes"`
	// DownloadSec is the part of the epoch spent copying the dataset
	// (download-then-read's first epoch only).
	DownloadSec float64 `json:"download_sec,omitempty"`
	// StallShare is the share of the epoch the consumer waited for data,
	// and the next four its split by what the awaited batch was doing
	// (stats.Loader): its shard being fetched (staging, or the whole
	// Acquire without a Stager), promoted to shm and mapped, its rows
	// gathered, or anything else.
	StallShare   float64 `json:"stall_share"`
	StallFetch   float64 `json:"stall_fetch"`
	StallPromote float64 `json:"stall_promote"`
	StallGather  float64 `json:"stall_gather"`
	StallOther   float64 `json:"stall_other"`
}

// runConfig is `e2e run`'s command line.
type runConfig struct {
	endpoint, status, socket, downloadDir string
	ceiling                               string
	bucket, prefix, pattern               string
	readers                               string
	batch, epochs, connections            int
	seed                                  uint64
}

// run is `e2e run`: JSON lines go to out, progress to log.
func run(ctx context.Context, args []string, out, log io.Writer) error {
	var rc runConfig
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.StringVar(&rc.endpoint, "endpoint", "", "base URL of the shaped GCS endpoint (the proxy), e.g. http://127.0.0.1:PORT (required)")
	fs.StringVar(&rc.status, "status", "", "URL of the proxy's status (default: -endpoint + /_linkshape/status)")
	fs.StringVar(&rc.ceiling, "ceiling-endpoint", "", "the same path unshaped (a second proxy): measure the machine's ceiling first")
	fs.StringVar(&rc.socket, "socket", "", "the daemon's control socket (agent reader)")
	fs.StringVar(&rc.downloadDir, "download-dir", "", "empty directory to copy the dataset into (download-then-read reader)")
	fs.StringVar(&rc.bucket, "bucket", "bench", "bucket")
	fs.StringVar(&rc.prefix, "prefix", "train/", "object name prefix")
	fs.StringVar(&rc.pattern, "pattern", synth.Pattern, "shard file pattern under the prefix")
	fs.StringVar(&rc.readers, "readers", strings.Join([]string{readerDirect, readerDownload, readerAgent, readerAgentAhead}, ","),
		"readers to run, comma-separated, in order")
	fs.IntVar(&rc.batch, "batch", 256, "samples per batch")
	fs.IntVar(&rc.epochs, "epochs", 3, "epochs per reader")
	fs.IntVar(&rc.connections, "connections", 8, "parallel streams: the daemon's fetch.connections, the download's streams, direct GCS's lookahead")
	fs.Uint64Var(&rc.seed, "seed", 1, "shuffle seed")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := rc.check(); err != nil {
		return err
	}
	link := newLinkMeter(rc.status)
	st, err := link.status(ctx)
	if err != nil {
		return err
	}
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: rc.endpoint, MaxIdleConns: max(256, rc.connections)})
	if err != nil {
		return err
	}
	defer src.Close()
	ds, err := loader.FromPattern(ctx, retrying{src}, rc.bucket, rc.prefix, rc.pattern)
	if err != nil {
		return err
	}
	objs, err := dataset(ctx, src, ds)
	if err != nil {
		return err
	}
	setup := rc.setup(ds, objs, st.Shape)
	if rc.ceiling != "" {
		if setup.CeilingSec, err = ceiling(ctx, rc.ceiling, objs, rc.connections); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(out)
	if err := enc.Encode(setup); err != nil {
		return err
	}
	fmt.Fprintf(log, "dataset: %d objects, %.0f MiB, %d samples; ideal epoch %.2f s; unshaped copy %.2f s\n",
		setup.Objects, float64(setup.Bytes)/(1<<20), setup.Samples, setup.IdealSec, setup.CeilingSec)
	r := readers{rc: rc, src: src, objs: objs, link: link, log: log, emit: func(e epochRecord) error {
		fmt.Fprintf(log, "%s epoch %d: %.2f s, %.0f samples/s, %.0f MiB from GCS\n",
			e.Reader, e.Epoch, e.Seconds, e.SamplesPerSec, float64(e.GCSBytes)/(1<<20))
		return enc.Encode(e)
	}}
	base := loader.Config{Dataset: ds, BatchSize: rc.batch, Seed: rc.seed, Epochs: rc.epochs}
	for _, name := range strings.Split(rc.readers, ",") {
		if err := r.run(ctx, name, base); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	if st, err := link.status(ctx); err == nil {
		fmt.Fprintf(log, "link: %d object downloads, %d of them faulted, %.0f MB carried\n",
			st.Stats.MediaGETs, st.Stats.Faulted, float64(st.Stats.BytesServed)/1e6)
	}
	return nil
}

// check validates the command line.
func (rc *runConfig) check() error {
	switch {
	case rc.endpoint == "":
		return errors.New("run: -endpoint is required")
	case rc.batch <= 0 || rc.epochs <= 0 || rc.connections <= 0:
		return fmt.Errorf("run: -batch %d, -epochs %d, -connections %d: all must be positive", rc.batch, rc.epochs, rc.connections)
	}
	if rc.status == "" {
		rc.status = strings.TrimSuffix(rc.endpoint, "/") + "/_linkshape/status"
	}
	for _, name := range strings.Split(rc.readers, ",") {
		switch name {
		case readerDirect:
		case readerDownload:
			if rc.downloadDir == "" {
				return errors.New("run: the download-then-read reader needs -download-dir")
			}
		case readerAgent, readerAgentAhead:
			if rc.socket == "" {
				return errors.New("run: the agent reader needs -socket")
			}
		default:
			return fmt.Errorf("run: unknown reader %q: want %s, %s, %s or %s", name, readerDirect, readerDownload,
				readerAgent, readerAgentAhead)
		}
	}
	return nil
}

// setup describes the run and computes the link-limited ideal.
func (rc *runConfig) setup(ds loader.Dataset, objs []object.Attrs, sh linkshape.Shape) setupRecord {
	s := setupRecord{Kind: "setup", Bucket: rc.bucket, Prefix: rc.prefix, Objects: len(objs), Batch: rc.batch,
		Epochs: rc.epochs, Connections: rc.connections, BytesPerSec: sh.BytesPerSec,
		FirstByteMS: float64(sh.FirstByte) / float64(time.Millisecond)}
	rows, n := ds.Rows()
	s.Shards, s.Samples = len(rows), n
	s.SmallMax = fetch.DefaultSmallObjectSize
	for _, a := range objs {
		s.Bytes += a.Size
		if a.Size <= s.SmallMax {
			s.SmallObjects++
			s.SmallBytes += a.Size
		}
	}
	if sh.BytesPerSec > 0 {
		s.IdealSec = float64(s.Bytes) / (float64(rc.connections) * float64(sh.BytesPerSec))
	}
	return s
}

// ceiling copies objs to nowhere from the unshaped endpoint with conns
// streams and returns how long it took.
func ceiling(ctx context.Context, endpoint string, objs []object.Attrs, conns int) (float64, error) {
	src, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: endpoint, MaxIdleConns: max(256, conns)})
	if err != nil {
		return 0, err
	}
	defer src.Close()
	start := time.Now()
	if err := copyAll(ctx, src, objs, conns, discard); err != nil {
		return 0, fmt.Errorf("unshaped copy: %w", err)
	}
	return time.Since(start).Seconds(), nil
}

// dataset returns the attributes of every object of ds.
func dataset(ctx context.Context, src object.Source, ds loader.Dataset) ([]object.Attrs, error) {
	var objs []object.Attrs
	for _, g := range ds.Groups {
		for _, o := range g.Objects {
			a, err := src.Stat(ctx, o)
			if err != nil {
				return nil, err
			}
			objs = append(objs, a)
		}
	}
	return objs, nil
}

// linkMeter reads the proxy's status.
type linkMeter struct {
	url    string
	client *http.Client
}

func newLinkMeter(url string) *linkMeter {
	return &linkMeter{url: url, client: &http.Client{Timeout: 10 * time.Second}}
}

// status fetches the proxy's shape and counters.
func (m *linkMeter) status(ctx context.Context) (linkshape.Status, error) {
	var st linkshape.Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return st, fmt.Errorf("link status: %w", err)
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return st, fmt.Errorf("link status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("link status: GET %s: %s", m.url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("link status: %w", err)
	}
	return st, nil
}

// bytes returns the object bytes the link has carried so far.
func (m *linkMeter) bytes(ctx context.Context) (int64, error) {
	st, err := m.status(ctx)
	return st.Stats.BytesServed, err
}

// startProfile starts a CPU profile into path; the returned func stops it.
func startProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
