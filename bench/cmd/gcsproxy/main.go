// Command gcsproxy is a reverse proxy in front of any GCS-compatible
// endpoint (a standalone fake-gcs-server, say) that makes the loopback path
// behave like a link to GCS: every object download waits -first-byte
// before its headers and is paced at -rate bytes per second per connection,
// and a share of downloads can fail (-error-rate answers -error-status,
// -reset-rate resets the connection mid-body, -close-rate closes it
// cleanly, -corrupt-rate flips a byte, the body's middle one with
// -corrupt-middle); upload bodies are paced at
// -upload-rate. Metadata and list requests pass through unshaped. It is
// package linkshape as a process.
//
// It prints its base URL on the first line of stdout, serves
// GET /_linkshape/status (the shape and the counters: media GETs, faulted,
// body bytes served, as linkshape.Status JSON) and runs until SIGINT or
// SIGTERM.
//
//	go run ./bench/cmd/gcsproxy -upstream http://127.0.0.1:4443 -first-byte 20ms -rate 100MB
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/cacheagent/cacheagent/bench/linkshape"
)

// statusPath serves the link's status; GCS bucket names cannot start with
// an underscore, so it never shadows an object.
const statusPath = "/_linkshape/status"

func main() {
	var (
		listen      = flag.String("listen", "127.0.0.1:0", "address to listen on")
		upstream    = flag.String("upstream", "", "base URL of the GCS-compatible endpoint, e.g. http://127.0.0.1:4443 (required)")
		firstByte   = flag.Duration("first-byte", 20*time.Millisecond, "time to first byte of each object download")
		rate        = flag.String("rate", "100MB", "bytes per second per connection, e.g. 100MB (0: unshaped)")
		uploadRate  = flag.String("upload-rate", "0", "upload body bytes per second per request, e.g. 2MB (0: unshaped)")
		errorRate   = flag.Float64("error-rate", 0, "share of object downloads answered with -error-status, in [0, 1]")
		errorStatus = flag.Int("error-status", http.StatusServiceUnavailable, "status of -error-rate's answers: 429 or 5xx")
		resetRate   = flag.Float64("reset-rate", 0, "share of object downloads reset mid-body, in [0, 1]")
		corruptRate = flag.Float64("corrupt-rate", 0, "share of object downloads with one byte flipped in their first 4 KiB, in [0, 1]")
		closeRate   = flag.Float64("close-rate", 0, "share of object downloads closed cleanly mid-body (a truncated body), in [0, 1]")
		middle      = flag.Bool("corrupt-middle", false, "flip the middle byte of the body instead (the same byte whenever the same range is read)")
		resetWithin = flag.String("reset-within", "1MiB", "resets and closes happen after a random number of body bytes up to this")
		seed        = flag.Uint64("seed", 1, "seed of the fault draws")
	)
	flag.Parse()
	cfg := config{listen: *listen, upstream: *upstream, firstByte: *firstByte, rate: *rate, uploadRate: *uploadRate,
		faults: linkshape.Random{Seed: *seed, StatusRate: *errorRate, Status: *errorStatus, ResetRate: *resetRate,
			CorruptRate: *corruptRate, CorruptMiddle: *middle, CloseRate: *closeRate},
		resetWithin: *resetWithin}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gcsproxy:", err)
		stop()
		os.Exit(1)
	}
}

// config is the parsed command line.
type config struct {
	listen, upstream string
	firstByte        time.Duration
	rate, uploadRate string
	faults           linkshape.Random
	resetWithin      string
}

// serve runs the proxy until ctx is done, printing its URL to out first.
func serve(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.upstream == "" {
		return errors.New("-upstream is required")
	}
	bps, err := humanize.ParseBytes(cfg.rate)
	if err != nil || bps > 1<<50 {
		return fmt.Errorf("-rate %q: want a rate such as 100MB", cfg.rate)
	}
	ups, err := humanize.ParseBytes(cfg.uploadRate)
	if err != nil || ups > 1<<50 {
		return fmt.Errorf("-upload-rate %q: want a rate such as 2MB", cfg.uploadRate)
	}
	within, err := humanize.ParseBytes(cfg.resetWithin)
	if err != nil || within > 1<<50 {
		return fmt.Errorf("-reset-within %q: want a size such as 1MiB", cfg.resetWithin)
	}
	if cfg.firstByte < 0 {
		return fmt.Errorf("-first-byte %v: negative", cfg.firstByte)
	}
	cfg.faults.ResetWithin = int64(within)
	plan, err := cfg.faults.Plan()
	if err != nil {
		return err
	}
	tr := linkshape.NewTransport()
	defer tr.CloseIdleConnections()
	proxy, err := linkshape.Proxy(cfg.upstream, tr, log.New(os.Stderr, "gcsproxy: ", log.LstdFlags))
	if err != nil {
		return err
	}
	link := linkshape.New(proxy, linkshape.Shape{FirstByte: cfg.firstByte, BytesPerSec: int64(bps),
		UploadBytesPerSec: int64(ups)}, plan)
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := &http.Server{
		Handler:           withStatus(link),
		ReadHeaderTimeout: time.Minute,
		// Aborted responses (resets, clients leaving) are expected.
		ErrorLog:    log.New(io.Discard, "", 0),
		BaseContext: func(net.Listener) context.Context { return base },
	}
	var wg sync.WaitGroup
	var serveErr error
	wg.Go(func() { serveErr = srv.Serve(ln) })
	fmt.Fprintf(out, "http://%s\n", ln.Addr())
	<-ctx.Done()
	cancel() // ends shaping waits at once
	closeErr := srv.Close()
	wg.Wait()
	if !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return closeErr
}

// withStatus answers GET statusPath with l's status and passes the rest
// to l. It matches the path exactly: object names are never cleaned or
// redirected, as http.ServeMux would.
func withStatus(l *linkshape.Link) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != statusPath {
			l.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet {
			http.Error(w, "GET only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(l.Status())
	})
}
