package tier

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

func TestEvictInUseIsPending(t *testing.T) {
	for _, refetch := range []bool{false, true} {
		name := map[bool]string{false: "closed", true: "refetched"}[refetch]
		t.Run(name, func(t *testing.T) {
			env := newDirEnv(t)
			c := openCache(t, env.config(t.TempDir(), 64<<20))
			ctx := context.Background()
			data := pattern(1, 100<<10)
			a := env.put(t, "bkt", "obj", data)
			h := openHandle(t, c, obj("bkt", "obj"), data, Disk)
			p := h.Path()

			res, err := c.Evict(ctx, "bkt", "")
			if want := (EvictResult{Pending: 1}); res != want || err != nil {
				t.Fatalf("Evict of an open object = %+v, %v; want %+v", res, err, want)
			}
			if _, ok := c.Lookup("bkt", "obj"); ok {
				t.Errorf("an evicted entry is still cached")
			}
			st := c.Stats().Base()
			if st.Entries != 0 || st.PendingBytes == 0 || st.PendingBytes != st.UsedBytes {
				t.Errorf("Stats() = %+v; want no entries and the open file's blocks pending", st)
			}
			if !h.Stale() {
				t.Errorf("handle on an evicted entry is not stale")
			}
			checkHandle(t, h, data)
			if _, err := os.Stat(p); err != nil {
				t.Errorf("evicted file while open: %v; want it kept until the last Close", err)
			}
			if refetch {
				refetchOverDoomed(t, c, env, h, a, data)
			} else {
				h.Close()
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("evicted file after its last Close: %v; want it gone", err)
				}
			}
			if st := c.Stats().Base(); st.PendingBytes != 0 {
				t.Errorf("PendingBytes = %d after the last Close; want 0", st.PendingBytes)
			}
			checkIndexMatchesFiles(t, c)
			checkInvariants(t, c)
		})
	}
}

// refetchOverDoomed opens a's generation again while h holds its evicted
// copy: no new handle is given on the doomed copy, not even by generation;
// a fresh download is renamed over its path, and h's last Close must not
// delete it.
func refetchOverDoomed(t *testing.T, c *Cache, env *dirEnv, h *Handle, a object.Attrs, data []byte) {
	t.Helper()
	o := a.Object
	h2 := openHandle(t, c, o, data, Disk)
	if h2.Stale() || h2.Path() != h.Path() {
		t.Errorf("refetched handle: stale %v, path %s; want fresh, %s", h2.Stale(), h2.Path(), h.Path())
	}
	if n := env.dl.calls.Load(); n != 2 {
		t.Errorf("downloads = %d; want 2", n)
	}
	h.Close()
	checkHandle(t, h2, data)
	h2.Close()
	if _, err := os.Stat(h.Path()); err != nil {
		t.Errorf("refetched file after the doomed handle closed: %v", err)
	}
	openRead(t, c, obj(a.Bucket, a.Name), data)
}

func TestEvictAndDemoteWithShm(t *testing.T) {
	env := newDirEnv(t)
	cfg := env.shmConfig(t.TempDir(), shmDir(t), 64<<20, 64<<20)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	ctx := context.Background()
	data := pattern(2, 64<<10)
	env.put(t, "bkt", "obj", data)
	openRead(t, c, obj("bkt", "obj"), data)
	if _, err := c.Promote(ctx, "bkt", ""); err != nil {
		t.Fatal(err)
	}
	h := openHandle(t, c, obj("bkt", "obj"), data, Shm)
	res, err := c.Demote(ctx, "bkt", "")
	if want := (EvictResult{Pending: 1}); res != want || err != nil {
		t.Fatalf("Demote of an open shm copy = %+v, %v; want %+v", res, err, want)
	}
	if _, sh := statsOf(c); sh.PendingBytes == 0 || sh.Entries != 0 {
		t.Errorf("shm stats = %+v; want the open shm copy pending", sh)
	}
	hd := openHandle(t, c, obj("bkt", "obj"), data, Disk) // not the doomed shm copy
	hd.Close()
	h.Close()
	if files := shmFiles(t, c.hot.lay.root); len(files) != 0 {
		t.Errorf("shm files after the last Close = %q; want none", files)
	}
	// Evict takes the shm copy with the entry.
	if _, err := c.Promote(ctx, "bkt", ""); err != nil {
		t.Fatal(err)
	}
	h = openHandle(t, c, obj("bkt", "obj"), data, Shm)
	if res, err := c.Evict(ctx, "bkt", ""); res.Pending != 1 || err != nil {
		t.Fatalf("Evict = %+v, %v; want 1 pending", res, err)
	}
	h.Close()
	if files := shmFiles(t, c.hot.lay.root); len(files) != 0 {
		t.Errorf("shm files after Evict and the last Close = %q; want none", files)
	}
	if st, sh := statsOf(c); sh.PendingBytes != 0 || sh.UsedBytes != 0 || st.UsedBytes != 0 {
		t.Errorf("Stats() = %+v, shm %+v; want nothing left", st, sh)
	}
	checkInvariants(t, c)
}

