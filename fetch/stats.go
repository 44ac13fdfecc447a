package fetch

import "sync/atomic"

// Stats is a snapshot of a Downloader's counters, for metrics. Counters only
// grow; Conns and Waiting are gauges at the time of the snapshot.
type Stats struct {
	// Objects is the number of Fetch calls that returned nil.
	Objects int64
	// Failures is the number of Fetch calls that returned an error.
	Failures int64
	// Bytes is the number of object bytes written to destinations,
	// including bytes written by attempts that were later retried.
	Bytes int64
	// Ranges is the number of range reads opened (attempts, not slices).
	Ranges int64
	// Retries counts retries by cause; index it with a RetryCause.
	Retries [numRetryCauses]int64
	// CRCFailures is the number of assembled objects whose CRC32C did not
	// match the source's.
	CRCFailures int64
	// Stalls is the number of range reads aborted by the stall watchdog.
	Stalls int64
	// Splits is the number of ranges split to give a connection that
	// would otherwise idle the second half.
	Splits int64
	// Conns is the number of connection slots in use.
	Conns int
	// Waiting is the number of slices waiting for a connection slot.
	Waiting int
	// SmallConns and SmallWaiting are the same for the small-object lane.
	SmallConns, SmallWaiting int
}

// counters are the live values behind Stats.
type counters struct {
	objects, failures, bytes, ranges, crcFailures, stalls, splits atomic.Int64
	retries                                                       [numRetryCauses]atomic.Int64
}

// snapshot copies the counters into a Stats.
func (c *counters) snapshot() Stats {
	s := Stats{
		Objects:     c.objects.Load(),
		Failures:    c.failures.Load(),
		Bytes:       c.bytes.Load(),
		Ranges:      c.ranges.Load(),
		CRCFailures: c.crcFailures.Load(),
		Stalls:      c.stalls.Load(),
		Splits:      c.splits.Load(),
	}
	for i := range c.retries {
		s.Retries[i] = c.retries[i].Load()
	}
	return s
}
