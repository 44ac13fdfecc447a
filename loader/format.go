package loader

import (
	"context"
	"fmt"
	"strings"

	"github.com/cacheagent/cacheagent/internal/memhint"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
)

// Format is one file layout of a dataset's shards: it builds a dataset of
// them, says what a batch of it holds, opens its shards and gathers its
// batches. The Loader knows formats only through this interface: NPY is
// its own (the default, and what manifests list); the others live in
// packages of their own under loader/formats, which lists them all.
// Implementations are stateless values, safe for concurrent use.
type Format interface {
	// Name is the format's name in a Spec ("npy", "tokens", …): lower
	// case, unique among the formats.
	Name() string
	// Guess reports whether a Spec that names no format means this one
	// (from its pattern and settings). Formats are asked in the order
	// they are listed; NPY, the fallback, says yes to anything.
	Guess(sp spec.Spec) bool
	// Build lists the objects of loc and builds the dataset they make,
	// reading what numbering the samples needs (headers, indexes) through
	// env. Errors name the object and wrap ErrDataset or ErrPattern, or
	// the source's errors.
	Build(ctx context.Context, env Env, loc Location, sp spec.Spec) (Dataset, error)
	// Check checks d's format-specific structure, reading nothing, and
	// returns d with what derives from it filled in (a token dataset's
	// rows from its token counts). Errors wrap ErrDataset.
	Check(d Dataset) (Dataset, error)
	// NewReader prepares one Loader's reading of d (checked): its batch
	// layout and how to open and gather its shards. Errors wrap ErrConfig
	// or ErrDataset.
	NewReader(d Dataset, o ReadOptions) (Reader, error)
}

// Location is where a pattern dataset's objects are: those of Bucket
// whose names, after Prefix, match Pattern (see FromPattern).
type Location struct {
	Bucket, Prefix, Pattern string
}

// Env is what building a dataset reads through.
type Env struct {
	// Source lists the dataset and serves small ranged reads of headers
	// (not through the cache).
	Source object.Source
	// Records lends whole shards to formats that must read them to
	// number their samples (a WebDataset tar's member index), through the
	// cache so the data is fetched once; nil means such formats fail with
	// ErrNoRecords unless Index holds every index.
	Records Source
	// Index, if set, keeps the indexes formats build of their shards
	// across runs.
	Index IndexCache
	// Formats are the formats a Spec may name or guess, in guessing order
	// (loader/formats.All); nil means NPY alone.
	Formats []Format
}

// ReadOptions are the settings of a Config a Reader reads by.
type ReadOptions struct {
	// BatchSize is the most samples of a batch.
	BatchSize int
	// TokenOut, FieldBytes, RecordViews and CopyAlways are Config's.
	TokenOut    array.DType
	FieldBytes  int
	RecordViews bool
	CopyAlways  bool
	// FixedFields says variable-length fields are gathered into fixed
	// buffers (Config.NewBuffer is set and RecordViews is not), so
	// Layout.Fields must give their sizes.
	FixedFields bool
}

// Reader is one Loader's reading of one dataset, made by its Format's
// NewReader. Open and Gather run on many goroutines at once.
type Reader interface {
	// Layout says what every batch holds.
	Layout() Layout
	// Objects returns the objects an opening of shard i acquires, in
	// order: the Loader plans and stages them before Open.
	Objects(i int) []object.Object
	// Open acquires shard i's objects through src and checks them against
	// the dataset. On error it releases what it acquired.
	Open(ctx context.Context, src Source, i int) (Shard, error)
	// Gather fills g.Batch's arrays or fields with the samples g.Picks
	// name, from g.Shards.
	Gather(g *Gather) error
}

// Shard is one opened shard: what a Reader's Open acquired.
type Shard interface {
	// Leases returns the shard's leases; the Loader releases them once
	// no batch reads the shard.
	Leases() []Lease
}

// Layout is what every batch of a Reader holds: fixed-size arrays of
// BatchSize rows (Batch.Arrays), then variable-length fields
// (Batch.Fields). The daemon maps it to a loader session's ring arrays
// without knowing formats.
type Layout struct {
	Arrays []ArrayLayout
	Fields []FieldLayout
}

