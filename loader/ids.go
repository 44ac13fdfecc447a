package loader

import (
	"iter"

	"github.com/cacheagent/cacheagent/loader/sampler"
)

// BatchIDs is one batch's place and sample ids, as IDs yields them.
type BatchIDs struct {
	Epoch, Index int
	IDs          []int64
}

// IDs returns the batches a Loader with cfg would return, without reading
// any shard: their positions and sample ids, in order, from cfg.Resume (or
// the start of cfg.Epoch) to the end of the last epoch. Only the dataset's
// row counts are needed, so specs may be missing. The yielded IDs slice is
// reused by the next iteration. Errors are New's, for the configuration.
func IDs(cfg Config) (iter.Seq[BatchIDs], error) {
	s, err := cfg.settings()
	if err != nil {
		return nil, err
	}
	l, err := prepare(s)
	if err != nil {
		return nil, err
	}
	return l.ids, nil
}

// ids yields the batches from l.start on.
func (l *Loader) ids(yield func(BatchIDs) bool) {
	b := BatchIDs{IDs: make([]int64, 0, l.cfg.BatchSize)}
	first := l.start.Batch
	for ep := l.start.Epoch; ep < l.end; ep++ {
		it, err := sampler.NewEpoch(l.rows, l.cfg.sampler, ep)
		if err != nil {
			return // cannot happen: the first epoch validated the same arguments
		}
		it.Skip(first * l.cfg.BatchSize)
		for i := first; i < l.perEpoch; i++ {
			b.Epoch, b.Index, b.IDs = ep, i, b.IDs[:0]
			for len(b.IDs) < l.cfg.BatchSize {
				smp, ok := it.Next()
				if !ok {
					break
				}
				b.IDs = append(b.IDs, smp.ID)
			}
			if !yield(b) {
				return
			}
		}
		first = 0
	}
}
