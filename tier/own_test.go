package tier

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// ownsPrefix is an ownership that owns the objects under "own/".
func ownsPrefix(a object.Attrs) bool { return strings.HasPrefix(a.Name, "own/") }

// TestOwnershipEvictsUnownedFirst fills a cache of three objects with two
// owned and one unowned copy, the owned ones least recently used: new
// objects displace the unowned copy first, then owned ones in LRU order;
// without the preference, plain LRU.
func TestOwnershipEvictsUnownedFirst(t *testing.T) { inLayouts(t, testOwnershipEvictsUnownedFirst) }

func testOwnershipEvictsUnownedFirst(t *testing.T, config func(e *dirEnv, dir string, maxBytes int64) Config) {
	e := newDirEnv(t)
	c := openCache(t, config(e, t.TempDir(), 3*objSize))
	c.SetOwnership(ownsPrefix)
	o := e.putObjects(t, "own/a", "own/b", "x", "y", "z")
	touch(t, c, o[0], o[1], o[2]) // LRU order: own/a, own/b, x
	touch(t, c, o[3])
	if got := residents(c, "own/a", "own/b", "x", "y"); !got["own/a"] || !got["own/b"] || got["x"] || !got["y"] {
		t.Errorf("after opening y: cached %v; want x evicted, the owned copies kept", got)
	}
	touch(t, c, o[4]) // y is the only unowned copy left, and the most recent but one
	if got := residents(c, "own/a", "own/b", "y", "z"); !got["own/a"] || !got["own/b"] || got["y"] || !got["z"] {
		t.Errorf("after opening z: cached %v; want y evicted", got)
	}
	touch(t, c, o[2]) // only z is unowned: it goes although own/a is older
	if got := residents(c, "own/a", "own/b", "z", "x"); !got["own/a"] || !got["own/b"] || got["z"] || !got["x"] {
		t.Errorf("after opening x: cached %v; want z evicted", got)
	}
	c.SetOwnership(nil)
	touch(t, c, o[3]) // plain LRU again: own/a, the least recently used, goes
	if got := residents(c, "own/a", "own/b", "x", "y"); got["own/a"] || !got["own/b"] || !got["x"] || !got["y"] {
		t.Errorf("without ownership: cached %v; want own/a evicted (LRU)", got)
	}
	checkInvariants(t, c)
}

// ownedWithPlan opens a cache with room for three objects that owns
// "own/…", puts names, opens the first three in order, and announces a
// plan of the objects at the planned indexes once the planner is idle.
func ownedWithPlan(t *testing.T, names []string, planned ...int) (*Cache, []object.Object) {
	t.Helper()
	e := newDirEnv(t)
	c := openCache(t, e.config(t.TempDir(), 3*objSize))
	hooks := planHooks(c)
	c.SetOwnership(ownsPrefix)
	o := e.putObjects(t, names...)
	touch(t, c, o[:3]...)
	var plan []object.Object
	for _, i := range planned {
		plan = append(plan, o[i])
	}
	if err := c.Plan(context.Background(), "plan", plan); err != nil {
		t.Fatal(err)
	}
	hooks.awaitIdle(t)
	return c, o
}

// TestOwnershipWithPlans checks the preference among copies no plan
// needs while a plan is announced, and that a change of ownership is seen.
func TestOwnershipWithPlans(t *testing.T) {
	c, o := ownedWithPlan(t, []string{"own/a", "x", "p", "q"}, 2) // own/a, x: no plan needs them; p is planned
	touch(t, c, o[3])
	if got := residents(c, "own/a", "x", "p", "q"); !got["own/a"] || got["x"] || !got["p"] || !got["q"] {
		t.Errorf("cached %v; want x evicted: unplanned and not owned", got)
	}
	c.SetOwnership(func(a object.Attrs) bool { return a.Name == "q" }) // ownership moved
	touch(t, c, o[1])
	if got := residents(c, "own/a", "x", "p", "q"); got["own/a"] || !got["x"] || !got["p"] || !got["q"] {
		t.Errorf("after ownership moved: cached %v; want own/a evicted (no longer owned)", got)
	}
	checkInvariants(t, c)
}

// TestOwnershipOverPlans: a copy held for this node's readers goes before
// an owned one even while a plan needs it (its owner can serve it again;
// the fleet keeps the owned one only here).
func TestOwnershipOverPlans(t *testing.T) {
	c, o := ownedWithPlan(t, []string{"own/a", "p", "r", "y"}, 1, 2)
	touch(t, c, o[3])
	if got := residents(c, "own/a", "p", "r", "y"); !got["own/a"] || !got["p"] || got["r"] || !got["y"] {
		t.Errorf("cached %v; want r evicted (planned farthest, not owned), own/a kept", got)
	}
	checkInvariants(t, c)
}

// awaitOwnershipWait waits until a fill waits for a reader's copy to be
// released rather than evict an owned copy.
func awaitOwnershipWait(t *testing.T, c *Cache) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c.mu.Lock()
		waiting := c.base.wakeOnRelease
		c.mu.Unlock()
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no fill waits for a copy to be released")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestOwnershipWaitsForRelease: a copy for this node's readers waits for
// another reader's copy to be released rather than evict an owned copy;
// one that would wait for ever evicts it after ownershipWait.
func TestOwnershipWaitsForRelease(t *testing.T) {
	e := newDirEnv(t)
	c := openCache(t, e.config(t.TempDir(), 3*objSize))
	c.SetOwnership(ownsPrefix)
	o := e.putObjects(t, "own/a", "own/b", "x", "y", "z")
	touch(t, c, o[0], o[1])
	hx, err := c.Open(context.Background(), o[2])
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		h, err := c.Open(context.Background(), o[3])
		if err == nil {
			h.Close()
		}
		opened <- err
	}()
	awaitOwnershipWait(t, c)
	if got := residents(c, "own/a", "own/b", "x", "y"); !got["own/a"] || !got["own/b"] || !got["x"] || got["y"] {
		t.Errorf("while y waits: cached %v; want own/a, own/b and x", got)
	}
	hx.Close()
	if err := <-opened; err != nil {
		t.Fatalf("Open(y) = %v", err)
	}
	if got := residents(c, "own/a", "own/b", "x", "y"); !got["own/a"] || !got["own/b"] || got["x"] || !got["y"] {
		t.Errorf("after x's release: cached %v; want x evicted for y, the owned copies kept", got)
	}

	// A reader that never lets go: after ownershipWait an owned copy goes.
	defer func(d time.Duration) { ownershipWait = d }(ownershipWait)
	ownershipWait = 50 * time.Millisecond
	hy, err := c.Open(context.Background(), o[3])
	if err != nil {
		t.Fatal(err)
	}
	defer hy.Close()
	hz, err := c.Open(context.Background(), o[4])
	if err != nil {
		t.Fatalf("Open(z) while y is held = %v", err)
	}
	hz.Close()
	if got := residents(c, "own/a", "own/b", "y", "z"); got["own/a"] || !got["own/b"] || !got["y"] || !got["z"] {
		t.Errorf("after the wait: cached %v; want own/a (least recently used) evicted", got)
	}
	checkInvariants(t, c)
}