// ArrayLayout is one fixed-size array of a batch: its name and the spec of
// its rows.
type ArrayLayout struct {
	Name string
	Spec
}

// FieldLayout is one variable-length field of a batch: sample i's value
// is Data[Offsets[i]:Offsets[i+1]]. Bytes is the data buffer's size when
// fields are gathered into fixed buffers (ReadOptions.FixedFields), else 0.
type FieldLayout struct {
	Name  string
	Bytes int
}

// Gather is one batch to gather: the Loader sets the batch's place, ids,
// picks, shards and buffers; the Reader fills the batch and says what it
// copied.
type Gather struct {
	// Batch is the batch: Epoch, Index and IDs are set; its Arrays (one
	// per Layout.Arrays) and Fields (one per Layout.Fields, Name set,
	// Offsets and Data empty over their buffers when FixedFields) are the
	// Reader's to fill; ZeroCopy its to set.
	Batch *Batch
	// Picks locate each sample: an index into Shards and a row.
	Picks []Pick
	// Shards are the distinct shards the batch reads, opened by Open.
	Shards []Shard
	// Buffers hold one buffer per Layout.Arrays, of BatchSize rows.
	Buffers [][]byte
	// Shapes hold one shape per Layout.Arrays, [0, row shape...], to set
	// and use as the arrays' shapes (no allocation per batch).
	Shapes [][]int
	// Scratch is the Reader's own, kept with the batch's slot from one
	// batch to the next (a Gather is never shared by two goroutines).
	Scratch any
	// Copied is set by Gather: the bytes it copied, for Stats.
	Copied int64
	// Keep is set by Gather when the batch aliases its shards' mappings
	// (zero-copy): the Loader then keeps the shards until Release.
	Keep bool
}

// Pick locates one sample: its shard's index in Gather.Shards, and its
// row (sample number within the shard).
type Pick struct {
	Shard, Row int
}

// BytesLease is a Lease that also lends the object's raw bytes, which the
// formats other than NPY read (mmapstore.Lease and Direct's leases are).
type BytesLease interface {
	Lease
	// Bytes returns the object's bytes, valid until Release.
	Bytes() []byte
}

// LeaseBytes returns the bytes of ls, or an error wrapping ErrConfig if the
// Source's leases do not lend bytes.
func LeaseBytes(ls Lease, o object.Object) ([]byte, error) {
	bl, ok := ls.(BytesLease)
	if !ok {
		return nil, fmt.Errorf("%w: the Source's leases do not lend bytes: cannot read %s", ErrConfig, o)
	}
	return bl.Bytes(), nil
}

// populator is a Lease whose mapping can be populated once for all its
// leases (mmapstore.Lease): see mmapstore.Lease.Populate.
type populator interface{ Populate() }

var _ populator = mmapstore.Lease{}

// Populate maps the pages of data, a shard's bytes lent by ls, into the
// process ahead of the gather (which would otherwise take a page fault
// every few rows): once per mapping where the lease can tell, else on every
// opening. Readers call it from Open.
func Populate(ls Lease, data []byte) {
	if p, ok := ls.(populator); ok {
		p.Populate()
		return
	}
	memhint.Pages(data)
}

// ReleaseAll releases leases and returns err: a Reader's Open failing
// after it acquired some.
func ReleaseAll(leases []Lease, err error) error {
	for _, ls := range leases {
		ls.Release()
	}
	return err
}

// lookup returns the format sp names, or the first of formats (then NPY)
// that guesses it.
func lookup(sp spec.Spec, formats []Format) (Format, error) {
	if len(formats) == 0 {
		formats = []Format{NPY}
	}
	if sp.Format == "" {
		for _, f := range formats {
			if f.Guess(sp) {
				return f, nil
			}
		}
		return NPY, nil
	}
	names := make([]string, len(formats))
	for i, f := range formats {
		if f.Name() == sp.Format {
			return f, nil
		}
		names[i] = f.Name()
	}
	return nil, fmt.Errorf("%w: format %q (want %s)", ErrConfig, sp.Format, strings.Join(names, ", "))
}
