package fetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// Defaults for the zero fields of Config.
const (
	DefaultSliceSize      = 32 << 20
	DefaultConnections    = 64
	DefaultMaxAttempts    = 8
	DefaultBackoffInitial = 100 * time.Millisecond
	DefaultBackoffMax     = 10 * time.Second
	DefaultStallTimeout   = 20 * time.Second
	// DefaultChecksumAttempts is the default Config.ChecksumAttempts.
	DefaultChecksumAttempts = 8
	// DefaultSmallObjectSize is the default Config.SmallObjectSize.
	DefaultSmallObjectSize = 1 << 20
	// NoSmallLane, as Config.SmallObjectSize, reads every object under
	// Connections.
	NoSmallLane = -1
)

// Config tunes a Downloader. The zero value of each field selects its
// default; negative values are invalid.
type Config struct {
	// SliceSize is the length in bytes of the ranges an object is split
	// into and fetched in parallel; objects of at most SliceSize bytes are
	// one range. Default 32 MiB.
	SliceSize int64
	// Connections is the process-wide budget of concurrent range reads,
	// shared by every Fetch on the Downloader. Default 64. Change it live
	// with SetConnections.
	Connections int
	// MaxAttempts is how many consecutive attempts a range may make without
	// receiving a byte before Fetch gives up; an attempt that makes progress
	// resets the count. 1 disables retries. Default 8.
	MaxAttempts int
	// BackoffInitial and BackoffMax bound the wait before a retry: before
	// retry n it is uniform in [0, min(BackoffMax, BackoffInitial·2^(n-1)))
	// ("full jitter"). Defaults 100ms and 10s.
	BackoffInitial, BackoffMax time.Duration
	// StallTimeout aborts and retries a range that receives no bytes for
	// this long, time to first byte included, unless its object.Source calls
	// Alive meanwhile. Default 20s.
	StallTimeout time.Duration
	// SmallObjectSize is the size up to which an object is small: its
	// first byte takes about as long to come as its body to stream, so
	// one of the Connections held for it would carry almost nothing for
	// the whole time to first byte. Small objects are read on a lane of
	// SmallConnections slots of their own, beside the Connections; the
	// lane never splits ranges. Default 1 MiB; NoSmallLane turns the lane
	// off.
	SmallObjectSize int64
	// SmallConnections is the small-object lane's budget of concurrent
	// range reads. Default: Connections, following SetConnections.
	SmallConnections int
	// ChecksumAttempts is how many rounds of reads an object may take
	// before a CRC32C mismatch fails it with ErrChecksum: the first reads
	// it whole, the second whole again through ranges cut elsewhere, later
	// ones only the parts whose right bytes (as the object's CRC picks
	// them out of the values read) are not in place, or failing that the
	// parts the earlier reads disagree on (everything if they all agree);
	// see checkunits.go.
	// Rounds after the first wait a backoff like a range retry. 1 disables
	// re-reads. Default 8.
	ChecksumAttempts int
	// NoSplit keeps idle connections from splitting ranges in flight (see
	// steal.go). A split stops the range's reader early, and the bytes
	// the source had sent past the split point by then are read from it
	// again: with many ranges in flight at once (a fleet owner filling
	// its peers' chunks), splits buy no parallelism and cost that.
	NoSplit bool
}

// Reads returns how many range reads a Downloader made with c allows at
// once: Connections and, unless the lane is off (NoSmallLane), the
// small-object lane's SmallConnections (as many as Connections when 0).
// Zero fields count as their defaults.
func (c Config) Reads() int {
	n := cmp.Or(c.Connections, DefaultConnections)
	if c.SmallObjectSize == NoSmallLane {
		return n
	}
	return n + cmp.Or(c.SmallConnections, n)
}

