package loader

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// Defaults for zero Config fields.
const (
	// DefaultPrefetch is the number of batch buffers (batches in flight
	// and ready) of a zero Config.Prefetch.
	DefaultPrefetch = 4
	// DefaultLookahead is how many shards ahead of the sampler a zero
	// Config.Lookahead opens: enough to keep a few connections busy
	// without a Planner, and to stage, map and prefault each shard well
	// before the sampler reaches it (a mapping costs no memory of its
	// own; its pages are the cache's).
	DefaultLookahead = 4
	// bufferAlign aligns batch buffers: page-aligned memory can be
	// registered for DMA as it is.
	bufferAlign = 4096
)

// Config configures a Loader. New never modifies it.
type Config struct {
	// Dataset is what to read; it must be resolved (see Dataset.Resolve).
	Dataset Dataset
	// BatchSize is the number of samples per batch. Required.
	BatchSize int
	// DropLast drops each epoch's last batch if it is not full. Every
	// rank has the same number of batches either way.
	DropLast bool

	// Shuffle is the sampling mode; the zero value is shard-window.
	Shuffle sampler.Mode
	// Seed seeds the shuffles; each epoch's order depends on (Seed, epoch).
	Seed uint64
	// Window is the shard-window mode's window, in shards. 0 means
	// sampler.DefaultWindow.
	Window int
	// Rank and World shard each epoch across ranks (World 0 means 1);
	// Tail says how an epoch is evened out across them (default: pad by
	// repeating its last samples). See package sampler.
	Rank, World int
	Tail        sampler.Tail
	// Nodes and Node place the rank for the node shuffle mode
	// (sampler.Node): the shards are partitioned across Nodes nodes (0
	// means 1; it must divide World) and this rank reads node Node's
	// partition, dealt among the node's World/Nodes ranks by their place
	// Rank mod World/Nodes. With torchrun's rank numbering Node is
	// sampler.NodeOf(Rank, World, Nodes). Other modes ignore both.
	Nodes, Node int

	// Epoch is the first epoch's number and Epochs how many to run (0
	// means 1); Next returns io.EOF after epoch Epoch+Epochs-1.
	Epoch, Epochs int
	// Resume, if set, starts at its batch instead of the beginning of
	// Config.Epoch: a State saved from a Loader with this configuration
	// (except Rank, which may differ), within [Epoch, Epoch+Epochs).
	Resume *State

	// Prefetch is the number of batch buffers: batches being gathered and
	// ready, beyond those the consumer holds. 0 means DefaultPrefetch.
	Prefetch int
	// Workers is the number of goroutines gathering batches. 0 means
	// GOMAXPROCS, at most Prefetch.
	Workers int
	// Lookahead is how many shards ahead of the sampler's window the
	// Loader stages and opens. 0 means DefaultLookahead; negative means
	// none (shards open when the sampler needs them).
	Lookahead int
	// CopyAlways disables the zero-copy fast path: every batch is
	// gathered into a buffer from NewBuffer.
	CopyAlways bool
	// RecordViews makes a WebDataset batch's fields views of the shards'
	// mappings (Field.Views) instead of copies: the batch then keeps its
	// shards leased until Release.
	RecordViews bool
	// TokenOut is a token dataset's batch element type: 0 means the
	// tokens' own; Int64 (any token type) or Int32 (tokens of at most 16
	// bits, or int32) widens each token as it is gathered, so that a
	// consumer needing int64 indices gets them without a copy of its own.
	TokenOut array.DType
	// FieldBytes bounds a WebDataset field's bytes in one batch when
	// NewBuffer is set (and RecordViews is not): each field is then
	// gathered into two buffers from NewBuffer, BatchSize+1 int64 offsets
	// and FieldBytes bytes of data, allocated in Dataset.Fields order,
	// offsets first. 0 means BatchSize × the field's largest member in
	// the dataset's indexes. A batch whose field holds more fails with an
	// error wrapping ErrFieldBytes. Without NewBuffer the fields grow as
	// needed and FieldBytes is ignored.
	FieldBytes int

	// Planner, if set, is told the access plan (see Planner). PlanID
	// names the plan; "" means a name made from the configuration's
	// fingerprint, the rank and a random suffix.
	Planner Planner
	PlanID  string
	// Stager, if set, stages shards before they are acquired (see Stager).
	Stager Stager

	// NewBuffer, if set, allocates the batch buffers (n bytes each, once,
	// in New, slot after slot, each slot's arrays in order; a WebDataset
	// slot's are its fields' offsets and data, see FieldBytes; buffers
	// must be 8-byte aligned): the seam for gathering straight into pinned
	// staging memory for GPU copies, or into a loader session's ring. nil
	// means page-aligned Go memory.
	NewBuffer func(n int) ([]byte, error)
	// OnBatch, if set, runs in a gathering goroutine after each batch is
	// gathered and before Next returns it: the seam for starting an
	// asynchronous device copy. Batches run it concurrently and out of
	// order; an error fails the batch (and Next returns it).
	OnBatch func(ctx context.Context, b *Batch) error
	// Logger receives errors that have no caller to return to (releasing
	// a lease, an advisory Planner or Stager failure); nil discards them.
	Logger *slog.Logger
}

