package main

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/bench/gpubench"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/gpu"
)

// newBenchGPUCmd returns `cacheagent-bench gpu`.
func newBenchGPUCmd(_ *cli.Options) *cobra.Command {
	var (
		asJSON   bool
		mode     = gpu.ModeAuto
		ordinal  int
		size     = cli.Size(256 << 20)
		poolSize = cli.Size(64 << 20)
		cfg      = gpubench.Config{Reps: 5, Pool: gpu.PoolConfig{Buffers: 4}, ShmDir: "/dev/shm"}
	)
	cmd := &cobra.Command{
		Use:   "gpu",
		Short: "Measure host-to-GPU copy throughput: pinned peak, pageable, staging pool, registered /dev/shm",
		Long: `Measure host-to-GPU copy throughput along each path the agent can use, as GB/s,
% of the pinned peak and % of the PCIe link ceiling, and the cost of registering a
/dev/shm mapping. On a machine without an NVIDIA GPU or driver it prints why, in one
line, and exits 0. --gpu fake runs the in-process fake: memcpy speeds, not PCIe.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if int64(size) > int64(math.MaxInt) || int64(poolSize) > int64(math.MaxInt) {
				return fmt.Errorf("--size or --pool-size too large for this platform")
			}
			cfg.Size, cfg.Pool.Size = int(size), int(poolSize)
			b, err := cli.OpenGPU(cmd.Context(), mode)
			if err != nil {
				return err
			}
			defer b.Close()
			if none, ok := b.(*gpu.None); ok {
				return cli.PrintNoGPU(cmd.OutOrStdout(), mode, none, asJSON)
			}
			rep, err := gpubench.Run(cmd.Context(), b, ordinal, cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), rep)
			}
			return printBench(cmd.OutOrStdout(), rep)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.Var(&mode, "gpu", "GPU backend: auto, cuda, fake or none")
	f.IntVar(&ordinal, "device", 0, "CUDA ordinal of the GPU to measure")
	f.Var(&size, "size", "bytes per timed copy")
	f.IntVar(&cfg.Reps, "reps", cfg.Reps, "timed repetitions per path (the median is reported)")
	f.IntVar(&cfg.Pool.Buffers, "pool-buffers", cfg.Pool.Buffers, "staging buffers")
	f.Var(&poolSize, "pool-size", "bytes per staging buffer")
	f.IntVar(&cfg.Workers, "workers", 0, "goroutines filling a staging buffer (0: min(4, CPUs))")
	f.StringVar(&cfg.ShmDir, "shm-dir", cfg.ShmDir, "directory for the registered mapping's file")
	return cmd
}

func printBench(out io.Writer, rep gpubench.Report) error {
	d := rep.Device
	if rep.Backend == gpu.ModeFake.String() {
		fmt.Fprintln(out, "FAKE backend: figures are host memcpy speeds, not PCIe transfers")
	}
	fmt.Fprintf(out, "GPU %d: %s (%s), PCIe %s, ceiling %s, NUMA node %s\n", d.Ordinal, d.Name, d.BusID,
		cli.LinkString(d.Link), gbps(rep.CeilingGBps), numaString(d.NUMANode))
	fmt.Fprintf(out, "%s per copy, median of %d\n", humanize.IBytes(uint64(rep.Size)), rep.Reps)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PATH\tGB/s\t% OF PINNED\t% OF LINK")
	for _, r := range rep.Results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\terror: %s\t\t\n", r.Name, r.Error)
			continue
		}
		link := "-"
		if rep.CeilingGBps > 0 {
			link = fmt.Sprintf("%.1f", r.PctOfLink)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f\t%s\n", r.Name, r.GBps, r.PctOfPinned, link)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.RegisterMsPerGB > 0 {
		fmt.Fprintf(out, "registering /dev/shm read-only: %.1f ms/GB, unregistering %.1f ms/GB\n",
			rep.RegisterMsPerGB, rep.UnregisterMsPerGB)
	}
	return nil
}

func gbps(v float64) string {
	if v <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GB/s", v)
}

func numaString(n int) string {
	if n < 0 {
		return "unknown"
	}
	return fmt.Sprint(n)
}
