package tier

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Kind names a tier, as Entry.Tier, Handle.Tier and Stats (stats.Tier.Name)
// report it.
type Kind string

// The tiers.
const (
	// Disk is the disk tier: local storage, normally NVMe.
	Disk Kind = "disk"
	// Shm is the shm tier: a tmpfs, normally under /dev/shm.
	Shm Kind = "shm"
)

// store is one tier's directory and its space accounting: the base tier
// (every cached object: the disk, or the shm directory when shm-only) or the
// hot tier (shm copies of some base entries). name, lay, lock, bsize,
// headroom and share are immutable after Open; the rest is guarded by
// Cache.mu.
type store struct {
	name     Kind // Disk or Shm
	lay      layout
	lock     *dirLock
	bsize    int64   // filesystem block size: reservations are rounded up to it
	headroom int64   // free bytes fills and promotions leave on the filesystem
	share    float64 // share of the filesystem that a budget of 0 means

	// cold reaches the base tier's frozen entries (see freeze.go); its
	// functions are nil on the shm tier.
	cold coldAccess

	maxBytes    int64
	used        int64 // blocks of live copies, zombies and detached zombies, and dead
	dead        int64 // space in segments that no object holds (see segment.dead)
	reserved    int64 // space set aside by fills or promotions in progress
	held        int64 // space held for bytes not cached yet (Hold: checkpoints before upload)
	pinnedBytes int64 // blocks of pinned live copies
	// inUse is the blocks of live unpinned copies in use (see
	// entry.syncInUseLocked), pending those of zombies and detached
	// zombies, copies the number of live copies: kept as copies change,
	// so that Stats costs O(1), not a walk of every entry.
	inUse, pending int64
	copies         int
	lru            lruList // live unpinned copies, most recently used at the front
	// zombies are copies that left the cache while handles were open; the
	// last Close deletes the file.
	zombies map[fileID]*entry
	// detached are zombies whose path a newer copy of the same generation
	// took over (see claim): their last Close deletes nothing.
	detached map[*entry]struct{}
	// deleting holds the files being deleted; each channel is closed when
	// its file is gone.
	deleting   map[fileID]chan struct{}
	spaceFreed chan struct{} // closed (and replaced) when reserved or used drops
	// wakeOnRelease makes the next copy to leave use signal spaceFreed
	// too: a fill waits for a reader's copy to become a victim (see
	// Cache.reserve).
	wakeOnRelease bool
	// plans, shared by both stores, orders eviction while plans are
	// announced; set once at Open.
	plans *plans
	// own is the base store's ownership preference (Cache.SetOwnership).
	own ownership
}

// openStore takes the lock of dir, creates its layout and sizes its budget
// (maxBytes, or share of the filesystem if 0). On error nothing is held.
func openStore(name Kind, lay layout, maxBytes int64, share float64) (*store, error) {
	if err := os.MkdirAll(lay.root, 0o755); err != nil {
		return nil, fmt.Errorf("tier: create %s dir: %w", name, err)
	}
	lk, err := lockDir(lay.root)
	if err != nil {
		return nil, err
	}
	st, err := newStore(name, lay, lk, maxBytes, share)
	if err != nil {
		return nil, errors.Join(err, lk.release())
	}
	return st, nil
}

// newStore creates the layout of a locked directory and sizes its budget.
func newStore(name Kind, lay layout, lk *dirLock, maxBytes int64, share float64) (*store, error) {
	if err := lay.create(); err != nil {
		return nil, err
	}
	fsi, err := statFS(lay.data)
	if err != nil {
		return nil, err
	}
	if maxBytes == 0 {
		maxBytes = budgetOf(fsi, share)
	}
	st := &store{
		name: name, lay: lay, lock: lk, bsize: fsi.blockSize, headroom: headroomFor(fsi.size), share: share,
		maxBytes: maxBytes, zombies: make(map[fileID]*entry),
		detached: make(map[*entry]struct{}), deleting: make(map[fileID]chan struct{}),
		spaceFreed: make(chan struct{}),
	}
	st.lru.init()
	return st, nil
}

// path returns the data file of id in this tier.
func (st *store) path(id fileID) string { return st.lay.path(id) }

// signalLocked wakes waiters for space in this tier.
func (st *store) signalLocked() {
	close(st.spaceFreed)
	st.spaceFreed = make(chan struct{})
}

// clearTemp removes everything in the tier's temp directory: fills or
// promotions interrupted by a crash. It returns how many it removed.
func (st *store) clearTemp() (int, error) {
	des, err := os.ReadDir(st.lay.tmp)
	if err != nil {
		return 0, fmt.Errorf("tier: reconcile %s: %w", st.name, err)
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(st.lay.tmp, de.Name())); err != nil &&
			!errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("tier: reconcile %s: remove temp file: %w", st.name, err)
		}
	}
	return len(des), nil
}

// coldAccess is how eviction reaches the frozen entries of a store (all
// with Cache.mu held).
type coldAccess struct {
	// thawOld thaws the least recently used unpinned cold entries into
	// the LRU up to the blocks given, so that eviction sees them, and
	// returns them; refreeze freezes again, as the oldest, those of them
	// that eviction did not choose.
	thawOld  func(need int64) []*entry
	refreeze func(thawed, victims []*entry)
	// each calls fn with every unpinned frozen entry, least recently used
	// first (key aliasing the cold set: valid until it changes); thawAt
	// thaws the one at pos (not yet in the LRU) and link puts thawed
	// entries in the LRU.
	each   func(fn func(key string, r record, pos uint64))
	thawAt func(pos uint64) *entry
	link   func(es []*entry)
}
