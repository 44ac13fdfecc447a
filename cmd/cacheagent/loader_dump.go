package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// newLoaderDumpCmd is `cacheagent loader dump`.
func newLoaderDumpCmd(opts *cli.Options) *cobra.Command {
	var lf cli.LoaderFlags
	var batches int
	var out string
	cmd := &cobra.Command{
		Use:   "dump --data gs://BUCKET/PREFIX [--pattern P] [--format F] --batches K --out DIR",
		Short: "Write the first batches a rank reads as .npy files",
		Long: `dump runs the loader with the settings of ` + "`loader ids`" + ` through the cache (the
daemon's, when one answers on the socket) and writes its first --batches batches into
--out as .npy files, for checking against another reader: batch-00000.ids.npy (int64
sample or window ids), then per batch array batch-00000.NAME.npy (token datasets:
batch-00000.tokens.npy, shape (batch, seq-len+1)), and per WebDataset field
batch-00000.FIELD.offsets.npy (int64, batch+1) and batch-00000.FIELD.data.npy (uint8):
field i of sample k is data[offsets[k]:offsets[k+1]].`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batches < 1 || out == "" {
				return fmt.Errorf("give --batches K (at least 1) and --out DIR")
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			ctx := cmd.Context()
			src, err := fetch.NewGCS(ctx, opts.Config().Fetch.GCS())
			if err != nil {
				return err
			}
			defer src.Close()
			run := func(s *mmapstore.Store, idx loader.IndexCache) (err error) {
				defer func() { err = errors.Join(err, s.Close()) }()
				cfg, err := lf.Resolve(ctx, src, loader.FromStore(s), idx)
				if err != nil {
					return err
				}
				return dumpBatches(ctx, loader.FromStore(s), cfg, batches, out)
			}
			idx := wdsIndex(opts)
			return withCache(cmd, opts, func(c *control.Client) error {
				return run(mmapstore.New(c, mmapstore.Config{}), idx)
			}, func(a *cli.Agent) error {
				return run(mmapstore.New(a.Cache.Opener(), mmapstore.Config{}), idx)
			})
		},
	}
	lf.Register(cmd.Flags())
	cmd.Flags().IntVar(&batches, "batches", 1, "how many batches to write")
	cmd.Flags().StringVar(&out, "out", "", "directory to write the .npy files into")
	return cmd
}

// wdsIndex is where WebDataset member indexes are kept: wds-index under
// the cache directory, one file per object generation.
func wdsIndex(opts *cli.Options) loader.IndexCache {
	return loader.DirIndex(filepath.Join(opts.Config().Tiers.Disk.Dir, "wds-index"))
}

// dumpBatches writes the first n batches of a Loader of cfg over src into
// dir.
func dumpBatches(ctx context.Context, src loader.Source, cfg loader.Config, n int, dir string) (err error) {
	l, err := loader.New(src, cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	for i := range n {
		b, err := l.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		err = dumpBatch(b, filepath.Join(dir, fmt.Sprintf("batch-%05d", i)))
		b.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// dumpBatch writes b's files, named from base.
func dumpBatch(b *loader.Batch, base string) error {
	ids := array.Array{DType: array.Int64, Shape: []int{len(b.IDs)}, ByteOrder: array.Little,
		Data: int64Bytes(b.IDs)}
	if err := writeNPY(base+".ids.npy", ids); err != nil {
		return err
	}
	for i, name := range b.Names {
		if err := writeNPY(base+"."+name+".npy", b.Arrays[i]); err != nil {
			return err
		}
	}
	for _, f := range b.Fields {
		offs := f.Offsets
		data := f.Data
		if f.Views != nil { // zero-copy views: lay them out as a copy would
			offs, data = packViews(f.Views)
		}
		o := array.Array{DType: array.Int64, Shape: []int{len(offs)}, ByteOrder: array.Little, Data: int64Bytes(offs)}
		if err := writeNPY(base+"."+f.Name+".offsets.npy", o); err != nil {
			return err
		}
		d := array.Array{DType: array.Uint8, Shape: []int{len(data)}, ByteOrder: array.NotApplicable, Data: data}
		if err := writeNPY(base+"."+f.Name+".data.npy", d); err != nil {
			return err
		}
	}
	return nil
}

// packViews concatenates views into offsets and data.
func packViews(views [][]byte) ([]int64, []byte) {
	offs := make([]int64, 1, len(views)+1)
	var data []byte
	for _, v := range views {
		data = append(data, v...)
		offs = append(offs, int64(len(data)))
	}
	return offs, data
}

// int64Bytes returns the little-endian bytes of v.
func int64Bytes(v []int64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return b
}

// writeNPY writes a (a C-order array) to path as a .npy file.
func writeNPY(path string, a array.Array) error {
	d, err := descr(a.DType, a.ByteOrder)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	buf := append(synth.NPYHeader(d, a.Shape), a.Data...)
	return os.WriteFile(path, buf, 0o644)
}

// descr returns numpy's type string for dt in byte order bo (the host's
// for multi-byte types without one).
func descr(dt array.DType, bo array.ByteOrder) (string, error) {
	if bo == array.NotApplicable {
		bo = array.HostByteOrder()
	}
	s, ok := dt.Typestr(bo)
	if !ok {
		return "", fmt.Errorf("no numpy type for %s", dt)
	}
	return s, nil
}
