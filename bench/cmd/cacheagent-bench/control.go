package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
)

// benchControlConfig sizes `cacheagent-bench control`.
type benchControlConfig struct {
	clients    int
	rate       float64 // status calls per second per client in the paced phase; 0: no paced phase
	duration   time.Duration
	objects    int
	objectSize cli.Size
	bigObjects int
	bigSize    cli.Size
	linkRate   cli.Size
	asJSON     bool
}

// benchControlReport is what `cacheagent-bench control` measures.
type benchControlReport struct {
	// Load has one entry per phase: back to back, then paced.
	Load          []loadReport `json:"status_load"`
	CachedObjects int64        `json:"cached_objects"`
	PopulateSec   float64      `json:"populate_sec"`
	RSSIdleMiB    float64      `json:"rss_after_caching_mib"`
	HeapMiB       float64      `json:"go_heap_alloc_mib"`
	RSSLoadMiB    float64      `json:"rss_under_load_mib"`
	AnonMiB       float64      `json:"rss_anon_under_load_mib"` // heap, stacks: the daemon's own
	FileMiB       float64      `json:"rss_file_under_load_mib"` // the executable and mapped files
	HWMMiB        float64      `json:"rss_peak_mib"`
	ShutdownSec   float64      `json:"shutdown_sec"`
}

// loadReport is one phase of status calls.
type loadReport struct {
	Clients        int     `json:"clients"`
	RatePerClient  float64 `json:"rate_per_client,omitempty"` // 0: back to back
	PrefetchActive bool    `json:"prefetch_active"`           // still running at the end
	Requests       int     `json:"requests"`
	RequestsPerSec float64 `json:"requests_per_sec"`
	P50Ms          float64 `json:"p50_ms"`
	P90Ms          float64 `json:"p90_ms"`
	P99Ms          float64 `json:"p99_ms"`
	P999Ms         float64 `json:"p999_ms"`
	MaxMs          float64 `json:"max_ms"`
}

