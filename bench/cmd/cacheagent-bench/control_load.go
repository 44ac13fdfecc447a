package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
)

// loadMemoryLimit bounds the load generator's heap; see quietGC.
const loadMemoryLimit = 512 << 20

// quietGC turns the load generator's own garbage collection off until its
// heap reaches loadMemoryLimit, unless GOGC or GOMEMLIMIT is set. Its live
// heap is a few MiB while each status call allocates a few KiB (the
// decoded JSON), so at the default GOGC it would collect several times a
// second, and on a small machine each of its collections (stop-the-world
// phases, assists on the 100 timed goroutines) lands in the latencies it
// reports, which are meant to be the daemon's. A phase allocates at most a
// few hundred MiB, so it collects at most a few times.
func quietGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(loadMemoryLimit)
	debug.SetGCPercent(-1)
}

// newBenchControlLoadCmd is the load generator of `bench control`, run as
// its own process so that the emulator's large heap (and its garbage
// collection) in the parent does not delay the clients being timed.
func newBenchControlLoadCmd(opts *cli.Options) *cobra.Command {
	var (
		clients  int
		rate     float64
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:    "control-load",
		Short:  "Status load of bench control (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			quietGC()
			lr, err := statusPhase(cmd.Context(), opts.Config().Control.Socket, clients, rate, duration)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(lr)
		},
	}
	f := cmd.Flags()
	f.IntVar(&clients, "clients", 100, "concurrent clients")
	f.Float64Var(&rate, "rate", 0, "calls per second per client (0: back to back)")
	f.DurationVar(&duration, "duration", 10*time.Second, "how long")
	return cmd
}

// runLoadChild runs one status phase in a child process.
func runLoadChild(ctx context.Context, socket string, clients int, rate float64, d time.Duration) (loadReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return loadReport{}, err
	}
	cmd := exec.CommandContext(ctx, exe, "control-load", "--socket", socket,
		"--clients", strconv.Itoa(clients), "--rate", strconv.FormatFloat(rate, 'g', -1, 64),
		"--duration", d.String())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return loadReport{}, fmt.Errorf("bench control: load: %w", err)
	}
	var lr loadReport
	if err := json.Unmarshal(out.Bytes(), &lr); err != nil {
		return loadReport{}, fmt.Errorf("bench control: load report: %w", err)
	}
	return lr, nil
}

// statusPhase has clients call status for d, at rate calls per second each
// (0: back to back), with their schedules spread over one interval.
func statusPhase(ctx context.Context, socket string, clients int, rate float64, d time.Duration) (loadReport, error) {
	lat := make([][]time.Duration, clients)
	deadline := time.Now().Add(d)
	g, gctx := errgroup.WithContext(ctx)
	for i := range clients {
		g.Go(func() (err error) {
			phase := time.Duration(float64(i) / float64(clients) / max(rate, 1e-9) * float64(time.Second))
			lat[i], err = statusClient(gctx, socket, rate, phase, deadline)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return loadReport{}, err
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	ms := func(q float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(q*float64(len(all))))].Microseconds()) / 1000
	}
	return loadReport{Clients: clients, RatePerClient: rate, Requests: len(all),
		RequestsPerSec: float64(len(all)) / d.Seconds(), P50Ms: ms(0.5), P90Ms: ms(0.9), P99Ms: ms(0.99),
		P999Ms: ms(0.999), MaxMs: ms(1)}, nil
}

// statusClient calls status on its own connection until deadline, at rate
// calls per second starting after phase (0: back to back), and returns the
// round trips.
func statusClient(ctx context.Context, socket string, rate float64, phase time.Duration,
	deadline time.Time) ([]time.Duration, error) {
	c, err := control.Dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var tick <-chan time.Time
	if rate > 0 {
		start := time.NewTimer(phase) // pacing, not synchronisation
		select {
		case <-start.C:
		case <-ctx.Done():
			start.Stop()
			return nil, ctx.Err()
		}
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	var lat []time.Duration
	for first := true; time.Now().Before(deadline); first = false {
		if tick != nil && !first {
			select {
			case <-tick:
			case <-ctx.Done():
				return lat, ctx.Err()
			}
		}
		t := time.Now()
		if _, err := c.Status(ctx); err != nil {
			return lat, err
		}
		lat = append(lat, time.Since(t))
	}
	return lat, nil
}
