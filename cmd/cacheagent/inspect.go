package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/npy"
	"github.com/cacheagent/cacheagent/object"
)

// inspectReport is what `cacheagent inspect` prints: the layout of an
// object of any format inspect reads (.npy, .safetensors, a Megatron .idx,
// an llm.c token shard, a WebDataset tar).
type inspectReport struct {
	Object     string `json:"object"`
	Generation int64  `json:"generation"`
	Size       int64  `json:"size"`
	Format     string `json:"format"` // npy, safetensors, megatron, tokens or webdataset
	// DataOffset is where the data section starts in the file.
	DataOffset int64 `json:"data_offset"`
	// Version and Descr are the npy format version and dtype string.
	Version string `json:"version,omitempty"`
	Descr   string `json:"descr,omitempty"`
	// Array describes a .npy file's array.
	Array *arrayReport `json:"array,omitempty"`
	// Tensors describes a .safetensors file's tensors, in data order.
	Tensors []arrayReport `json:"tensors,omitempty"`
	// Metadata is a .safetensors file's __metadata__.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Megatron, Tokens and Tar describe the token and record formats.
	Megatron *megatronReport `json:"megatron,omitempty"`
	Tokens   *tokensReport   `json:"tokens,omitempty"`
	Tar      *tarReport      `json:"tar,omitempty"`
}

// arrayReport describes one array or tensor.
type arrayReport struct {
	Name      string `json:"name,omitempty"`
	DType     string `json:"dtype"`
	ByteOrder string `json:"byte_order"`
	Shape     []int  `json:"shape"`
	Order     string `json:"order"`
	// Offset is the file offset of the first data byte; Bytes the data size.
	Offset int64 `json:"offset"`
	Bytes  int64 `json:"bytes"`
	// DataOffsets are a tensor's [begin, end) relative to the data section,
	// as the safetensors header gives them.
	DataOffsets *[2]int64 `json:"data_offsets,omitempty"`
}