// withDefaults validates c and fills in its zero fields.
func (c Config) withDefaults() (Config, error) {
	if c.SliceSize < 0 || c.Connections < 0 || c.MaxAttempts < 0 ||
		c.BackoffInitial < 0 || c.BackoffMax < 0 || c.StallTimeout < 0 ||
		c.SmallObjectSize < NoSmallLane || c.SmallConnections < 0 || c.ChecksumAttempts < 0 {
		return c, fmt.Errorf("fetch: invalid config %+v: negative value", c)
	}
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.Connections == 0 {
		c.Connections = DefaultConnections
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffInitial == 0 {
		c.BackoffInitial = DefaultBackoffInitial
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = max(DefaultBackoffMax, c.BackoffInitial)
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.SmallObjectSize == 0 {
		c.SmallObjectSize = DefaultSmallObjectSize
	}
	if c.ChecksumAttempts == 0 {
		c.ChecksumAttempts = DefaultChecksumAttempts
	}
	if c.BackoffMax < c.BackoffInitial {
		return c, fmt.Errorf("fetch: invalid config: BackoffMax %v < BackoffInitial %v", c.BackoffMax, c.BackoffInitial)
	}
	return c, nil
}

// Downloader fetches objects from an object.Source into io.WriterAt destinations as
// parallel ranges under one connection budget. Create it with NewDownloader;
// it is safe for concurrent use, and meant to be shared by the whole process
// so that the budget is global.
type Downloader struct {
	// Immutable after NewDownloader.
	src  object.Source
	cfg  Config
	sem  *connSem
	unit int64 // check unit: the span of each CRC32C kept (see checkunits.go)
	// small is the small-object lane (nil: none); smallAuto, that its
	// budget follows the connection budget.
	small     *connSem
	smallAuto bool

	tickets atomic.Uint64 // Fetch start order, for FIFO within a priority
	stats   counters
	bufs    bufPools // read buffers by size class

	stealMu  sync.Mutex           // guards inflight
	inflight map[*slice]*download // ranges being fetched, which steal may split
	ttfb     atomic.Int64         // average time to first byte of range reads, ns (0: none yet)
}

// observeTTFB folds one range read's time to first byte into the average
// (an exponentially weighted one, 1/8 per sample).
func (d *Downloader) observeTTFB(t time.Duration) {
	for {
		old := d.ttfb.Load()
		avg := int64(t)
		if old != 0 {
			avg = old + (int64(t)-old)/8
		}
		if d.ttfb.CompareAndSwap(old, max(avg, 1)) {
			return
		}
	}
}

// copyBufSize is the read buffer per range attempt.
const copyBufSize = 256 << 10

// Read buffers come in size classes, powers of two from minBufSize to
// copyBufSize: a small range (a small object) takes the smallest that
// holds it, so 64 connections fetching 1 KiB objects hold 256 KiB, not
// 16 MiB, and none is allocated (and zeroed) per object.
const (
	minBufSize = 4 << 10
	bufClasses = 7 // 4 KiB .. 256 KiB
)

// bufPools are the read buffers' pools, one per size class.
type bufPools [bufClasses]sync.Pool

// get returns a buffer of at least n bytes (at most copyBufSize) and the
// function that gives it back.
func (p *bufPools) get(n int64) (buf []byte, put func()) {
	class := 0
	for class < bufClasses-1 && int64(minBufSize)<<class < n {
		class++
	}
	pool := &p[class]
	bp, _ := pool.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, minBufSize<<class)
		bp = &b
	}
	return *bp, func() { pool.Put(bp) }
}

