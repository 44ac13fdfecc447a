package tier

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/internal/wait"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// verifyBuf is the read size of a verification, and the pacer's step.
const verifyBuf = 1 << 20

// maxVerifyDropped bounds VerifyResult.Dropped; the counts go on.
const maxVerifyDropped = 100

// castagnoli is the CRC32C table.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// VerifyOptions selects what Cache.Verify reads and how fast.
type VerifyOptions struct {
	// Bucket and Prefix select the objects: those of Bucket whose names
	// start with Prefix. Bucket "" selects every cached object.
	Bucket, Prefix string
	// Rate bounds the bytes read per second, averaged (with bursts of at
	// most a second's worth); 0 means unlimited.
	Rate int64
	// Progress, if not nil, is called after each object with the counts so
	// far; calls are never concurrent and must return quickly.
	Progress func(stats.Verify)
}

// VerifyResult is what Cache.Verify found.
type VerifyResult struct {
	stats.Verify
	// Dropped lists the copies dropped as corrupt or damaged, the first
	// maxVerifyDropped (100) of them.
	Dropped []DroppedCopy
}

// DroppedCopy is one copy that a verification dropped.
type DroppedCopy struct {
	Object object.Object
	Tier   Kind
	// Reason says what was wrong: the CRC32C found and expected, a read
	// error, or how the file changed.
	Reason string
}

// verifyCounters are a tier's cumulative verification counts, guarded by
// Cache.mu.
type verifyCounters struct {
	bytes, verified, unverifiable, corrupt int64
}

// Verify reads every copy (in each tier) of the cached objects opts selects
// and checks it: its file against the one the cache published (inode,
// size, modification time), and its bytes against the CRC32C the index
// records. Objects whose source gave no CRC32C (object.Attrs.HasCRC32C
// false: a Dir source) are checked by size only and counted Unverifiable.
//
// A copy that fails is dropped like a copy damaged behind the cache's back:
// a shm copy is demoted, a disk copy leaves the cache; either is doomed, so
// handles on it stay readable but report Stale, no new handle is given on
// it, and the next Open fetches the object again (or serves the disk copy).
// It is counted in the tier's Corrupt figure (stats.Tier).
//
// Verify holds no lock while it reads, and reads at most opts.Rate bytes
// per second. It stops when ctx ends, returning what it found so far and
// ctx's error. Safe for concurrent use; two verifications read twice.
func (c *Cache) Verify(ctx context.Context, opts VerifyOptions) (VerifyResult, error) {
	var res VerifyResult
	if opts.Rate < 0 {
		return res, fmt.Errorf("tier: verify: rate %d is negative", opts.Rate)
	}
	end, err := c.begin()
	if err != nil {
		return res, err
	}
	defer end()
	pace := newPacer(opts.Rate, time.Now())
	for _, key := range c.verifyList(opts.Bucket, opts.Prefix) {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("tier: verify: %w", err)
		}
		if err := c.verifyObject(ctx, key, pace, &res); err != nil {
			return res, err
		}
		if opts.Progress != nil {
			opts.Progress(res.Verify)
		}
	}
	return res, nil
}

// verifyList returns the index keys of the cached objects of bucket under
// prefix (every one if bucket is ""), sorted; frozen entries are listed
// without being thawed.
func (c *Cache) verifyList(bucket, prefix string) []string {
	if strings.IndexByte(bucket, 0) >= 0 {
		return nil
	}
	c.mu.Lock()
	keys := c.coldKeysLocked(bucket, prefix)
	kp := indexKey(bucket, prefix)
	for k := range c.entries {
		if bucket == "" || strings.HasPrefix(k, kp) {
			keys = append(keys, k)
		}
	}
	c.mu.Unlock()
	slices.Sort(keys)
	return keys
}

// verifyObject checks the copies of the object cached under index key key,
// its hot copy first.
func (c *Cache) verifyObject(ctx context.Context, key string, pace *pacer, res *VerifyResult) error {
	c.mu.Lock()
	e := c.entries[key]
	var cps []*entry
	if e != nil {
		e.keep++ // not frozen while read
		cps = []*entry{e}
		if e.hot != nil {
			cps = []*entry{e.hot, e}
		}
	} else if f := c.frozenStandInLocked(key); f != nil {
		cps = []*entry{f} // read without thawing: a thaw would move the object in the LRU order
	}
	c.mu.Unlock()
	if len(cps) == 0 {
		return nil // gone since the listing: nothing to count
	}
	if e != nil {
		defer func() {
			c.mu.Lock()
			e.keep--
			c.mu.Unlock()
		}()
	}
	res.Objects++
	for _, cp := range cps {
		if err := c.verifyCopy(ctx, cp, pace, res); err != nil {
			return err
		}
	}
	return nil
}