func newInspectCmd(opts *cli.Options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect gs://BUCKET/OBJECT",
		Short: "Show the layout of a .npy, .safetensors, Megatron .idx, llm.c token or WebDataset .tar object",
		Long: `inspect maps the object through the cache (the daemon's, when one answers on the
socket), downloading it first if needed, and prints its layout:
  .npy           the dtype, shape, memory order and data offset
  .safetensors   each tensor's name, dtype, shape and offsets, and the metadata
  Megatron .idx  the token type, sequences, documents and tokens
  llm.c shard    the token type, tokens, version and header size (headerless
                 token files have nothing to show)
  WebDataset tar the members, samples and fields
The format is recognised by content (magic numbers, headers), then by name (.tar).
A malformed file fails with the reason.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := object.ParseObject(args[0])
			if err != nil {
				return err
			}
			var rep inspectReport
			err = withCache(cmd, opts, func(c *control.Client) (err error) {
				rep, err = inspectWith(cmd.Context(), c, o)
				return err
			}, func(a *cli.Agent) (err error) {
				rep, err = inspectWith(cmd.Context(), a.Cache.Opener(), o)
				return err
			})
			if err != nil {
				return fmt.Errorf("inspect %s: %w", o, err)
			}
			if asJSON {
				return cli.WriteJSON(cmd.OutOrStdout(), rep)
			}
			return printInspect(cmd.OutOrStdout(), rep)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// inspectWith describes o, mapped through a Store over op: the daemon's
// leases, or the cache directory itself.
func inspectWith[F mmapstore.File](ctx context.Context, op mmapstore.Opener[F], o object.Object) (inspectReport, error) {
	s := mmapstore.New(op, mmapstore.Config{})
	rep, err := inspectObject(ctx, s, o)
	return rep, errors.Join(err, s.Close())
}

// inspectObject describes o, read through s.
func inspectObject(ctx context.Context, s *mmapstore.Store, o object.Object) (rep inspectReport, err error) {
	l, err := s.Acquire(ctx, o)
	if err != nil {
		return inspectReport{}, err
	}
	defer func() { err = errors.Join(err, l.Release()) }()
	at := l.Attrs()
	rep = inspectReport{Object: at.Object.String(), Generation: at.Generation, Size: at.Size}
	switch f := mmapstore.Detect(o.Name, l.Bytes()); f {
	case mmapstore.NPY:
		h, err := npy.ParseHeader(l.Bytes())
		if err != nil {
			return inspectReport{}, err
		}
		a, err := l.Array()
		if err != nil {
			return inspectReport{}, err
		}
		ar := describe("", a)
		rep.Format, rep.DataOffset, rep.Array = f.String(), a.Offset, &ar
		rep.Version, rep.Descr = fmt.Sprintf("%d.%d", h.Major, h.Minor), h.Descr
	case mmapstore.Safetensors:
		t, err := l.Tensors()
		if err != nil {
			return inspectReport{}, err
		}
		rep.Format, rep.DataOffset, rep.Metadata = f.String(), t.DataOffset, t.Metadata
		rep.Tensors = make([]arrayReport, len(t.Names))
		for i, name := range t.Names {
			a := t.Tensors[name]
			ar := describe(name, a)
			ar.DataOffsets = &[2]int64{a.Offset - t.DataOffset, a.Offset - t.DataOffset + int64(len(a.Data))}
			rep.Tensors[i] = ar
		}
	default:
		if ok, err := inspectOther(&rep, o.Name, l.Bytes()); ok || err != nil {
			return rep, err
		}
		return inspectReport{}, fmt.Errorf("%w: not .npy, .safetensors, a Megatron .idx, an llm.c shard or a tar", mmapstore.ErrFormat)
	}
	return rep, nil
}

// describe reports array a, named name.
func describe(name string, a array.Array) arrayReport {
	return arrayReport{Name: name, DType: a.DType.String(), ByteOrder: a.ByteOrder.String(),
		Shape: append([]int{}, a.Shape...), Order: a.Order.String(), Offset: a.Offset, Bytes: int64(len(a.Data))}
}

// printInspect prints rep as aligned text.
func printInspect(w io.Writer, rep inspectReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "object\t%s\n", rep.Object)
	fmt.Fprintf(tw, "size\t%d bytes\n", rep.Size)
	if rep.Megatron != nil || rep.Tokens != nil || rep.Tar != nil {
		printOther(tw, rep)
		return tw.Flush()
	}
	if a := rep.Array; a != nil {
		fmt.Fprintf(tw, "format\tnpy %s\n", rep.Version)
		fmt.Fprintf(tw, "dtype\t%s (%s, %s)\n", a.DType, rep.Descr, a.ByteOrder)
		fmt.Fprintf(tw, "shape\t%s\n", shapeString(a.Shape))
		fmt.Fprintf(tw, "order\t%s\n", a.Order)
		fmt.Fprintf(tw, "data offset\t%d\n", a.Offset)
		fmt.Fprintf(tw, "data size\t%d bytes\n", a.Bytes)
		return tw.Flush()
	}
	fmt.Fprintf(tw, "format\t%s, %d tensors\n", rep.Format, len(rep.Tensors))
	fmt.Fprintf(tw, "data offset\t%d\n", rep.DataOffset)
	for _, k := range slices.Sorted(maps.Keys(rep.Metadata)) {
		fmt.Fprintf(tw, "metadata\t%s = %s\n", printable(k), printable(rep.Metadata[k]))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDTYPE\tSHAPE\tDATA_OFFSETS\tFILE_OFFSET")
	for _, t := range rep.Tensors {
		fmt.Fprintf(tw, "%s\t%s\t%s\t[%d, %d]\t%d\n", printable(t.Name), t.DType, shapeString(t.Shape),
			t.DataOffsets[0], t.DataOffsets[1], t.Offset)
	}
	return tw.Flush()
}

// shapeString formats a shape as numpy does: (3, 4), (5,) or ().
func shapeString(shape []int) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.Itoa(d)
	}
	if len(shape) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// printable quotes s if it holds control characters (tabs, newlines), so
// names from untrusted files cannot break the table.
func printable(s string) string {
	if strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}
