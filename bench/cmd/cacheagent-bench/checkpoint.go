package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// benchCkptConfig is `bench checkpoint`'s flags.
type benchCkptConfig struct {
	large, small         int
	largeSize, smallSize uint64
	readObjects          int
	readSize             uint64
	rate                 uint64 // bytes/s per connection, both directions
	firstByte            time.Duration
	connections, rounds  int
	dir                  string
	asJSON, directOnce   bool
	noDirect             bool
	emuFiles             bool
}

// ckptRound is one round's figures, in seconds.
type ckptRound struct {
	FsyncWrite float64 `json:"fsync_write_s"` // the files written with fsync: the baseline of a save
	Stall      float64 `json:"stall_s"`       // written into a staging directory + save --wait local
	StallSave  float64 `json:"stall_save_s"`  // of which save --wait local (the rest is writing the files)
	Upload     float64 `json:"upload_s"`      // from the save's return to "gcs"
	DirectSeq  float64 `json:"direct_seq_s"`  // uploaded straight to GCS, file after file
	DirectPar  float64 `json:"direct_par_s"`  // uploaded straight to GCS, connections at once
	ReadAlone  float64 `json:"read_alone_s"`  // a cold prefetch of the read dataset
	ReadDuring float64 `json:"read_during_s"` // the same, while a save uploads
}

// benchCkptReport is the benchmark's result.
type benchCkptReport struct {
	Bytes       int64       `json:"bytes"`
	Files       int         `json:"files"`
	ReadBytes   int64       `json:"read_bytes"`
	Connections int         `json:"connections"`
	RateBps     uint64      `json:"rate_bytes_per_sec"`
	IdealUpload float64     `json:"ideal_upload_s"` // bytes / (connections × rate)
	Rounds      []ckptRound `json:"rounds"`
}

func newBenchCheckpointCmd(opts *cli.Options) *cobra.Command {
	bc := &benchCkptConfig{}
	var largeSize, smallSize, readSize, rate string
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Measure checkpoint saves: the stall, the upload behind it, reads meanwhile",
		Long: `checkpoint measures, against baselines in the same run, a checkpoint of a few
large files and many small ones saved through a cacheagent daemon (the
binary beside this one) over a shaped emulator (--rate per connection in
each direction, --first-byte):

  stall        files written into a staging directory + save --wait local
               (in brackets: the save, the rest is writing the files),
               vs the same files written with fsync (and vs uploading them
               straight to GCS, file after file and --connections at once)
  upload       from the save's return to "gcs", vs bytes/(connections × rate)
  read         a cold prefetch of another dataset while a save uploads, vs
               the same prefetch alone`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []struct {
				s string
				v *uint64
			}{{largeSize, &bc.largeSize}, {smallSize, &bc.smallSize}, {readSize, &bc.readSize}, {rate, &bc.rate}} {
				n, err := humanize.ParseBytes(f.s)
				if err != nil {
					return fmt.Errorf("%q: %w", f.s, err)
				}
				*f.v = n
			}
			rep, err := runBenchCheckpoint(cmd.Context(), cmd.ErrOrStderr(), bc)
			if err != nil {
				return err
			}
			return printBenchCheckpoint(cmd.OutOrStdout(), rep, bc.asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&bc.large, "large", 4, "large files")
	f.BoolVar(&bc.emuFiles, "emu-files", true, "keep the emulator's objects in files under the work directory "+
		"(its memory backend buffers each upload's body under one lock that every request takes)")
	f.StringVar(&largeSize, "large-size", "240MiB", "size of each large file")
	f.IntVar(&bc.small, "small", 256, "small files")
	f.StringVar(&smallSize, "small-size", "256KiB", "size of each small file")
	f.IntVar(&bc.readObjects, "read-objects", 32, "objects of the dataset read during a save")
	f.StringVar(&readSize, "read-size", "16MiB", "size of each of them")
	f.StringVar(&rate, "rate", "50MB", "link rate per connection, each direction")
	f.DurationVar(&bc.firstByte, "first-byte", 20*time.Millisecond, "time to first byte of each request")
	f.IntVar(&bc.connections, "connections", 8, "the daemon's fetch.connections and checkpoint.connections, and the parallel direct upload's")
	f.IntVar(&bc.rounds, "rounds", 2, "rounds")
	f.StringVar(&bc.dir, "dir", "", "working directory on the disk to measure (default: a temporary one)")
	f.BoolVar(&bc.asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&bc.directOnce, "direct-once", false, "upload straight to GCS in the first round only (they are slow)")
	f.BoolVar(&bc.noDirect, "no-direct", false, "never upload straight to GCS")
	_ = opts
	return cmd
}

// ckptFile is one file of the benchmark's checkpoint.
type ckptFile struct {
	name string
	data []byte
}

