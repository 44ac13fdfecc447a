package loader

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/mmapstore/webdataset"
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
	// Format is the shards' file format; the zero value is FormatNPY.
	Format Format
	// Token describes the windows of a token dataset (FormatTokens,
	// FormatMegatron); see the package documentation, Token windows.
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
	// Index is a WebDataset shard's member index (FromPatternWith sets
	// it); nil means the Loader indexes the tar when it opens it.
	Index *webdataset.Shard
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
// group with one object per name and a non-negative row count, and specs
// (if present) for every name with a valid element type and row shape. It
// does not read any object. Errors wrap ErrDataset.
func (d Dataset) Validate() error {
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
	if d.Format.tokens() {
		return d.validateTokens()
	}
	if d.Format == FormatWebDataset {
		return d.validateRecords()
	}
	if d.Specs == nil {
		return nil
	}
	if len(d.Specs) != len(d.Names) {
		return fmt.Errorf("%w: %d specs for %d arrays", ErrDataset, len(d.Specs), len(d.Names))
	}
	for j, s := range d.Specs {
		if _, ok := array.DataSize(s.DType, s.Row); !ok {
			return fmt.Errorf("%w: array %s: invalid spec %s", ErrDataset, d.Names[j], s)
		}
	}
	return nil
}

// resolved reports whether every group's rows and every spec are known.
func (d Dataset) resolved() bool {
	if d.Format != FormatNPY {
		return true // token counts and sample counts are known once valid
	}
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
		if d.Format != FormatNPY { // npy fingerprints stay as they were
			h.u64(uint64(g.Tokens))
		}
	}
	if d.Format != FormatNPY {
		h.u64(uint64(d.Format))
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
