// Package loader feeds training loops: it reads a dataset of .npy shards
// through the cache in shuffled, rank-sharded batches, gathering rows into
// reusable buffers ahead of the consumer, and can resume mid-epoch exactly
// where a checkpoint left off.
//
// # Usage
//
//	ds, err := loader.FromPattern(ctx, src, "bucket", "train/", "shard-*.{x,y}.npy")
//	…
//	store := mmapstore.New(cache.Opener(), mmapstore.Config{})
//	l, err := loader.New(loader.FromStore(store), loader.Config{Dataset: ds, BatchSize: 256,
//		Seed: 1, Rank: rank, World: world, Epochs: 10,
//		Planner: cache, Stager: cache.Stager()})
//	…
//	defer l.Close()
//	for {
//		b, err := l.Next(ctx)
//		if err == io.EOF {
//			break
//		}
//		…
//		x, _ := b.Array("x") // rows of the batch's samples, contiguous
//		train(x, b.IDs)
//		b.Release()
//		checkpoint(l.State()) // resume with Config.Resume = &state
//	}
//
// # Datasets
//
// A Dataset is a list of shards, each a set of named .npy arrays with the
// same leading dimension (x and y, say); sample i is row i of the shards'
// concatenation. FromPattern lists a prefix and groups objects by a
// pattern's "*"; ParseManifest reads a JSON manifest (then Resolve). Both
// validate: arrays of a shard with different row counts, a shard missing an
// array, or arrays whose element type or row shape differ between shards
// are clear errors (ErrDataset), and the Loader checks every shard again
// when it opens it.
//
// # Token windows and records
//
// FromPatternWith also reads token datasets (FormatTokens: raw token files
// or llm.c shards; FormatMegatron: .bin/.idx pairs) and WebDataset tars
// (FormatWebDataset). A token dataset's samples are windows: with T tokens
// in the shards' streams concatenated in shard order and window length L
// (TokenSpec.SeqLen), window k is tokens [kL, kL+L+1), for k below
// floor((T-1)/L); windows cross file and document boundaries, and a shard's
// rows for the sampler are the windows starting in it. A batch holds one
// array, TokensName, of shape (batch, L+1), always copied (windows overlap
// by a token). A WebDataset batch holds Batch.Fields, variable-length
// bytes per sample, copied or (Config.RecordViews) views of the mapping;
// with Config.NewBuffer the copies go into fixed buffers from it
// (Config.FieldBytes).
// docs/architecture.md states the construction exactly.
//
// # Order
//
// Package sampler decides the order: sequential, global (a permutation of
// all samples: 4 bytes per sample, and the Loader keeps up to three epochs'
// permutations, since it builds each one an epoch ahead) or shard-window (the default: a shuffled shard order read
// through a sliding window of shards, which bounds the working set), all
// seeded by (Seed, epoch); rank r of World reads every World-th sample of
// the epoch's order, so ranks are disjoint, and every rank reads as many
// samples (the epoch is padded by wrapping, or its tail dropped) so
// collective training never waits on a rank with fewer batches. The node
// mode (sampler.Node, Config.Nodes and Node) is shard-window over a
// node-fixed partition of the shards: each node's ranks read, and plan,
// only their node's share, and every rank of the world still reads as
// many samples. The same Config gives the same batches on every run; State and Config.Resume
// continue a run from any batch.
//
// # Pipeline
//
// New starts three kinds of goroutines, all owned by the Loader and waited
// for by Close: the dispatcher runs the sampler and fills batch slots
// (Config.Prefetch of them, allocated once) in order, and builds each
// epoch's order on a short-lived goroutine of its own an epoch ahead; the opener stages
// (Stager), acquires (Source) and checks the shards the sampler will need,
// Config.Lookahead shards ahead, and holds each one exactly while it is in
// the sampler's window or a batch still reads it; Config.Workers gatherers
// copy each batch's rows into its slot's contiguous buffers. Next returns
// batches in order. A batch that is a contiguous run of rows of one shard
// is not copied: its arrays alias the shard's mapping (Batch.ZeroCopy),
// and the batch keeps the shard leased until released.
//
// The GPU path plugs in through two seams: Config.NewBuffer allocates the
// slots' buffers (pinned staging memory, say), and Config.OnBatch runs on
// each gathered batch before Next returns it (to start an asynchronous
// copy to the device).
//
// # The cache
//
// With a Planner (tier.Cache in-process), the Loader announces each
// epoch's shard order, and the next epoch's, and reports its progress, so
// the cache prefetches ahead of it and evicts what is needed last; with a
// Stager (tier.Cache.Stager in-process), each shard is fetched and promoted to shm just
// before it is opened. A token shard's opening also reads the shards its
// last windows run into: both the plan and the staging include them, right
// after the shard's own objects. Both are advice: their errors are counted
// in Stats.
//
// # Stalls
//
// Stats accounts the time Next spent blocked, split by what the awaited
// batch was waiting for: a fetch, a disk-to-shm copy, the gather, or
// something else (see Stats). A Planner that is a StatsReporter (the
// daemon's control client) is sent the Stats as the Loader advances, so
// the daemon exports every loader's stalls as metrics.
//
// # Lifetimes
//
// A Batch, its IDs and arrays are lent: valid until Release, never to be
// modified. Release every batch: the Loader has Config.Prefetch buffers,
// and while the caller holds them all Next fails with ErrHeld. Batches
// outlive Close until released.
//
// # Concurrency
//
// Next must not be called concurrently with itself; State, Stats, Close
// and Batch.Release may be called from any goroutine. Locks: table.mu
// guards the shard table and every shard's references; Loader.mu guards
// the state, stats and failure; neither is held while calling the Source,
// Stager or Planner, or while copying.
//
// # Errors
//
// Conditions callers test: ErrDataset, ErrManifest, ErrPattern, ErrConfig,
// ErrResume, ErrClosed, ErrHeld, io.EOF from Next, and the Source's errors
// (object.ErrNotFound for a missing shard), all wrapped with details.
package loader