func TestStaleHandles(t *testing.T) {
	env := newDirEnv(t)
	cfg := env.shmConfig(t.TempDir(), shmDir(t), 64<<20, 64<<20)
	cfg.PromoteHits = -1
	c := openCache(t, cfg)
	ctx := context.Background()
	data := pattern(3, 64<<10)
	env.put(t, "bkt", "obj", data)
	o := obj("bkt", "obj")
	d1 := openHandle(t, c, o, data, Disk)
	defer d1.Close()
	if d1.Stale() {
		t.Fatalf("fresh disk handle is stale")
	}
	if _, err := c.Promote(ctx, "bkt", ""); err != nil {
		t.Fatal(err)
	}
	if !d1.Stale() {
		t.Errorf("disk handle not stale after promotion")
	}
	s1 := openHandle(t, c, o, data, Shm)
	defer s1.Close()
	if s1.Stale() {
		t.Errorf("fresh shm handle is stale")
	}
	if _, err := c.Demote(ctx, "bkt", ""); err != nil {
		t.Fatal(err)
	}
	if !s1.Stale() {
		t.Errorf("shm handle not stale after demotion")
	}
	d2 := openHandle(t, c, o, data, Disk)
	defer d2.Close()
	if d2.Stale() || !d1.Stale() {
		t.Errorf("after demotion: new disk handle stale %v, old one %v; want false, true", d2.Stale(), d1.Stale())
	}
	checkHandle(t, d1, data)
	checkHandle(t, s1, data)
}

func TestCloseWaitsForPromoterAndWatcher(t *testing.T) {
	env := newDirEnv(t)
	shm := shmDir(t)
	var copyReturned atomic.Bool
	started := make(chan struct{})
	hooks, h := newHooks(func(ctx context.Context, key string) error {
		close(started)
		<-ctx.Done() // a long copy, until Close cancels it
		copyReturned.Store(true)
		return context.Cause(ctx)
	}, nil)
	cfg := env.shmConfig(t.TempDir(), shm, 64<<20, 64<<20)
	cfg.hooks = h
	c, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	data := pattern(4, 64<<10)
	env.put(t, "bkt", "obj", data)
	openRead(t, c, obj("bkt", "obj"), data)
	openRead(t, c, obj("bkt", "obj"), data) // queues the promotion
	<-started
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !copyReturned.Load() {
		t.Errorf("Close returned before the promotion it cancelled")
	}
	exited := map[string]bool{}
	for len(hooks.notes) > 0 {
		if n := <-hooks.notes; n.kind == "exited" {
			exited[n.key] = true
		}
	}
	if !exited["promoter"] || !exited["watcher"] {
		t.Errorf("goroutines that ended before Close returned: %v; want promoter and watcher", exited)
	}
	if files := tempFiles(t, shm); len(files) != 0 {
		t.Errorf("temp files in shm after Close: %q", files)
	}
	if files := shmFiles(t, shm); len(files) != 0 {
		t.Errorf("shm files after a cancelled promotion: %q", files)
	}
}
