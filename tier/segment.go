package tier

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Small objects are packed: appended to segment files (data/seg/<16 hex
// digits>.seg), each at an offset that is a multiple of the page size and
// of the filesystem block, so a mapping of one object maps its own pages
// only and punching its blocks out frees exactly its space. A file of one's
// own costs a create, a fallocate, two fsyncs, a rename and a directory
// sync; a packed object costs a pwrite into space allocated ahead and a
// share of one fdatasync, and its index record is written in a batch with
// the others of its group (see pack.go).
//
// Segments are only appended to, by the one active segment per cache; a
// segment is sealed when it reaches segmentMax, and at every start-up (the
// tail of a segment written before a crash is never appended to again). A
// segment is deleted when the last object in it leaves the cache; until
// then its evicted objects' blocks are punched out, so the budget (which
// counts blocks) gets their space back at once.

// segName is the name of segment files' directory under data/.
const segName = "seg"

// segSuffix ends every segment file's name.
const segSuffix = ".seg"

// segmentMax is the size at which the active segment is sealed and a new one
// started: large enough that segments are few (a 1 TiB cache of small
// objects has 4,096), small enough that a segment with one object left in
// it costs little on a filesystem without hole punching.
const segmentMax = 256 << 20

// segmentChunk is how much space the active segment's file is allocated
// at a time, ahead of the fills that write into it: one fallocate (and
// free-space check) per forty 100 KiB objects rather than one each, which
// took about 7% of a small-object prefetch's CPU (VM2). What a segment is
// allocated past its last object is freed when it is sealed; after a crash
// the next start counts it as the segment's dead space (see
// reconcileSegments).
const segmentChunk = 4 << 20

// pageSize is the alignment every packed offset has at least, whatever the
// machine: an index record with another is malformed.
const pageSize = 4096

// segment is one segment file. num, path and ino are immutable; the rest is
// guarded by segments.mu.
type segment struct {
	num  uint64
	path string
	ino  uint64
	// f is the file open for writing while fills may write into it: the
	// active segment, and a sealed one until its last fill ends.
	f *os.File
	// objects counts the entries with space in the segment (live, zombies,
	// and fills in progress); the segment is deleted when it drops to 0
	// after it was sealed.
	objects int
	// fills counts fills in progress writing into the segment; f is closed
	// when it drops to 0 after it was sealed.
	fills  int
	sealed bool
	// dead is the space allocated to the file that no object holds and
	// that a previous process may have served (see reconcileSegments):
	// counted in the budget, freed when the segment is deleted.
	dead int64
	// allocMu guards allocated, the bytes from the file's start that
	// have space allocated (see Cache.growSegment), and limit, the end of
	// the last object once the segment is sealed (0 before): nothing is
	// allocated past it. A leaf lock, taken with or without segments.mu.
	allocMu   sync.Mutex
	allocated int64
	limit     int64
}

// segments are the base tier's segment files.
type segments struct {
	log   *slog.Logger
	dir   string
	align int64 // every packed object starts at a multiple of it
	max   int64 // segmentMax (tests lower it before the first fill)
	mu    sync.Mutex
	// active takes the next packed object at offset end; nil until the
	// first one.
	active *segment
	end    int64
	next   uint64 // the number of the next segment created
	// writing counts fills in progress in every segment (alloc to done).
	writing int
	// byNum holds every segment with objects or fills in it, by number:
	// frozen entries name their segment by number (see Cache.thawLocked).
	byNum map[uint64]*segment
}

// newSegments returns the segments of the base tier laid out in lay; next is
// the first number not in use.
func newSegments(log *slog.Logger, lay layout, bsize int64, next uint64) *segments {
	return &segments{log: log, dir: lay.seg, align: max(bsize, int64(os.Getpagesize()), pageSize), max: segmentMax, next: next,
		byNum: make(map[uint64]*segment)}
}

// get returns segment num, which holds at least one object.
func (s *segments) get(num uint64) *segment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byNum[num]
}

// segPath returns the path of segment num in dir.
func segPath(dir string, num uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%016x%s", num, segSuffix))
}

// parseSegName parses a segment file's name; ok is false for anything else.
func parseSegName(name string) (num uint64, ok bool) {
	hex, found := strings.CutSuffix(name, segSuffix)
	if !found || len(hex) != 16 || strings.ToLower(hex) != hex {
		return 0, false
	}
	num, err := strconv.ParseUint(hex, 16, 64)
	return num, err == nil
}

// alloc gives a fill size bytes at an aligned offset of the active segment,
// starting a new one when it is full (or there is none). The caller writes
// there and ends with done (and, if the object never became an entry,
// free).
func (s *segments) alloc(size int64) (*segment, int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active != nil && s.end+size > s.max && s.end > 0 {
		if err := s.retireActiveLocked(); err != nil {
			s.log.Warn("tier: free a full segment's unused space", "err", err)
		}
	}
	if s.active == nil {
		seg, err := s.createLocked()
		if err != nil {
			return nil, 0, err
		}
		s.active, s.end = seg, 0
	}
	seg, off := s.active, s.end
	s.end = roundUp(off+size, s.align)
	seg.objects++
	seg.fills++
	s.writing++
	return seg, off, nil
}

