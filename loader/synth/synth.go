// Package synth makes synthetic datasets of .npy shards for tests,
// benchmarks and demos: shard files whose rows encode their sample ids, so
// any batch can be checked byte for byte.
//
// A Dataset has, for each shard, an "x" array of shape (rows, RowBytes) and
// element type uint8, where every row is its sample id as 8 little-endian
// bytes repeated (truncated to RowBytes), and a "y" array of shape (rows,)
// and type int64 holding the ids. Sample ids number the rows of all shards
// in order.
package synth

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NPYHeader returns the header of a version 1.0 .npy file holding a
// C-order array of element type descr (e.g. "|u1", "<i8", "<f4") and the
// given shape, padded so that the data starts at a multiple of 64 bytes.
func NPYHeader(descr string, shape []int) []byte {
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = strconv.Itoa(d)
	}
	tuple := "(" + strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	tuple += ")"
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, tuple)
	pad := 64 - (10+len(dict)+1)%64
	if pad == 64 {
		pad = 0
	}
	dict += strings.Repeat(" ", pad) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(dict)), byte(len(dict)>>8))
	return append(b, dict...)
}

// Dataset describes a synthetic dataset.
type Dataset struct {
	// Rows holds each shard's number of rows.
	Rows []int
	// RowBytes is the size of one row of x.
	RowBytes int
}

// Uniform returns a dataset of shards shards of rows rows each.
func Uniform(shards, rows, rowBytes int) Dataset {
	d := Dataset{Rows: make([]int, shards), RowBytes: rowBytes}
	for i := range d.Rows {
		d.Rows[i] = rows
	}
	return d
}

// First returns the id of shard i's first row.
func (d Dataset) First(i int) int64 {
	var n int64
	for _, r := range d.Rows[:i] {
		n += int64(r)
	}
	return n
}

// Samples returns the number of samples.
func (d Dataset) Samples() int64 { return d.First(len(d.Rows)) }

// FillRow writes the content of sample id's x row into row.
func FillRow(row []byte, id int64) {
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], uint64(id))
	for i := 0; i < len(row); i += 8 {
		copy(row[i:], w[:])
	}
}

// RowID returns the id encoded in an x row of at least 8 bytes (the low
// bytes only for shorter rows).
func RowID(row []byte) int64 {
	var w [8]byte
	copy(w[:], row)
	return int64(binary.LittleEndian.Uint64(w[:]))
}

// X returns shard i's x file.
func (d Dataset) X(i int) []byte {
	rows, first := d.Rows[i], d.First(i)
	b := NPYHeader("|u1", []int{rows, d.RowBytes})
	h := len(b)
	b = append(b, make([]byte, rows*d.RowBytes)...)
	for r := range rows {
		FillRow(b[h+r*d.RowBytes:h+(r+1)*d.RowBytes], first+int64(r))
	}
	return b
}

// Y returns shard i's y file.
func (d Dataset) Y(i int) []byte {
	rows, first := d.Rows[i], d.First(i)
	b := NPYHeader("<i8", []int{rows})
	for r := range rows {
		b = binary.LittleEndian.AppendUint64(b, uint64(first+int64(r)))
	}
	return b
}

// Pattern is the file pattern of the shards' names, for loader.FromPattern.
const Pattern = "shard-*.{x,y}.npy"

// Name returns the object name of shard i's array ("x" or "y") under
// prefix.
func Name(prefix string, i int, array string) string {
	return fmt.Sprintf("%sshard-%05d.%s.npy", prefix, i, array)
}

// Write calls put for every file of the dataset, named under prefix.
func (d Dataset) Write(prefix string, put func(name string, data []byte) error) error {
	for i := range d.Rows {
		if err := put(Name(prefix, i, "x"), d.X(i)); err != nil {
			return err
		}
		if err := put(Name(prefix, i, "y"), d.Y(i)); err != nil {
			return err
		}
	}
	return nil
}

// WriteDir writes the dataset into root in fetch.Dir's layout:
// root/bucket/prefix/shard-00000.x.npy and so on.
func (d Dataset) WriteDir(root, bucket, prefix string) error {
	return d.Write(prefix, func(name string, data []byte) error {
		p := filepath.Join(root, bucket, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, data, 0o644)
	})
}