func newBenchControlCmd(opts *cli.Options) *cobra.Command {
	bc := &benchControlConfig{clients: 100, duration: 10 * time.Second, objects: 100_000, objectSize: 1 << 10,
		rate: 20, bigObjects: 16, bigSize: 64 << 20, linkRate: 1e6}
	cmd := &cobra.Command{
		Use:   "control",
		Short: "Measure the daemon: status round trips under concurrent clients during a prefetch, and RSS",
		Long: `bench control starts an in-process GCS emulator and the daemon as a subprocess,
caches --objects small objects through it (the RSS figure), then starts a prefetch
of --big-objects shaped at --link-rate per connection and, while it runs, has
--clients concurrent clients (each its own connection) call status for --duration,
first back to back, then each at --rate calls per second (phases spread evenly).
It reports status latency percentiles, the daemon's RSS and its shutdown time.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := runBenchControl(cmd.Context(), cmd.ErrOrStderr(), bc)
			if err != nil {
				return err
			}
			return printBenchControl(cmd.OutOrStdout(), rep, bc.asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&bc.clients, "clients", bc.clients, "concurrent status clients")
	f.Float64Var(&bc.rate, "rate", bc.rate, "status calls per second per client in the paced phase (0: no paced phase)")
	f.DurationVar(&bc.duration, "duration", bc.duration, "how long the clients run")
	f.IntVar(&bc.objects, "objects", bc.objects, "small objects cached before measuring")
	f.Var(&bc.objectSize, "object-size", "size of each small object")
	f.IntVar(&bc.bigObjects, "big-objects", bc.bigObjects, "objects of the prefetch running during the measurement")
	f.Var(&bc.bigSize, "big-size", "size of each of those")
	f.Var(&bc.linkRate, "link-rate", "emulated bytes per second per connection during the measurement")
	f.BoolVar(&bc.asJSON, "json", false, "print JSON")
	return cmd
}

// runBenchControl runs the benchmark; progress goes to log.
func runBenchControl(ctx context.Context, log io.Writer, bc *benchControlConfig) (benchControlReport, error) {
	var rep benchControlReport
	if bc.clients <= 0 || bc.objects < 0 || bc.bigObjects <= 0 {
		return rep, errors.New("bench control: --clients and --big-objects must be positive")
	}
	tmp, err := os.MkdirTemp("", "cacheagent-bench-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "seeding the emulator: %d × %s and %d × %s\n", bc.objects,
		humanize.IBytes(uint64(bc.objectSize)), bc.bigObjects, humanize.IBytes(uint64(bc.bigSize)))
	emu, err := emulator.Start(emulator.Options{Objects: benchObjects(bc)})
	if err != nil {
		return rep, err
	}
	defer emu.Close()
	proc, err := startBenchDaemon(ctx, tmp, emu.Endpoint())
	if err != nil {
		return rep, err
	}
	defer proc.kill()
	c, err := control.Dial(ctx, proc.socket)
	if err != nil {
		return rep, err
	}
	defer c.Close()
	if err := benchPopulate(ctx, log, c, proc, bc.objects, &rep); err != nil {
		return rep, err
	}
	emu.SetShape(emulator.Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: int64(bc.linkRate)})
	if err := benchStatusLoad(ctx, log, c, proc, bc, &rep); err != nil {
		return rep, err
	}
	start := time.Now()
	if err := proc.stop(); err != nil {
		return rep, err
	}
	rep.ShutdownSec = time.Since(start).Seconds()
	return rep, nil
}

// smallPerBucket spreads the small objects over buckets: the emulator's
// inserts cost time linear in the size of their bucket.
const smallPerBucket = 100

// benchObjects is the emulator's dataset: the small objects over buckets
// bench-sNNNN, and big/ in bucket bench.
func benchObjects(bc *benchControlConfig) []fakestorage.Object {
	objs := make([]fakestorage.Object, 0, bc.objects+bc.bigObjects)
	small := emulator.Pattern(1, int(bc.objectSize)) // shared: contents do not matter here
	for _, o := range smallObjects(bc.objects) {
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: o.Bucket,
			Name: o.Name}, Content: small})
	}
	for i := range bc.bigObjects {
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bench",
			Name: fmt.Sprintf("big/%03d", i)}, Content: emulator.Pattern(uint64(i)+2, int(bc.bigSize))})
	}
	return objs
}

// smallObjects names the n small objects.
func smallObjects(n int) []object.Object {
	objs := make([]object.Object, n)
	for i := range objs {
		objs[i] = object.Object{Bucket: fmt.Sprintf("bench-s%04d", i/smallPerBucket), Name: fmt.Sprintf("o%07d", i)}
	}
	return objs
}

// benchPopulate caches the small objects through the daemon (POST
// /v1/fetch) and measures its RSS afterwards.
func benchPopulate(ctx context.Context, log io.Writer, c *control.Client, proc *benchDaemon, n int,
	rep *benchControlReport) error {
	fmt.Fprintln(log, "caching the small objects through the daemon")
	start := time.Now()
	if err := c.Fetch(ctx, smallObjects(n)); err != nil {
		return err
	}
	rep.PopulateSec = time.Since(start).Seconds()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	rep.CachedObjects = st.Tiers[len(st.Tiers)-1].Entries
	rep.RSSIdleMiB = proc.memory()["VmRSS"]
	rep.HeapMiB = scrapeValue(ctx, st.MetricsAddr, "go_memstats_heap_alloc_bytes") / (1 << 20)
	return nil
}

// benchStatusLoad runs the status phases during a shaped prefetch.
func benchStatusLoad(ctx context.Context, log io.Writer, c *control.Client, proc *benchDaemon,
	bc *benchControlConfig, rep *benchControlReport) error {
	j, err := c.Prefetch(ctx, "bench", "big/", object.Warm)
	if err != nil {
		return err
	}
	rates := []float64{0}
	if bc.rate > 0 {
		rates = append(rates, bc.rate)
	}
	for _, rate := range rates {
		fmt.Fprintf(log, "%d clients calling status for %s (rate %g/s each, 0: back to back) during prefetch job %s\n",
			bc.clients, bc.duration, rate, j.ID)
		lr, err := runLoadChild(ctx, proc.socket, bc.clients, rate, bc.duration)
		if err != nil {
			return err
		}
		if j, err = c.Job(ctx, j.ID); err != nil {
			return err
		}
		lr.PrefetchActive = !j.State.Final()
		rep.Load = append(rep.Load, lr)
	}
	m := proc.memory()
	rep.RSSLoadMiB, rep.HWMMiB, rep.AnonMiB, rep.FileMiB = m["VmRSS"], m["VmHWM"], m["RssAnon"], m["RssFile"]
	return c.CancelJob(ctx, j.ID)
}

// scrapeValue returns the value of an unlabelled series from the metrics
// at addr, 0 if it cannot.
func scrapeValue(ctx context.Context, addr, name string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// printBenchControl prints the report.
func printBenchControl(w io.Writer, r benchControlReport, asJSON bool) error {
	if asJSON {
		return cli.WriteJSON(w, r)
	}
	for _, l := range r.Load {
		load := "back to back"
		if l.RatePerClient > 0 {
			load = fmt.Sprintf("%g/s each", l.RatePerClient)
		}
		fmt.Fprintf(w, "status round trip, %d clients (%s) during a prefetch (active at the end: %v): "+
			"p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms; %d requests, %.0f/s\n",
			l.Clients, load, l.PrefetchActive, l.P50Ms, l.P90Ms, l.P99Ms, l.P999Ms, l.MaxMs, l.Requests,
			l.RequestsPerSec)
	}
	fmt.Fprintf(w, "daemon RSS with %d cached objects: %.1f MiB after caching them (Go heap %.1f MiB), "+
		"%.1f MiB under load (anonymous %.1f MiB, file-backed %.1f MiB), peak %.1f MiB (caching them took %.1f s)\n",
		r.CachedObjects, r.RSSIdleMiB, r.HeapMiB, r.RSSLoadMiB, r.AnonMiB, r.FileMiB, r.HWMMiB, r.PopulateSec)
	fmt.Fprintf(w, "graceful shutdown: %.2f s\n", r.ShutdownSec)
	return nil
}

// benchDaemon is the daemon subprocess of the benchmark.
type benchDaemon struct {
	cmd    *exec.Cmd
	socket string
	notify *net.UnixConn  // its NOTIFY_SOCKET, open while it runs
	waiter sync.WaitGroup // the goroutine waiting for the process
	exited chan struct{}  // closed when it has exited; err is then set
	err    error
}

// startBenchDaemon starts `cacheagent serve` (found by cli.LookPath) on a
// config in dir and waits for its READY=1 on a notify socket.
func startBenchDaemon(ctx context.Context, dir, endpoint string) (*benchDaemon, error) {
	return startBenchDaemonConfig(ctx, dir, fmt.Sprintf("tiers: {disk: {dir: %q}}\nfetch: {endpoint: %q}\n",
		filepath.Join(dir, "cache"), endpoint))
}

// startBenchDaemonConfig starts cacheagent serve in dir with the config
// sections conf (its tiers and fetch at least) and a control socket and
// metrics of its own.
func startBenchDaemonConfig(ctx context.Context, dir, conf string) (*benchDaemon, error) {
	exe, err := cli.LookPath("cacheagent")
	if err != nil {
		return nil, fmt.Errorf("bench control: the daemon it measures, cacheagent, is neither beside "+
			"cacheagent-bench nor on PATH; build it beside it: go build -o DIR/cacheagent ./cmd/cacheagent: %w", err)
	}
	sock := filepath.Join(dir, "control.sock")
	cfg := conf + fmt.Sprintf("control: {socket: %q}\nmetrics: {listen: \"127.0.0.1:0\"}\n", sock)
	cfgPath := filepath.Join(dir, "cacheagent.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	notifyPath := filepath.Join(dir, "notify.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "serve", "--config", cfgPath, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		ln.Close()
		return nil, err
	}
	d := &benchDaemon{cmd: cmd, socket: sock, notify: ln, exited: make(chan struct{})}
	d.waiter.Go(func() {
		d.err = cmd.Wait()
		close(d.exited)
	})
	if err := awaitReady(ctx, ln, d); err != nil {
		d.kill()
		return nil, err
	}
	ln.SetReadDeadline(time.Time{})
	d.waiter.Go(func() { // keep reading, as systemd does, until stop or kill closes it
		buf := make([]byte, 4096)
		for {
			if _, err := ln.Read(buf); err != nil {
				return
			}
		}
	})
	return d, nil
}

// awaitReady reads notify datagrams until READY=1, the daemon's exit, or a
// minute.
func awaitReady(ctx context.Context, ln *net.UnixConn, d *benchDaemon) error {
	ln.SetReadDeadline(time.Now().Add(time.Minute))
	stop := context.AfterFunc(ctx, func() { ln.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 4096)
	for {
		n, err := ln.Read(buf)
		if err != nil {
			select {
			case <-d.exited:
				return fmt.Errorf("bench control: the daemon exited before it was ready: %v", d.err)
			default:
				return fmt.Errorf("bench control: waiting for READY=1: %w", err)
			}
		}
		for _, l := range strings.Split(string(buf[:n]), "\n") {
			if l == "READY=1" {
				return nil
			}
		}
	}
}

// memory returns the daemon's memory figures from /proc/PID/status (VmRSS,
// VmHWM, RssAnon, RssFile, …) in MiB.
func (d *benchDaemon) memory() map[string]float64 {
	out := make(map[string]float64)
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
			out[k] = kb / 1024
		}
	}
	return out
}

// stop sends SIGTERM and waits for a clean exit.
func (d *benchDaemon) stop() error {
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-d.exited
	d.notify.Close()
	d.waiter.Wait()
	if d.err != nil {
		return fmt.Errorf("bench control: daemon exit: %w", d.err)
	}
	return nil
}

// kill kills the daemon if it still runs and waits for it.
func (d *benchDaemon) kill() {
	select {
	case <-d.exited:
	default:
		d.cmd.Process.Kill()
	}
	<-d.exited
	d.notify.Close()
	d.waiter.Wait()
}