// settings is a validated Config with defaults applied.
type settings struct {
	Config
	sampler sampler.Config
}

// settings validates c and applies the defaults.
func (c Config) settings() (settings, error) {
	s := settings{Config: c}
	if s.Epochs == 0 {
		s.Epochs = 1
	}
	if s.World == 0 {
		s.World = 1
	}
	if s.Prefetch == 0 {
		s.Prefetch = DefaultPrefetch
	}
	if s.Workers == 0 {
		s.Workers = min(runtime.GOMAXPROCS(0), s.Prefetch)
	}
	switch {
	case s.Lookahead == 0:
		s.Lookahead = DefaultLookahead
	case s.Lookahead < 0:
		s.Lookahead = 0
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case s.BatchSize <= 0:
		return s, fmt.Errorf("%w: batch size %d", ErrConfig, s.BatchSize)
	case s.Epochs < 0 || s.Epoch < 0:
		return s, fmt.Errorf("%w: epochs %d from %d", ErrConfig, s.Epochs, s.Epoch)
	case s.FieldBytes < 0:
		return s, fmt.Errorf("%w: field bytes %d", ErrConfig, s.FieldBytes)
	case s.Prefetch < 0 || s.Workers < 0:
		return s, fmt.Errorf("%w: prefetch %d, workers %d", ErrConfig, s.Prefetch, s.Workers)
	}
	var err error
	if s.Dataset, err = s.Dataset.checked(); err != nil {
		return s, err
	}
	s.sampler = sampler.Config{Mode: s.Shuffle, Seed: s.Seed, Window: s.Window, Rank: s.Rank, World: s.World,
		Tail: s.Tail, Nodes: s.Nodes, Node: s.Node}
	return s, nil
}

// readOptions returns what the dataset's Reader reads by.
func (s settings) readOptions() ReadOptions {
	return ReadOptions{BatchSize: s.BatchSize, TokenOut: s.TokenOut, FieldBytes: s.FieldBytes,
		RecordViews: s.RecordViews, CopyAlways: s.CopyAlways, FixedFields: s.NewBuffer != nil && !s.RecordViews}
}

// fingerprint identifies what the configuration reads and in what order,
// except the rank (and its node): two Loaders with equal fingerprints return the same
// batches at the same State.
func (s settings) fingerprint() uint64 {
	h, sum := newHash()
	s.Dataset.fingerprint(h)
	window := s.Window
	if window == 0 {
		window = sampler.DefaultWindow
	}
	drop := uint64(0)
	if s.DropLast {
		drop = 1
	}
	for _, v := range []uint64{uint64(s.BatchSize), drop, uint64(s.Shuffle), s.Seed, uint64(window),
		uint64(s.World), uint64(s.Tail)} {
		h.u64(v)
	}
	if s.Shuffle == sampler.Node { // other modes' fingerprints stay as they were
		nodes := max(s.Nodes, 1)
		h.u64(uint64(nodes))
	}
	return sum() | 1 // never 0, which means "unchecked" in a State
}