func (bc *benchCkptConfig) files() []ckptFile {
	var fs []ckptFile
	for i := range bc.large {
		fs = append(fs, ckptFile{fmt.Sprintf("model-%02d.safetensors", i), emulator.Pattern(uint64(100+i), int(bc.largeSize))})
	}
	small := emulator.Pattern(7, int(bc.smallSize))
	for i := range bc.small {
		fs = append(fs, ckptFile{fmt.Sprintf("optim/shard-%04d.pt", i), small})
	}
	return fs
}

func runBenchCheckpoint(ctx context.Context, log io.Writer, bc *benchCkptConfig) (benchCkptReport, error) {
	dir := bc.dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "cacheagent-bench-checkpoint-"); err != nil {
			return benchCkptReport{}, err
		}
		defer os.RemoveAll(dir)
	}
	var objs []fakestorage.Object
	for r := range bc.rounds {
		for _, set := range []string{"alone", "during"} {
			for i := range bc.readObjects {
				objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bench",
					Name: fmt.Sprintf("data-%d-%s/%03d", r, set, i)}, Content: emulator.Pattern(uint64(i+1), int(bc.readSize))})
			}
		}
	}
	emuOpts := emulator.Options{Objects: objs}
	if bc.emuFiles {
		emuOpts.Dir = filepath.Join(dir, "emu")
	}
	emu, err := emulator.Start(emuOpts)
	if err != nil {
		return benchCkptReport{}, err
	}
	defer emu.Close()
	emu.SetShape(emulator.Shape{FirstByte: bc.firstByte, BytesPerSec: int64(bc.rate), UploadBytesPerSec: int64(bc.rate)})
	extra := fmt.Sprintf("fetch: {endpoint: %q, connections: %d}\ncheckpoint: {connections: %d}\n"+
		"tiers: {disk: {dir: %q, max: 64GiB}, shm: {dir: none}}\n", emu.Endpoint(), bc.connections, bc.connections,
		filepath.Join(dir, "cache"))
	proc, err := startBenchDaemonConfig(ctx, dir, extra)
	if err != nil {
		return benchCkptReport{}, err
	}
	defer proc.stop()
	c, err := control.Dial(ctx, proc.socket)
	if err != nil {
		return benchCkptReport{}, err
	}
	defer c.Close()
	gcs, err := fetch.NewGCS(ctx, fetch.GCSConfig{Endpoint: emu.Endpoint(), ReadWrite: true, MaxIdleConns: bc.connections})
	if err != nil {
		return benchCkptReport{}, err
	}
	defer gcs.Close()

	files := bc.files()
	rep := benchCkptReport{Files: len(files), ReadBytes: int64(bc.readObjects) * int64(bc.readSize),
		Connections: bc.connections, RateBps: bc.rate}
	for _, f := range files {
		rep.Bytes += int64(len(f.data))
	}
	rep.IdealUpload = float64(rep.Bytes) / float64(uint64(bc.connections)*bc.rate)
	fmt.Fprintf(log, "checkpoint: %d files, %s; link %s/s per connection, %d connections\n", len(files),
		humanize.IBytes(uint64(rep.Bytes)), humanize.Bytes(bc.rate), bc.connections)
	for r := range bc.rounds {
		var rd ckptRound
		if rd.FsyncWrite, err = writeFiles(filepath.Join(dir, fmt.Sprintf("fsync-%d", r)), files, true); err != nil {
			return rep, err
		}
		os.RemoveAll(filepath.Join(dir, fmt.Sprintf("fsync-%d", r)))
		uri := fmt.Sprintf("gs://bench/ckpt/run/step-%d/", r)
		if rd.Stall, rd.StallSave, rd.Upload, err = saveThrough(ctx, c, uri, files); err != nil {
			return rep, err
		}
		if !bc.noDirect && (!bc.directOnce || r == 0) {
			if rd.DirectSeq, err = uploadDirect(ctx, gcs, fmt.Sprintf("direct-seq-%d/", r), files, 1); err != nil {
				return rep, err
			}
			if rd.DirectPar, err = uploadDirect(ctx, gcs, fmt.Sprintf("direct-par-%d/", r), files, bc.connections); err != nil {
				return rep, err
			}
		}
		if rd.ReadAlone, err = prefetchTimed(ctx, c, fmt.Sprintf("data-%d-alone/", r)); err != nil {
			return rep, err
		}
		// A save uploads while the other dataset is read cold.
		done := make(chan error, 1)
		go func() {
			_, _, _, err := saveThrough(ctx, c, fmt.Sprintf("gs://bench/ckpt/run/busy-%d/", r), files)
			done <- err
		}()
		time.Sleep(time.Duration(rd.Stall * float64(time.Second))) // the upload has begun
		rd.ReadDuring, err = prefetchTimed(ctx, c, fmt.Sprintf("data-%d-during/", r))
		if serr := <-done; err == nil {
			err = serr
		}
		if err != nil {
			return rep, err
		}
		fmt.Fprintf(log, "round %d: %+v\n", r+1, rd)
		rep.Rounds = append(rep.Rounds, rd)
	}
	return rep, nil
}

