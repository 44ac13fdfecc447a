package fetch

import (
	"sync/atomic"

	"github.com/cacheagent/cacheagent/stats"
)

// counters are the live values behind Downloader.Stats.
type counters struct {
	objects, failures, bytes, ranges, crcFailures, stalls, splits atomic.Int64
	retries                                                       [numRetryCauses]atomic.Int64
}

// snapshot copies the counters into a stats.Fetch.
func (c *counters) snapshot() stats.Fetch {
	s := stats.Fetch{
		Objects:     c.objects.Load(),
		Failures:    c.failures.Load(),
		Bytes:       c.bytes.Load(),
		Ranges:      c.ranges.Load(),
		CRCFailures: c.crcFailures.Load(),
		Stalls:      c.stalls.Load(),
		Splits:      c.splits.Load(),
		Retries:     make(map[string]int64, numRetryCauses),
	}
	for i := range c.retries {
		s.Retries[RetryCause(i).String()] = c.retries[i].Load()
	}
	return s
}
