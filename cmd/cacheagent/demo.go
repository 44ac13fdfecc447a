package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/internal/emulator"
)

// demoConfig sizes the embedded demo.
type demoConfig struct {
	objects    int
	objectSize sizeFlag
	linkRate   sizeFlag
	firstByte  time.Duration
	keep       bool
}

func newDemoCmd(opts *options) *cobra.Command {
	dc := &demoConfig{objects: 64, objectSize: 4 << 20, linkRate: 100e6, firstByte: 20 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the agent on an embedded GCS emulator with a synthetic dataset",
		Long: `demo needs no cloud account. It starts an in-process GCS emulator shaped like a real
GCS link (first byte after --first-byte, --link-rate per connection), generates a
dataset, then compares reading it straight from GCS with one stream against the
agent: a cold prefetch, warm reads from local disk, and a restart that re-adopts the
cache with zero downloads. Everything it creates is removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout(), opts, dc)
		},
	}
	f := cmd.Flags()
	f.IntVar(&dc.objects, "objects", dc.objects, "number of objects in the synthetic dataset")
	f.Var(&dc.objectSize, "object-size", "size of each object")
	f.Var(&dc.linkRate, "link-rate", "emulated bytes per second per connection (0: unshaped)")
	f.DurationVar(&dc.firstByte, "first-byte", dc.firstByte, "emulated time to first byte")
	f.BoolVar(&dc.keep, "keep", false, "keep the demo's cache directory")
	return cmd
}

// demoRow is one line of the demo's summary table.
type demoRow struct {
	step    string
	elapsed time.Duration
	bytes   int64
	gets    int64
	note    string
}

func runDemo(ctx context.Context, w io.Writer, opts *options, dc *demoConfig) error {
	if dc.objects <= 0 || dc.objectSize <= 0 {
		return errors.New("demo: --objects and --object-size must be positive")
	}
	const bucket, prefix = "demo-data", "train/"
	objs := make([]fakestorage.Object, dc.objects)
	for i := range objs {
		objs[i] = fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: fmt.Sprintf("%sshard-%05d.bin", prefix, i)},
			Content:     emulator.Pattern(uint64(i)+1, int(dc.objectSize)),
		}
	}
	srv, err := emulator.Start(emulator.Options{Objects: objs,
		Shape: emulator.Shape{FirstByte: dc.firstByte, BytesPerSec: int64(dc.linkRate)}})
	if err != nil {
		return fmt.Errorf("demo: start emulator: %w", err)
	}
	defer srv.Close()
	dir, err := os.MkdirTemp("", "cacheagent-demo-")
	if err != nil {
		return err
	}
	if !dc.keep {
		defer os.RemoveAll(dir)
	}
	o := *opts
	o.endpoint, o.cacheDir, o.shmDir = srv.Endpoint(), dir, "none"
	if o.resolved {
		// The demo's own emulator and cache, whatever the flags and config said.
		o.cfg.Fetch.Endpoint, o.cfg.Tiers.Disk.Dir = srv.Endpoint(), dir
		o.cfg.Tiers.Disk.Max, o.cfg.Tiers.Shm.Dir, o.cfg.Tiers.Shm.Max = 0, "", 0
	}
	total := int64(dc.objects) * int64(dc.objectSize)
	fmt.Fprintf(w, "cacheagent demo: %d objects × %s = %s at gs://%s/%s\n", dc.objects,
		humanize.IBytes(uint64(dc.objectSize)), humanize.IBytes(uint64(total)), bucket, prefix)
	fmt.Fprintf(w, "emulated GCS link: %s first byte, %s/s per connection; agent: %d connections, cache %s\n\n",
		dc.firstByte, humanize.Bytes(uint64(dc.linkRate)), opts.connections, dir)

	var rows []demoRow
	step := func(name, note string, fn func(a *agent) (int64, error)) error {
		a, err := openAgent(ctx, &o)
		if err != nil {
			return err
		}
		gets0, start := srv.MediaGETs(), time.Now()
		n, err := fn(a)
		rows = append(rows, demoRow{name, time.Since(start), n, srv.MediaGETs() - gets0, note})
		return errors.Join(err, a.Close())
	}
	u := gsURI{Bucket: bucket, Path: prefix}
	err = errors.Join(
		step("direct GCS, 1 stream", "what a naive reader gets", func(a *agent) (int64, error) {
			return readDirect(ctx, a.src, u)
		}),
		step("agent: cold prefetch", "sliced parallel ranges, CRC32C verified", func(a *agent) (int64, error) {
			return total, runPrefetch(ctx, a, u, io.Discard)
		}),
		step("agent: warm read", "every byte re-checked against CRC32C", func(a *agent) (int64, error) {
			return readCached(ctx, a, u)
		}),
		step("agent: restart + read", "index re-adopted, zero downloads", func(a *agent) (int64, error) {
			return readCached(ctx, a, u)
		}),
	)
	printDemo(w, rows)
	return err
}

// readDirect reads every object from the source with one sequential stream.
func readDirect(ctx context.Context, src fetch.Source, u gsURI) (int64, error) {
	objs, err := listAll(ctx, src, u)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, o := range objs {
		r, err := src.NewRangeReader(ctx, o.Object, 0, o.Size)
		if err != nil {
			return n, err
		}
		m, err := io.Copy(io.Discard, r)
		r.Close()
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// readCached reads every object through the cache and checks its CRC32C.
func readCached(ctx context.Context, a *agent, u gsURI) (int64, error) {
	var n int64
	tab := crc32.MakeTable(crc32.Castagnoli)
	for _, e := range a.cache.Entries(u.Bucket, u.Path) {
		h, err := a.cache.Open(ctx, e.Attrs.Object)
		if err != nil {
			return n, err
		}
		c := crc32.New(tab)
		m, err := io.Copy(c, io.NewSectionReader(h, 0, h.Size()))
		attrs := h.Attrs()
		h.Close()
		n += m
		if err != nil {
			return n, err
		}
		if attrs.HasCRC32C && c.Sum32() != attrs.CRC32C {
			return n, fmt.Errorf("demo: %s: CRC32C %08x, want %08x", attrs.Object, c.Sum32(), attrs.CRC32C)
		}
	}
	return n, nil
}

func printDemo(w io.Writer, rows []demoRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\ttime\tMB/s\tGCS GETs\tspeedup\t")
	var base float64
	for i, r := range rows {
		rate := float64(r.bytes) / 1e6 / max(r.elapsed.Seconds(), 1e-9)
		if i == 0 {
			base = rate
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%.1f×\t\n", r.step, r.elapsed.Round(time.Millisecond), rate, r.gets, rate/max(base, 1e-9))
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "  %-24s %s\n", r.step+":", r.note)
	}
	slog.Debug("demo finished")
}