// NewDownloader returns a Downloader reading from src.
func NewDownloader(src object.Source, cfg Config) (*Downloader, error) {
	if src == nil {
		return nil, errors.New("fetch: nil Source")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sem, err := newConnSem(cfg.Connections)
	if err != nil {
		return nil, err
	}
	d := &Downloader{src: src, cfg: cfg, sem: sem, unit: min(cfg.SliceSize, checkUnit),
		inflight: make(map[*slice]*download)}
	if cfg.SmallObjectSize != NoSmallLane {
		d.smallAuto = cfg.SmallConnections == 0
		if d.small, err = newConnSem(cmp.Or(cfg.SmallConnections, cfg.Connections)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// SetConnections changes the connection budget to n (at least 1), and the
// small-object lane's with it unless Config.SmallConnections set that. More
// slots are granted at once; fewer take effect as range reads finish.
func (d *Downloader) SetConnections(n int) error {
	if err := d.sem.setLimit(n); err != nil {
		return fmt.Errorf("fetch: set connections to %d: %w", n, err)
	}
	if d.smallAuto {
		return d.small.setLimit(n) // cannot fail: n is valid
	}
	return nil
}

// acquire takes a slot of dl's lane for one of its n ranges. A small
// object (one range) that finds its lane full takes a main-lane slot no one
// waits for, and reads on the main lane: the lanes' budgets still bound the
// connections, and small objects do not queue while the main lane idles (a
// planner or prefetch job reading many small objects gets both lanes).
func (d *Downloader) acquire(ctx context.Context, dl *download, n int) error {
	if dl.sem != d.small || n != 1 {
		return dl.sem.acquire(ctx, dl.u, dl.order)
	}
	if d.small.tryAcquire() {
		return nil
	}
	if d.sem.tryAcquire() {
		dl.sem = d.sem
		return nil
	}
	return d.small.acquire(ctx, dl.u, dl.order)
}

// lane returns the connection budget an object of size bytes is read under.
func (d *Downloader) lane(size int64) *connSem {
	if d.small != nil && size <= d.cfg.SmallObjectSize {
		return d.small
	}
	return d.sem
}

// Stats returns a snapshot of the Downloader's counters and gauges (see
// stats.Fetch; Retries is keyed by RetryCause names).
func (d *Downloader) Stats() stats.Fetch {
	s := d.stats.snapshot()
	s.SliceBytes = d.cfg.SliceSize
	s.Connections, s.ConnsInUse, s.WaitingSlices = d.sem.counts()
	if d.small != nil {
		_, s.SmallConnsInUse, s.SmallWaiting = d.small.counts()
		s.WaitingSlices += s.SmallWaiting
	}
	return s
}

// Fetch writes the object a describes (exactly generation a.Generation,
// a.Size bytes) into dst at offsets [0, a.Size), and verifies it against
// a.CRC32C when a.HasCRC32C. dst must accept parallel WriteAt calls on
// disjoint ranges (an *os.File does). Fetch does not deduplicate: callers
// wanting one download per object share it themselves and Raise its
// object.Urgency as waiters join.
//
// u is the download's priority for connection slots; it may be raised while
// Fetch runs. A nil u means object.Warm. Among downloads of equal priority, the
// one that called Fetch first is served first.
//
// Failed range reads are retried per Config; a CRC32C mismatch re-reads
// the object, whole and then the parts whose reads disagree, for up to
// Config.ChecksumAttempts rounds, on a context marked Reread. Errors:
// object.ErrGenerationChanged if the object changed mid-download (also
// object.ErrNotFound if that generation is gone): Stat again and restart; object.ErrChecksum; the last error of a range that ran out of
// attempts, or the first error not worth retrying (a *googleapi.Error for
// HTTP statuses); errors from dst, wrapped and never retried; ctx's error
// if ctx ends. After an error dst holds partial data.
func (d *Downloader) Fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error {
	err := d.fetch(ctx, a, dst, u)
	if err != nil {
		d.stats.failures.Add(1)
		if ctx.Err() != nil {
			return fmt.Errorf("fetch %s: %w", a.Object, ctx.Err())
		}
		return fmt.Errorf("fetch %s: %w", a.Object, err)
	}
	d.stats.objects.Add(1)
	return nil
}

// fetch is Fetch without the accounting and the object in errors.
func (d *Downloader) fetch(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency) error {
	if a.Size < 0 {
		return fmt.Errorf("invalid size %d", a.Size)
	}
	if dst == nil {
		return errors.New("nil destination")
	}
	if u == nil {
		u = object.NewUrgency(object.Warm)
	}
	order := d.tickets.Add(1)
	units := newCheckUnits(a.Size, unitFor(a.Size, d.unit))
	todo := units.all()
	rctx := ctx // the rounds after a mismatch run on a context marked Reread
	shift := 0
	for try := 1; ; try++ {
		// Rounds after the first cut their ranges elsewhere (shift; see
		// checkUnits).
		rs, err := d.fetchRound(rctx, a, dst, u, order, units.ranges(todo, d.cfg.SliceSize, shift))
		if err != nil {
			return err
		}
		if err := units.record(todo, rs); err != nil {
			return err
		}
		crc := units.sum()
		if !a.HasCRC32C || crc == a.CRC32C {
			return nil
		}
		d.stats.crcFailures.Add(1)
		// Only the assembled object shows a flipped byte: read again the
		// units whose right values the object's CRC picks out and the
		// destination lacks; failing that, what no two reads agree on; if
		// they all agree, everything.
		if units.solve(a.CRC32C) || units.good != nil { // an earlier solve's still holds
			todo = units.wrong()
			// One range per run of those units when the last round was cut
			// elsewhere: a read that arrives corrupt again costs a round,
			// never the bytes that are right. Every other round is cut
			// elsewhere still, to move a corruption tied to a position.
			if shift != 0 {
				shift = 0
			} else {
				shift = try
			}
		} else {
			todo = units.unconfirmed()
			shift = try
		}
		if try >= d.cfg.ChecksumAttempts {
			same := ""
			if len(todo) == 0 {
				same = ", the same bytes every time"
			}
			return fmt.Errorf("%w: got %08x, want %08x after %d rounds of reads%s", object.ErrChecksum, crc, a.CRC32C,
				try, same)
		}
		if len(todo) == 0 {
			todo = units.all()
		}
		d.stats.retries[CauseChecksum].Add(1)
		if err := wait.Sleep(ctx, backoff(try, d.cfg.BackoffInitial, d.cfg.BackoffMax)); err != nil {
			return err
		}
		rctx = withReread(ctx)
	}
}

// fetchRound reads the ranges rs of a into dst, in parallel, and returns
// them (with any split off them) in object order.
func (d *Downloader) fetchRound(ctx context.Context, a object.Attrs, dst io.WriterAt, u *object.Urgency, order uint64, rs []*slice) ([]*slice, error) {
	// The first failing slice cancels sctx with its error as the cause,
	// before it frees its connection slot, so no further slice starts and
	// that error, not a sibling's cancellation, is what Fetch returns.
	sctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	var wg sync.WaitGroup
	dl := &download{o: a.Object, dst: dst, u: u, order: order, sem: d.lane(a.Size), ctx: sctx, abort: abort, wg: &wg}
	for _, s := range rs {
		// One slot per slice, taken here so that a download queues at most
		// one waiter at a time and starts no goroutine it cannot feed.
		if d.acquire(sctx, dl, len(rs)) != nil {
			break
		}
		dl.add(s)
		wg.Go(func() { d.fetchSlice(dl, s) })
	}
	wg.Wait()
	if err := context.Cause(sctx); err != nil {
		return nil, err
	}
	return dl.sorted(), nil
}
