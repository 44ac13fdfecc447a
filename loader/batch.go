package loader

import (
	"sync/atomic"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Batch is one batch of samples: for each array name, the rows of the
// batch's samples, contiguous, in sample order. A Batch and its arrays are
// lent by the Loader: valid until Release, never to be modified.
type Batch struct {
	// Epoch and Index place the batch: the Index-th batch of Epoch.
	Epoch, Index int
	// IDs are the samples' ids (row numbers across the dataset), in order.
	IDs []int64
	// Names are the arrays' names: Dataset.Names, or TokensName for a
	// token dataset, or none for a WebDataset dataset (see Fields).
	Names []string
	// Arrays hold one array per name, in Names order, each in C order with
	// shape [len(IDs), row shape...] and the dataset's element type.
	Arrays []array.Array
	// ZeroCopy reports that Arrays alias the shard's mapping instead of a
	// batch buffer (the batch is a contiguous run of rows of one shard);
	// the batch then keeps the shard leased until Release.
	ZeroCopy bool
	// Fields hold a WebDataset batch's fields (Dataset.Fields order),
	// variable-length bytes per sample; Names and Arrays are then empty.
	Fields []Field

	s *slot
}

// Field is one field of a WebDataset batch, in Arrow's binary layout:
// sample i's value is Data[Offsets[i]:Offsets[i+1]], empty for a sample
// without the field. With Config.RecordViews, Offsets and Data are nil and
// Views[i] is sample i's value aliasing the shard's mapping (nil if the
// sample lacks the field); the batch then keeps its shards leased until
// Release.
type Field struct {
	Name    string
	Offsets []int64
	Data    []byte
	Views   [][]byte
}

// Len returns the number of samples.
func (b *Batch) Len() int { return len(b.IDs) }

// Array returns the array called name.
func (b *Batch) Array(name string) (array.Array, bool) {
	for i, n := range b.Names {
		if n == name {
			return b.Arrays[i], true
		}
	}
	return array.Array{}, false
}

// Release gives the batch's buffer back to the Loader (and, for a
// zero-copy batch, its lease on the shard). The Batch must not be used
// afterwards. Releasing twice does nothing. It may be called from any
// goroutine, also after the Loader is closed.
func (b *Batch) Release() {
	s := b.s
	if s == nil || !s.out.CompareAndSwap(true, false) {
		return
	}
	s.l.releaseSlot(s)
}

// slot is one batch buffer and the state of the batch it holds. The
// dispatcher fills the sampling fields, a worker gathers, and Next hands
// the batch out; channels order these steps, so only out and refsHeld
// (guarded by table.mu) are shared.
type slot struct {
	l      *Loader
	batch  Batch
	gather Gather   // the Reader's view of the batch: buffers, shapes, scratch
	picks  []Pick   // per sample: Pick.Shard indexes groups
	groups []*group // the distinct shards the batch reads
	// refsHeld: the slot holds one reference on each of groups. Guarded
	// by table.mu.
	refsHeld bool
	ready    chan struct{} // the worker's signal to Next (capacity 1)
	err      error
	tl       timeline
	out      atomic.Bool // handed out by Next and not yet released
}

// reset empties s for batch index of epoch.
func (s *slot) reset(epoch, index int) {
	s.batch.Epoch, s.batch.Index = epoch, index
	s.batch.IDs = s.batch.IDs[:0]
	s.batch.ZeroCopy = false
	s.picks = s.picks[:0]
	clear(s.groups)
	s.groups = s.groups[:0]
	s.err = nil
	s.tl.reset()
}