// writeFiles writes files under dir (fsyncing each if sync) and returns
// the seconds it took.
func writeFiles(dir string, files []ckptFile, sync bool) (float64, error) {
	t0 := time.Now()
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return 0, err
		}
		w, err := os.Create(p)
		if err != nil {
			return 0, err
		}
		_, err = w.Write(f.data)
		if err == nil && sync {
			err = w.Sync()
		}
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return 0, err
		}
	}
	return time.Since(t0).Seconds(), nil
}

// saveThrough saves files as uri through the daemon, as a training job
// does (a staging directory, written, saved at "local"), and returns the
// stall, the save's part of it, and the upload's time after it.
func saveThrough(ctx context.Context, c *control.Client, uri string, files []ckptFile) (stall, save, upload float64, err error) {
	t0 := time.Now()
	dir, err := c.CheckpointStaging(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	if _, err := writeFiles(dir, files, false); err != nil {
		return 0, 0, 0, err
	}
	ts := time.Now()
	if _, err := c.SaveCheckpoint(ctx, dir, uri, control.DurabilityLocal); err != nil {
		return 0, 0, 0, err
	}
	t1 := time.Now()
	if _, err := c.WaitCheckpoint(ctx, uri, control.DurabilityGCS, 0); err != nil {
		return 0, 0, 0, err
	}
	return t1.Sub(t0).Seconds(), t1.Sub(ts).Seconds(), time.Since(t1).Seconds(), nil
}

// uploadDirect uploads files straight to the bucket under prefix, conns
// at a time, and returns the seconds it took.
func uploadDirect(ctx context.Context, gcs *fetch.GCS, prefix string, files []ckptFile, conns int) (float64, error) {
	t0 := time.Now()
	sem := make(chan struct{}, conns)
	errs := make(chan error, len(files))
	for _, f := range files {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			opt := fetch.WriteOptions{CRC32C: crc32.Checksum(f.data, crc32.MakeTable(crc32.Castagnoli))}
			if len(f.data) > 16<<20 {
				opt.ChunkSize = 16 << 20
			}
			_, err := gcs.Create(ctx, object.Object{Bucket: "bench", Name: prefix + f.name},
				bytes.NewReader(f.data), int64(len(f.data)), opt)
			errs <- err
		}()
	}
	for range len(files) {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return time.Since(t0).Seconds(), nil
}

// prefetchTimed prefetches the dataset under prefix through the daemon and
// returns the seconds it took.
func prefetchTimed(ctx context.Context, c *control.Client, prefix string) (float64, error) {
	t0 := time.Now()
	j, err := c.Prefetch(ctx, "bench", prefix, object.Plan)
	if err != nil {
		return 0, err
	}
	for !j.State.Final() {
		time.Sleep(20 * time.Millisecond)
		if j, err = c.Job(ctx, j.ID); err != nil {
			return 0, err
		}
	}
	if j.State != control.JobDone {
		return 0, fmt.Errorf("prefetch %s: %s: %s", prefix, j.State, j.Error)
	}
	return time.Since(t0).Seconds(), nil
}

func printBenchCheckpoint(w io.Writer, r benchCkptReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(w, "checkpoint C = %s in %d files; link %s/s per connection × %d; ideal upload %.2fs; read dataset %s\n",
		humanize.IBytes(uint64(r.Bytes)), r.Files, humanize.Bytes(r.RateBps), r.Connections, r.IdealUpload,
		humanize.IBytes(uint64(r.ReadBytes)))
	fmt.Fprintln(w, "round  fsync-write  stall (save)  stall/fsync  direct-seq/stall  direct-par/stall  upload  ideal/upload  read-alone  read-during  slowdown")
	ratio := func(a, b float64) string {
		if a == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f×", a/b)
	}
	for i, rd := range r.Rounds {
		fmt.Fprintf(w, "%5d  %10.2fs %5.2fs (%.2fs)  %10.2f×  %16s  %16s  %5.2fs  %11.2f  %9.2fs  %10.2fs  %+7.1f%%\n",
			i+1, rd.FsyncWrite, rd.Stall, rd.StallSave, rd.Stall/rd.FsyncWrite, ratio(rd.DirectSeq, rd.Stall), ratio(rd.DirectPar, rd.Stall),
			rd.Upload, r.IdealUpload/rd.Upload, rd.ReadAlone, rd.ReadDuring, 100*(rd.ReadDuring/rd.ReadAlone-1))
	}
	return nil
}
