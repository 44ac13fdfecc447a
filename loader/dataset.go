package loader

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
)

// Dataset is what a Loader reads: a list of groups (shards), each a set of
// named arrays with the same number of rows (leading dimension). Sample i
// of the dataset is row i of the concatenation of the groups, in order.
// Build one with FromPattern or ParseManifest (then Resolve), or by hand.
type Dataset struct {
	// Names are the arrays every group holds, e.g. ["x", "y"]. A Batch
	// holds one array per name, in this order.
	Names []string
	// Groups are the shards.
	Groups []Group
	// Specs describe each named array (index-aligned with Names): element
	// type and row shape, the same in every group. Resolve fills them in.
	// Token datasets have none.
	Specs []Spec
	// Format is the shards' file format; nil means NPY.
	Format Format
	// Token describes the windows of a token dataset (formats "tokens"
	// and "megatron"); see the package documentation, Token windows.
	Token TokenSpec
	// Fields are a WebDataset dataset's field names ("jpg", "json"…), the
	// union over its shards, first seen first: a Batch holds these.
	Fields []string
}

// Group is one shard: one .npy object per array name.
type Group struct {
	// Objects holds one object per name, index-aligned with Dataset.Names.
	// A non-zero Generation pins the object's version.
	Objects []object.Object
	// Rows is the leading dimension shared by the group's arrays; 0 means
	// unknown until Resolve reads the headers. For a token dataset it is
	// derived from the token counts (the windows starting in the shard).
	Rows int
	// Tokens is a token dataset's token count in the shard.
	Tokens int64
	// Index is the format's index of the shard, built with the dataset
	// (a WebDataset tar's member index, *webdataset.Shard); nil means the
	// format builds it when it opens the shard, if it needs one.
	Index any
}

// TokenSpec describes a token dataset's windows (see package doc, Token
// windows).
type TokenSpec struct {
	// DType is the tokens' element type, from the Spec's token type, an
	// llm.c header or a Megatron index.
	DType array.DType
	// SeqLen is L: each sample is a window of L+1 tokens.
	SeqLen int
}

// Spec describes one named array of every group.
type Spec struct {
	// DType is the element type.
	DType array.DType
	// ByteOrder is the elements' byte order (NotApplicable for bytes).
	ByteOrder array.ByteOrder
	// Row is the shape of one row: the array's shape without its leading
	// dimension. Empty for 1-d arrays (a row is one element).
	Row []int
}

// RowSize returns the size of one row in bytes.
func (s Spec) RowSize() int {
	n, _ := array.DataSize(s.DType, s.Row)
	return n
}

// equal reports whether s and o describe the same rows.
func (s Spec) equal(o Spec) bool {
	return s.DType == o.DType && s.ByteOrder == o.ByteOrder && slices.Equal(s.Row, o.Row)
}

// String describes the spec as "float32 (little) rows of (3, 4)".
func (s Spec) String() string {
	return fmt.Sprintf("%s (%s) rows of %v", s.DType, s.ByteOrder, s.Row)
}

// Rows returns the row count of every group, and the total.
func (d Dataset) Rows() ([]int, int64) {
	rows := make([]int, len(d.Groups))
	var n int64
	for i, g := range d.Groups {
		rows[i] = g.Rows
		n += int64(g.Rows)
	}
	return rows, n
}

// Validate checks the dataset's structure: unique non-empty names, every
// group with one object per name and a non-negative row count, and what
// its format checks (Format.Check: for NPY, specs, if present, for every
// name with a valid element type and row shape). It does not read any
// object. Errors wrap ErrDataset.
func (d Dataset) Validate() error {
	_, err := d.checked()
	return err
}

// checked validates d and returns it as its format's Check does.
func (d Dataset) checked() (Dataset, error) {
	if err := d.checkStructure(); err != nil {
		return Dataset{}, err
	}
	return d.format().Check(d)
}

// checkStructure is the format-independent part of Validate.
func (d Dataset) checkStructure() error {
	if len(d.Names) == 0 {
		return fmt.Errorf("%w: no array names", ErrDataset)
	}
	for i, n := range d.Names {
		if n == "" || slices.Contains(d.Names[:i], n) {
			return fmt.Errorf("%w: array name %q is empty or repeated", ErrDataset, n)
		}
	}
	if len(d.Groups) == 0 {
		return fmt.Errorf("%w: no shards", ErrDataset)
	}
	for i, g := range d.Groups {
		if len(g.Objects) != len(d.Names) {
			return fmt.Errorf("%w: shard %d has %d objects for %d arrays", ErrDataset, i, len(g.Objects), len(d.Names))
		}
		for j, o := range g.Objects {
			if o.Bucket == "" || o.Name == "" {
				return fmt.Errorf("%w: shard %d array %s: object %q has no bucket or name", ErrDataset, i, d.Names[j], o)
			}
		}
		if g.Rows < 0 {
			return fmt.Errorf("%w: shard %d has %d rows", ErrDataset, i, g.Rows)
		}
	}
	return nil
}

// format returns d's format: Format, or NPY.
func (d Dataset) format() Format {
	if d.Format == nil {
		return NPY
	}
	return d.Format
}

// FormatName returns the name of d's format ("npy" for a nil Format).
func (d Dataset) FormatName() string { return d.format().Name() }

// isNPY reports whether d's format is NPY.
func (d Dataset) isNPY() bool { return d.format().Name() == NPY.Name() }

// resolved reports whether every group's rows and every spec of an NPY
// dataset are known.
func (d Dataset) resolved() bool {
	if len(d.Specs) != len(d.Names) {
		return false
	}
	for _, g := range d.Groups {
		if g.Rows == 0 {
			return false
		}
	}
	return true
}

// legacyFormatCodes are the numbers fingerprints hashed for the formats
// other than NPY before formats had names: kept, so that a State saved
// then still resumes. Other formats hash their name.
var legacyFormatCodes = map[string]uint64{"tokens": 1, "megatron": 2, "webdataset": 3}

// fingerprint hashes the dataset's identity: names, objects and rows.
func (d Dataset) fingerprint(h hashWriter) {
	for _, n := range d.Names {
		h.str(n)
	}
	for _, g := range d.Groups {
		for _, o := range g.Objects {
			h.str(o.Bucket)
			h.str(o.Name)
			h.u64(uint64(o.Generation))
		}
		h.u64(uint64(g.Rows))
		if !d.isNPY() { // npy fingerprints stay as they were
			h.u64(uint64(g.Tokens))
		}
	}
	if !d.isNPY() {
		if code, ok := legacyFormatCodes[d.Format.Name()]; ok {
			h.u64(code)
		} else {
			h.str(d.Format.Name())
		}
		h.u64(uint64(d.Token.DType))
		h.u64(uint64(d.Token.SeqLen))
		for _, f := range d.Fields {
			h.str(f)
		}
	}
}

// hashWriter feeds values into an FNV-1a hash unambiguously.
type hashWriter struct {
	h interface{ Write([]byte) (int, error) }
}

// newHash returns a writer into a fresh FNV-1a hash, and its sum.
func newHash() (hashWriter, func() uint64) {
	h := fnv.New64a()
	return hashWriter{h}, h.Sum64
}

// u64 writes v.
func (w hashWriter) u64(v uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	w.h.Write(b[:])
}

// str writes s, prefixed by its length.
func (w hashWriter) str(s string) {
	w.u64(uint64(len(s)))
	w.h.Write([]byte(s))
}