// createLocked creates the next segment file and syncs its directory, so
// that the records written for its objects never name a missing file.
func (s *segments) createLocked() (*segment, error) {
	num := s.next
	p := segPath(s.dir, num)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, dataFileMode)
	if errors.Is(err, fs.ErrNotExist) { // the directory was removed behind our back
		if err = os.MkdirAll(s.dir, 0o755); err == nil {
			f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, dataFileMode)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tier: create segment: %w", err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		os.Remove(p)
		return nil, fmt.Errorf("tier: create segment: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		os.Remove(p)
		return nil, err
	}
	s.next++
	seg := &segment{num: num, path: p, ino: st.Ino, f: f}
	s.byNum[num] = seg
	return seg, nil
}

// sealLocked stops appends to seg; its file is closed once its fills end.
func (s *segments) sealLocked(seg *segment) {
	seg.sealed = true
	if s.active == seg {
		s.active, s.end = nil, 0
	}
	if seg.fills == 0 && seg.f != nil {
		seg.f.Close()
		seg.f = nil
	}
}

// inFlight returns how many fills are writing into segments now.
func (s *segments) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writing
}

// lost seals seg if it is still the active segment: its file was found
// deleted or replaced, so new objects must go to a new one.
func (s *segments) lost(seg *segment) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !seg.sealed {
		s.sealLocked(seg)
	}
}

// done ends a fill's writing into seg (a packed object's, once the packer
// synced it). It deletes the segment if it was sealed and its objects left
// meanwhile, and returns the dead space that freed.
func (s *segments) done(seg *segment) (int64, error) {
	s.mu.Lock()
	s.writing--
	seg.fills--
	if seg.sealed && seg.fills == 0 && seg.f != nil {
		seg.f.Close()
		seg.f = nil
	}
	return s.removeIfEmptyLocked(seg)
}

// release drops n objects from seg's count (their blocks are punched out
// or queued to be) and deletes the segment if it was sealed and is now
// empty, returning the dead space that freed.
func (s *segments) release(seg *segment, n int) (int64, error) {
	s.mu.Lock()
	seg.objects -= n
	return s.removeIfEmptyLocked(seg)
}

// removeIfEmptyLocked unlocks s.mu, deleting seg first if it was sealed
// and holds no objects or fills; it returns seg's dead space if it did.
func (s *segments) removeIfEmptyLocked(seg *segment) (int64, error) {
	remove := seg.objects == 0 && seg.sealed && seg.fills == 0 && s.byNum[seg.num] == seg
	var dead int64
	if remove {
		delete(s.byNum, seg.num)
		dead, seg.dead = seg.dead, 0
	}
	s.mu.Unlock()
	if !remove {
		return 0, nil
	}
	if err := os.Remove(seg.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return dead, fmt.Errorf("tier: remove empty segment: %w", err)
	}
	return dead, nil
}

// closeActive seals the active segment at Close, once no fill writes,
// and frees the space allocated past its last object.
func (s *segments) closeActive() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.active == nil {
		return nil
	}
	return s.retireActiveLocked()
}

// retireActiveLocked seals the active segment, first freeing the space
// allocated past its last object: nothing is written there, and nothing
// is allocated there after (growSegment stops at limit).
func (s *segments) retireActiveLocked() error {
	seg := s.active
	var err error
	seg.allocMu.Lock()
	seg.limit = s.end
	if seg.f != nil && seg.allocated > s.end {
		if err = punch(seg.f, s.end, seg.allocated-s.end); err == nil {
			seg.allocated = s.end
		}
	}
	seg.allocMu.Unlock()
	s.sealLocked(seg)
	return err
}

// punch frees the blocks of [off, off+n) in the file open as f. A
// filesystem that cannot punch holes keeps them until the segment goes.
func punch(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tier: punch %d bytes at %d of %s: %w", n, off, filepath.Base(f.Name()), err)
	}
	return nil
}

// region is one packed object's place in a segment: offset and length
// rounded up to the alignment.
type region struct{ off, n int64 }

// punchRegions punches regions out of seg's file, opening it for the
// purpose.
func punchRegions(seg *segment, rs []region) error {
	f, err := os.OpenFile(seg.path, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // gone behind our back: nothing left to free
	}
	if err != nil {
		return fmt.Errorf("tier: open segment: %w", err)
	}
	defer f.Close()
	var errs []error
	for _, r := range rs {
		if err := punch(f, r.off, r.n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// segmentDone ends a fill's writing into seg (segments.done), returning
// the dead space of a segment it deleted to the budget.
func (c *Cache) segmentDone(seg *segment) {
	dead, err := c.segs.done(seg)
	c.segmentGone(seg, dead, err)
}

// releaseSegment drops n objects from seg's count (segments.release),
// returning the dead space of a segment it deleted to the budget.
func (c *Cache) releaseSegment(seg *segment, n int) {
	dead, err := c.segs.release(seg, n)
	c.segmentGone(seg, dead, err)
}

// segmentGone logs a failure to delete seg and returns the dead space of a
// deleted segment to the budget.
func (c *Cache) segmentGone(seg *segment, dead int64, err error) {
	if err != nil {
		c.cfg.log.Warn("tier: remove segment", "segment", seg.path, "err", err)
	}
	if dead == 0 {
		return
	}
	c.mu.Lock()
	c.base.used -= dead
	c.base.dead -= dead
	c.base.signalLocked()
	c.mu.Unlock()
}
