package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// readers runs the readers of one `e2e run`.
type readers struct {
	rc   runConfig
	src  object.Source  // GCS through the proxy
	objs []object.Attrs // every object of the dataset
	link *linkMeter
	log  io.Writer
	emit func(epochRecord) error
}

// run runs the named reader with the loader configuration base.
func (r *readers) run(ctx context.Context, name string, base loader.Config) error {
	switch name {
	case readerDirect:
		return r.direct(ctx, base)
	case readerDownload:
		return r.download(ctx, base)
	case readerAgent:
		return r.agent(ctx, readerAgent, base)
	case readerAgentAhead:
		base.Lookahead = r.rc.connections
		return r.agent(ctx, readerAgentAhead, base)
	}
	return fmt.Errorf("unknown reader %q", name)
}

// direct reads every shard from GCS on every epoch, one stream per shard,
// with as many shards open ahead as the agent has connections, retrying
// failed reads.
func (r *readers) direct(ctx context.Context, cfg loader.Config) error {
	cfg.Lookahead = r.rc.connections
	start, b0, err := r.mark(ctx)
	if err != nil {
		return err
	}
	return r.measure(ctx, readerDirect, loader.Direct(retrying{r.src}), cfg, start, b0, 0)
}

// download copies the dataset to local files, as `gcloud storage cp -r`
// would, then reads the local files (mapped, like the agent's) each epoch;
// epoch 1 includes the copy.
func (r *readers) download(ctx context.Context, cfg loader.Config) error {
	start, b0, err := r.mark(ctx)
	if err != nil {
		return err
	}
	if err := copyAll(ctx, retrying{r.src}, r.objs, r.rc.connections, toFiles(r.rc.downloadDir)); err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(r.log, "%s: copied in %.2f s\n", readerDownload, took.Seconds())
	store := mmapstore.New(localFiles{root: r.rc.downloadDir}, mmapstore.Config{Revalidate: -1})
	err = r.measure(ctx, readerDownload, loader.FromStore(store), cfg, start, b0, took)
	return errors.Join(err, store.Close())
}

// agent reads through the daemon: leases on its cached copies, plans and
// staging through its socket. It first evicts the dataset from the daemon's
// cache, so epoch 1 is cold; later epochs are warm.
func (r *readers) agent(ctx context.Context, name string, cfg loader.Config) error {
	c, err := control.Dial(ctx, r.rc.socket)
	if err != nil {
		return err
	}
	defer c.Close()
	ev, err := c.Evict(ctx, r.rc.bucket, r.rc.prefix)
	if err != nil {
		return err
	}
	if ev.Pending > 0 || ev.Skipped > 0 {
		return fmt.Errorf("cannot start cold: %d cached objects in use, %d pinned", ev.Pending, ev.Skipped)
	}
	store := mmapstore.New(c, mmapstore.Config{})
	cfg.Planner, cfg.Stager = c, c
	start, b0, err := r.mark(ctx)
	if err != nil {
		return errors.Join(err, store.Close())
	}
	err = r.measure(ctx, name, loader.FromStore(store), cfg, start, b0, 0)
	return errors.Join(err, store.Close())
}

// mark returns the time and the link's byte count at a boundary.
func (r *readers) mark(ctx context.Context) (time.Time, int64, error) {
	b, err := r.link.bytes(ctx)
	return time.Now(), b, err
}

// measure runs a Loader over src to the end, checking every batch, and
// emits each epoch: its time since the previous boundary (start for the
// first), its samples and the link bytes it caused (b0 at start). copied
// is the part of the first epoch spent copying the dataset.
func (r *readers) measure(ctx context.Context, name string, src loader.Source, cfg loader.Config,
	start time.Time, b0 int64, copied time.Duration) (err error) {
	l, err := loader.New(src, cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	per := l.BatchesPerEpoch()
	var samples int64
	var st0 stats.Loader
	for epoch := 1; ; {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		err = checkBatch(b)
		samples += int64(b.Len())
		last := b.Index == per-1
		b.Release()
		if err != nil {
			return err
		}
		if !last {
			continue
		}
		now := time.Now()
		b1, err := r.link.bytes(ctx)
		if err != nil {
			return err
		}
		secs := now.Sub(start).Seconds()
		st := l.Stats()
		share := func(a, b time.Duration) float64 { return (a - b).Seconds() / secs }
		rec := epochRecord{Kind: "epoch", Reader: name, Epoch: epoch, Seconds: secs, Samples: samples,
			SamplesPerSec: float64(samples) / secs, GCSBytes: b1 - b0, StallShare: share(st.Wait, st0.Wait),
			StallFetch: share(st.WaitFetch, st0.WaitFetch), StallPromote: share(st.WaitPromote, st0.WaitPromote),
			StallGather: share(st.WaitGather, st0.WaitGather), StallOther: share(st.WaitOther, st0.WaitOther)}
		if epoch == 1 {
			rec.DownloadSec = copied.Seconds()
		}
		if err := r.emit(rec); err != nil {
			return err
		}
		start, b0, st0, samples = now, b1, st, 0
		epoch++
	}
}

// checkBatch checks that a batch holds the samples it names: y holds the
// ids, and x's rows encode them (loader/synth's layout). It reads every y
// value and the first x row.
func checkBatch(b *loader.Batch) error {
	y, ok := b.Array("y")
	if !ok {
		return errors.New("batch without a y array")
	}
	ids, err := y.Int64s()
	if err != nil {
		return fmt.Errorf("batch %d of epoch %d: y: %w", b.Index, b.Epoch, err)
	}
	if len(ids) != len(b.IDs) {
		return fmt.Errorf("batch %d of epoch %d: %d y values for %d samples", b.Index, b.Epoch, len(ids), len(b.IDs))
	}
	for i, id := range b.IDs {
		if ids[i] != id {
			return fmt.Errorf("batch %d of epoch %d: sample %d has y %d; want %d", b.Index, b.Epoch, i, ids[i], id)
		}
	}
	x, ok := b.Array("x")
	if !ok {
		return errors.New("batch without an x array")
	}
	row, err := x.Row(0)
	if err != nil {
		return fmt.Errorf("batch %d of epoch %d: x: %w", b.Index, b.Epoch, err)
	}
	if got := synth.RowID(row); got != b.IDs[0] {
		return fmt.Errorf("batch %d of epoch %d: x row 0 encodes %d; want %d", b.Index, b.Epoch, got, b.IDs[0])
	}
	return nil
}
