package stats

// Fetch is a downloader's figures. Counters only grow; the connection and
// queue figures are gauges at the time of the snapshot.
type Fetch struct {
	// Connections is the connection budget: concurrent range reads.
	Connections int `json:"connections"`
	// ConnsInUse is the number of connection slots in use.
	ConnsInUse int `json:"conns_in_use"`
	// WaitingSlices is the number of slices waiting for a connection slot,
	// in either lane; SmallWaiting the small-object lane's part of it.
	WaitingSlices int `json:"waiting_slices"`
	SmallWaiting  int `json:"small_waiting"`
	// SmallConnsInUse is the number of the small-object lane's slots in
	// use.
	SmallConnsInUse int `json:"small_conns_in_use"`
	// SliceBytes is the size of the ranges an object is split into.
	SliceBytes int64 `json:"slice_bytes"`
	// Objects is the number of downloads that succeeded; Failures those
	// that returned an error.
	Objects  int64 `json:"objects"`
	Failures int64 `json:"failures"`
	// Bytes is the number of object bytes written to destinations,
	// including bytes written by attempts that were later retried.
	Bytes int64 `json:"bytes"`
	// Ranges is the number of range reads opened (attempts, not slices).
	Ranges int64 `json:"ranges"`
	// Retries counts retries by cause, keyed by the cause's name
	// (fetch.RetryCause's String); every cause is present.
	Retries map[string]int64 `json:"retries"`
	// CRCFailures is the number of assembled objects whose CRC32C did not
	// match the source's.
	CRCFailures int64 `json:"crc_failures"`
	// Stalls is the number of range reads aborted by the stall watchdog
	// for receiving no bytes.
	Stalls int64 `json:"stalls"`
	// Splits is the number of ranges split to give a connection that
	// would otherwise idle their second half.
	Splits int64 `json:"splits"`
}

// Add returns the figures of two downloaders together: budgets, gauges and
// counters summed; SliceBytes is f's.
func (f Fetch) Add(g Fetch) Fetch {
	out := f
	out.Connections += g.Connections
	out.ConnsInUse += g.ConnsInUse
	out.WaitingSlices += g.WaitingSlices
	out.SmallWaiting += g.SmallWaiting
	out.SmallConnsInUse += g.SmallConnsInUse
	out.Objects += g.Objects
	out.Failures += g.Failures
	out.Bytes += g.Bytes
	out.Ranges += g.Ranges
	out.CRCFailures += g.CRCFailures
	out.Stalls += g.Stalls
	out.Splits += g.Splits
	out.Retries = make(map[string]int64, len(f.Retries))
	for k, v := range f.Retries {
		out.Retries[k] = v
	}
	for k, v := range g.Retries {
		out.Retries[k] += v
	}
	return out
}