// verifyCopy reads copy cp, compares it and drops it if it is bad.
func (c *Cache) verifyCopy(ctx context.Context, cp *entry, pace *pacer, res *VerifyResult) error {
	a := cp.attrs()
	res.Copies++
	crc, n, err := c.readCopy(ctx, cp, pace)
	res.Bytes += n
	c.mu.Lock()
	vc := c.verifyCountersLocked(cp.st)
	vc.bytes += n
	c.mu.Unlock()
	var reason string
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("tier: verify: %w", ctx.Err())
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errChanged):
		if c.dropDamaged(cp) {
			res.Damaged++
			res.drop(a.Object, cp.st.name, err.Error())
		} else {
			res.Skipped++
		}
		return nil
	case err != nil:
		reason = err.Error()
	case !a.HasCRC32C:
		c.countVerify(cp, func(vc *verifyCounters) { vc.unverifiable++ })
		res.Unverifiable++
		return nil
	case crc == a.CRC32C:
		c.countVerify(cp, func(vc *verifyCounters) { vc.verified++ })
		res.Verified++
		return nil
	default:
		reason = fmt.Sprintf("CRC32C %08x, want %08x", crc, a.CRC32C)
	}
	if c.dropCopy(cp, func() { c.verifyCountersLocked(cp.st).corrupt++ }) {
		c.cfg.log.Warn("tier: cached copy was corrupt; dropped it", "tier", cp.st.name,
			"object", a.Object.String(), "path", cp.path(), "reason", reason)
		res.Corrupt++
		res.drop(a.Object, cp.st.name, reason)
	} else {
		res.Skipped++
	}
	return nil
}

// drop lists a dropped copy, up to maxVerifyDropped.
func (r *VerifyResult) drop(o object.Object, k Kind, reason string) {
	if len(r.Dropped) < maxVerifyDropped {
		r.Dropped = append(r.Dropped, DroppedCopy{Object: o, Tier: k, Reason: reason})
	}
}

// countVerify applies count to cp's tier's verification counters.
func (c *Cache) countVerify(cp *entry, count func(*verifyCounters)) {
	c.mu.Lock()
	count(c.verifyCountersLocked(cp.st))
	c.mu.Unlock()
}

// verifyCountersLocked returns the verification counters of tier st.
func (c *Cache) verifyCountersLocked(st *store) *verifyCounters {
	if st == c.hot {
		return &c.stats.shmVerify
	}
	return &c.stats.verify
}

// readCopy reads cp's file at pace and returns its CRC32C and the bytes
// read. A file that is not the one the cache published, before or after
// the read, is an error matching errChanged (or fs.ErrNotExist).
func (c *Cache) readCopy(ctx context.Context, cp *entry, pace *pacer) (uint32, int64, error) {
	p := cp.path()
	// A disk copy read only for this would push the page cache's working
	// set out: drop its pages after, unless they were all there before.
	keepPages := cp.st.name != Disk || resident(p, cp.rec.off, cp.rec.size)
	f, err := os.Open(p)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if err := cp.checkFile(f); err != nil {
		return 0, 0, err
	}
	c.hooks.Load().onVerifying(cp.key)
	var crc uint32
	var n int64
	buf := make([]byte, verifyBuf)
	r := io.NewSectionReader(f, cp.rec.off, cp.rec.size)
	for {
		if err := wait.Sleep(ctx, pace.take(time.Now(), min(int64(len(buf)), max(cp.rec.size-n, 0)))); err != nil {
			return crc, n, err
		}
		m, rerr := r.Read(buf)
		crc = crc32.Update(crc, castagnoli, buf[:m])
		n += int64(m)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return crc, n, fmt.Errorf("read %s: %w", p, rerr)
		}
	}
	if !keepPages {
		unix.Fadvise(int(f.Fd()), cp.rec.off, cp.rec.size, unix.FADV_DONTNEED)
	}
	if n != cp.rec.size {
		return crc, n, fmt.Errorf("%w: read %d bytes of %d", errChanged, n, cp.rec.size)
	}
	return crc, n, cp.checkFile(f)
}

// pacer spaces reads to average at most rate bytes per second: a token
// bucket holding at most a second's worth (or one read's, if more), so a
// pause between objects does not turn into a burst longer than that. The
// arithmetic takes the time as an argument, so tests need no clock.
type pacer struct {
	rate   int64 // bytes per second; 0: unlimited
	burst  float64
	tokens float64 // bytes that may be read now; negative: owed
	last   time.Time
}

func newPacer(rate int64, now time.Time) *pacer {
	return &pacer{rate: rate, burst: float64(max(rate, verifyBuf)), last: now}
}

// take accounts for n bytes about to be read at now and returns how long
// to wait first.
func (p *pacer) take(now time.Time, n int64) time.Duration {
	if p.rate <= 0 {
		return 0
	}
	if dt := now.Sub(p.last); dt > 0 {
		p.tokens = min(p.burst, p.tokens+dt.Seconds()*float64(p.rate))
		p.last = now
	}
	p.tokens -= float64(n)
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens / float64(p.rate) * float64(time.Second))
}
