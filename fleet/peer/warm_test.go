package peer

import (
	"context"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// TestWarm: warming an object another member owns fills the owner's copy
// and keeps none here; warming a chunked object fills every chunk's copy
// at its owner, this node's own chunks included; an object this node
// owns, or a fleet of one, is left to the caller; a dead owner is an
// error, and nothing is read from GCS for it.
func TestWarm(t *testing.T) {
	e := newGCSEnv(t)
	nodes, table := chunkedFleet(t, e, 3, testChunk)
	ctx := context.Background()
	var small, mine object.Object
	for i := 0; small.Name == "" || mine.Name == ""; i++ {
		o := e.put(t, bucket, "warm/obj-"+string(rune('a'+i)), emulator.Pattern(uint64(i), 1000))
		switch table.Owner(ObjectKey(o)).Name {
		case "b-node":
			small = o
		case "a-node":
			mine = o
		}
	}
	a := nodes[0]
	local, err := a.src.Warm(ctx, object.Attrs{Object: small, Size: 1000})
	if err != nil || local {
		t.Fatalf("Warm(owned by b-node) = %v, %v; want warmed there", local, err)
	}
	if _, ok := nodes[1].cache.Lookup(small.Bucket, small.Name); !ok {
		t.Errorf("b-node holds no copy after the warm")
	}
	if _, ok := a.cache.Lookup(small.Bucket, small.Name); ok {
		t.Errorf("a-node holds a copy of what it warmed elsewhere")
	}
	if local, err := a.src.Warm(ctx, object.Attrs{Object: mine, Size: 1000}); err != nil || !local {
		t.Errorf("Warm(owned here) = %v, %v; want local", local, err)
	}

	big := e.put(t, bucket, "warm/big.bin", emulator.Pattern(99, bigSize))
	if local, err := a.src.Warm(ctx, object.Attrs{Object: big, Size: bigSize}); err != nil || local {
		t.Fatalf("Warm(chunked) = %v, %v", local, err)
	}
	for i, owner := range chunkOwners(table, big) {
		c := chunkObject(big, i)
		for _, n := range nodes {
			_, held := n.cache.Lookup(c.Bucket, c.Name)
			if held != (n.name == owner) {
				t.Errorf("%s holds chunk %d = %v; its owner is %s", n.name, i, held, owner)
			}
		}
	}
	if got, want := originBytes(nodes...), int64(1000+bigSize); got != want {
		t.Errorf("GCS served %d bytes; want %d (each warmed byte once)", got, want)
	}

	// One member: the caller caches everything itself.
	solo := startNode(t, e, "solo", listen(t), patient(TableOwners(mustTable(t, "solo"), "solo", nil, 2)), nil)
	if local, err := solo.src.Warm(ctx, object.Attrs{Object: small, Size: 1000}); err != nil || !local {
		t.Errorf("Warm in a fleet of one = %v, %v; want local", local, err)
	}

	// A dead owner: an error, no GCS read.
	dead := listen(t)
	addr := dead.Addr().String()
	dead.Close()
	lone := startNode(t, e, "x-node", listen(t), patient(ownedBy(Candidate{Name: "gone", Addr: addr}, Candidate{Name: "x-node", Self: true})), nil)
	before := originBytes(lone)
	if _, err := lone.src.Warm(ctx, object.Attrs{Object: small, Size: 1000}); err == nil {
		t.Errorf("Warm with a dead owner = nil; want an error")
	}
	if got := originBytes(lone) - before; got != 0 {
		t.Errorf("Warm with a dead owner read %d GCS bytes", got)
	}
}

// mustTable is a placement table of equal members.
func mustTable(t *testing.T, names ...string) *placement.Table {
	t.Helper()
	var ms []placement.Member
	for _, n := range names {
		ms = append(ms, placement.Member{Name: n, Weight: 1})
	}
	tab, err := placement.New(ms)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}
