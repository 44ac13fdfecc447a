package daemon

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/fleet/peer"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// startFleetMember starts a fleet member on loopback (insecure) and
// closes it at the end of the test.
func startFleetMember(t *testing.T, name string, join []string) *fleet.Fleet {
	t.Helper()
	f, err := fleet.Start(context.Background(), fleet.Config{Name: name, Listen: "127.0.0.1:0",
		PeerListen: "127.0.0.1:7947", Join: join, Insecure: true}, fleet.Options{Weight: 1 << 30, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(context.Background()); err != nil && !errors.Is(err, fleet.ErrClosed) {
			t.Error(err)
		}
	})
	return f
}

// TestFleetOwnersBalanced: three members that list the same dataset of 48
// equal objects agree on every owner and own 16 each (rendezvous alone
// gives some member far more); a member that has not listed it places
// its keys by rendezvous; a membership change rebalances.
func TestFleetOwnersBalanced(t *testing.T) {
	a := startFleetMember(t, "n1", nil)
	b := startFleetMember(t, "n2", []string{a.Self().Addr})
	c := startFleetMember(t, "n3", []string{a.Self().Addr})
	fleets := []*fleet.Fleet{a, b, c}
	deadline := time.Now().Add(time.Minute)
	for _, f := range fleets {
		for f.Table().Len() != 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%s sees %d members", f.Name(), f.Table().Len())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	dir, err := fetch.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var objs []object.Attrs
	for i := range 48 {
		objs = append(objs, object.Attrs{Object: object.Object{Bucket: "bkt", Name: fmt.Sprintf("d/%03d", i),
			Generation: int64(1000 + i)}, Size: 2 << 20})
	}
	owners := make([]*fleetOwners, 3)
	for i, f := range fleets {
		owners[i] = &fleetOwners{}
		owners[i].f.Store(f)
		src, err := peer.New(dir, peer.Config{Key: insecurePeerKey, Owners: owners[i]})
		if err != nil {
			t.Fatal(err)
		}
		if !owners[i].register(src, "gs://bkt/d/", objs) {
			t.Fatalf("%s: register changed nothing", f.Name())
		}
	}
	count := make(map[string]int)
	for _, o := range objs {
		key := peer.ObjectKey(o.Object)
		first := owners[0].Owners(key)
		if len(first) != 3 {
			t.Fatalf("Owners(%v) = %v; want 3 candidates", key, first)
		}
		count[first[0].Name]++
		for i := 1; i < 3; i++ {
			if got := owners[i].Owners(key); got[0].Name != first[0].Name {
				t.Errorf("%v: %s says %s owns it, n1 says %s", key, fleets[i].Name(), got[0].Name, first[0].Name)
			}
		}
		for i, cand := range first {
			if cand.Self != (cand.Name == "n1") || (!cand.Self && cand.Addr == "") {
				t.Errorf("candidate %d of %v = %+v", i, key, cand)
			}
		}
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if count[n] != 16 {
			t.Errorf("owned objects %v; want 16 each", count)
			break
		}
	}

	// The prefetch order takes each owner's objects in turn, in listing
	// order within each owner.
	order := owners[0].interleave(objs)
	if len(order) != len(objs) {
		t.Fatalf("interleave returned %d objects of %d", len(order), len(objs))
	}
	last := make(map[string]string)
	for j, o := range order {
		owner := owners[0].Owners(peer.ObjectKey(o.Object))[0].Name
		if want := []string{"n1", "n2", "n3"}[j%3]; owner != want {
			t.Fatalf("object %d of the prefetch order (%s) is owned by %s; want %s", j, o.Name, owner, want)
		}
		if o.Name <= last[owner] {
			t.Errorf("%s's objects out of listing order: %s after %s", owner, o.Name, last[owner])
		}
		last[owner] = o.Name
	}

	// Not listed: rendezvous.
	plain := &fleetOwners{}
	plain.f.Store(a)
	moved := 0
	for _, o := range objs {
		key := peer.ObjectKey(o.Object)
		if got, want := plain.Owners(key)[0].Name, a.Table().Owner(key).Name; got != want {
			t.Fatalf("%v: unlisted owner %s; want rendezvous %s", key, got, want)
		}
		if plain.Owners(key)[0].Name != owners[0].Owners(key)[0].Name {
			moved++
		}
	}
	t.Logf("the bound moved %d of 48 keys from their rendezvous owners", moved)

	// A member leaves: the others rebalance over two.
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for a.Table().Len() != 2 {
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("n1 still sees %d members", a.Table().Len())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !owners[0].rebalance() {
		t.Fatal("rebalance changed nothing")
	}
	count = make(map[string]int)
	for _, o := range objs {
		count[owners[0].Owners(peer.ObjectKey(o.Object))[0].Name]++
	}
	if count["n1"] != 24 || count["n2"] != 24 {
		t.Errorf("owned objects over two members %v; want 24 each", count)
	}
}

// TestFleetOwnersBounded: the newest listings are kept, up to
// maxBalancedSets; a listing again replaces the old one.
func TestFleetOwnersBounded(t *testing.T) {
	f := startFleetMember(t, "solo", nil)
	o := &fleetOwners{}
	o.f.Store(f)
	dir, err := fetch.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := peer.New(dir, peer.Config{Key: insecurePeerKey, Owners: o})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxBalancedSets + 5 {
		uri := fmt.Sprintf("gs://bkt/set%d/", i%(maxBalancedSets+3))
		objs := []object.Attrs{{Object: object.Object{Bucket: "bkt", Name: uri, Generation: 1}, Size: 20 << 20}}
		o.register(src, uri, objs)
	}
	if len(o.order) != maxBalancedSets || len(o.sets) != maxBalancedSets {
		t.Errorf("%d sets in order, %d in the map; want %d", len(o.order), len(o.sets), maxBalancedSets)
	}
	if got := o.order[len(o.order)-1]; got != "gs://bkt/set1/" {
		t.Errorf("newest set %s; want gs://bkt/set1/ (listed again last)", got)
	}
	a := o.balanced.Load()
	if a == nil || a.Len() != 3*maxBalancedSets { // three chunks of 20 MiB each
		t.Fatalf("assignment of %v keys; want %d", a.Len(), 3*maxBalancedSets)
	}
	if m, ok := a.Owner(placement.Key{Bucket: "bkt", Object: "gs://bkt/set1/", Generation: 1, Chunk: 2}); !ok || m.Name != "solo" {
		t.Errorf("chunk 2 of set1: %v, %v", m, ok)
	}
}
