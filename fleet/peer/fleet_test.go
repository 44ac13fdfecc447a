package peer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// TestReadFromOwner: three nodes read one object one after another; the
// owner fills it from GCS once and serves both others, so GCS serves the
// object's bytes once.
func TestReadFromOwner(t *testing.T) {
	e := newGCSEnv(t)
	nodes, table := fleet(t, e, 3)
	data := emulator.Pattern(1, objSize)
	o := e.put(t, bucket, "shards/train-0000.tar", data)
	owner := table.Owner(ObjectKey(o)).Name
	var order []*node // the non-owners first, then the owner
	var own *node
	for _, n := range nodes {
		if n.name == owner {
			own = n
		} else {
			order = append(order, n)
		}
	}
	order = append(order, own)
	for _, n := range order {
		checkBytes(t, n.name+" read", read(t, n.cache, o), data)
	}
	if got := originBytes(nodes...); got != objSize {
		t.Errorf("GCS served %d bytes for one %d-byte object read by 3 nodes; want %d", got, objSize, objSize)
	}
	for _, n := range order[:2] {
		st := n.src.Stats()
		if st.PeerBytes[owner] != objSize || st.OriginBytes != 0 || st.Fallbacks != 0 {
			t.Errorf("%s: Stats = %+v; want %d bytes from %s, none from GCS, no fallbacks", n.name, st, objSize, owner)
		}
	}
	if st := own.src.Stats(); st.OriginBytes != objSize {
		t.Errorf("owner %s: %d bytes from GCS; want %d", owner, st.OriginBytes, objSize)
	}
	if st := own.srv.Stats(); st.ServedBytes != 2*objSize || st.ServedRequests["ok"] == 0 {
		t.Errorf("owner %s: server Stats = %+v; want %d bytes served", owner, st, 2*objSize)
	}
}

// TestReadAllAtOnce: every node reads the same objects at the same time;
// each object still leaves GCS once (the owner's fill is single flight for
// its own readers and its peers alike).
func TestReadAllAtOnce(t *testing.T) {
	e := newGCSEnv(t)
	nodes, _ := fleet(t, e, 3)
	var objs []object.Object
	var datas [][]byte
	for i := range 4 {
		datas = append(datas, emulator.Pattern(uint64(10+i), objSize))
		objs = append(objs, e.put(t, bucket, fmt.Sprintf("shard-%d", i), datas[i]))
	}
	readAtOnce(t, nodes, objs, datas)
	if got, want := originBytes(nodes...), int64(len(objs)*objSize); got != want {
		t.Errorf("GCS served %d bytes; want %d (each object once)", got, want)
	}
}

// TestDisagreeingOwners: two nodes that each think the other owns every
// object do not forward a peer's miss back (no-forward), and reading the
// same objects on both at once ends (a fill joined by a peer's request
// that waits on that peer is broken by a 409).
func TestDisagreeingOwners(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	a := startNode(t, e, "a", la, patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "a", Addr: la.Addr().String()})), nil)

	data := emulator.Pattern(2, objSize)
	o := e.put(t, bucket, "one", data)
	checkBytes(t, "a read", read(t, a.cache, o), data)
	if st := a.src.Stats(); st.PeerBytes["b"] != objSize {
		t.Errorf("a: Stats = %+v; want %d bytes from b", st, objSize)
	}
	if st := b.src.Stats(); st.OriginBytes != objSize || st.PeerBytes["a"] != 0 {
		t.Errorf("b: Stats = %+v; want its fill for a from GCS, nothing from a", st)
	}

	var objs []object.Object
	var datas [][]byte
	for i := range 6 {
		datas = append(datas, emulator.Pattern(uint64(20+i), objSize))
		objs = append(objs, e.put(t, bucket, fmt.Sprintf("both-%d", i), datas[i]))
	}
	readAtOnce(t, []*node{a, b}, objs, datas)
	t.Logf("a: %+v; b: %+v", a.src.Stats(), b.src.Stats())
}

// TestOwnerDown: an owner whose port is closed refuses; the read falls
// back to GCS and gets the right bytes.
func TestOwnerDown(t *testing.T) {
	e := newGCSEnv(t)
	dead := listen(t)
	addr := dead.Addr().String()
	dead.Close()
	a := startNode(t, e, "a", listen(t), patient(ownedBy(Candidate{Name: "b", Addr: addr})), nil)
	data := emulator.Pattern(3, objSize)
	o := e.put(t, bucket, "x", data)
	checkBytes(t, "read", read(t, a.cache, o), data)
	st := a.src.Stats()
	if st.PeerErrors["refused"] == 0 || st.Fallbacks == 0 || st.OriginBytes != objSize {
		t.Errorf("Stats = %+v; want refusals, fallbacks and %d bytes from GCS", st, objSize)
	}
}

// TestSecondOwnerServesOnlyWhatItHolds: with the owner down, the next
// member serves a copy it holds, and for one it does not the requester
// reads GCS itself rather than wait on that member's download.
func TestSecondOwnerServesOnlyWhatItHolds(t *testing.T) {
	e := newGCSEnv(t)
	dead := listen(t)
	deadAddr := dead.Addr().String()
	dead.Close()
	lnB := listen(t)
	b := startNode(t, e, "b", lnB, patient(ownedBy()), nil) // b reads GCS for itself
	a := startNode(t, e, "a", listen(t), patient(ownedBy(Candidate{Name: "c", Addr: deadAddr},
		Candidate{Name: "b", Addr: b.addr})), nil)
	held, missing := emulator.Pattern(4, objSize), emulator.Pattern(5, objSize)
	oh, om := e.put(t, bucket, "held", held), e.put(t, bucket, "missing", missing)
	checkBytes(t, "b's own read", read(t, b.cache, oh), held)
	checkBytes(t, "held", read(t, a.cache, oh), held)
	if got := a.src.Stats().PeerBytes["b"]; got != objSize {
		t.Errorf("a read %d bytes of the held object from b; want %d", got, objSize)
	}
	checkBytes(t, "missing", read(t, a.cache, om), missing)
	if _, ok := b.cache.Lookup(bucket, "missing"); ok {
		t.Error("b filled the object it did not hold for a")
	}
	st := a.src.Stats()
	if st.OriginBytes != objSize || st.PeerErrors["not_found"] != 0 {
		t.Errorf("a's Stats = %+v; want the missing object from GCS (%d bytes), b's misses not counted as errors",
			st, objSize)
	}
}

// TestNewOwnerReadsFromHolder: a node that owns an object (after a
// membership change) and misses it reads the copy the next member holds
// instead of GCS; without one it reads GCS, with no peer error counted.
func TestNewOwnerReadsFromHolder(t *testing.T) {
	e := newGCSEnv(t)
	b := startNode(t, e, "b", listen(t), patient(ownedBy()), nil)
	a := startNode(t, e, "a", listen(t), patient(ownedBy(Candidate{Name: "a", Self: true},
		Candidate{Name: "b", Addr: b.addr})), nil)
	held, missing := emulator.Pattern(6, objSize), emulator.Pattern(7, objSize)
	oh, om := e.put(t, bucket, "held", held), e.put(t, bucket, "missing", missing)
	checkBytes(t, "b's own read", read(t, b.cache, oh), held)
	checkBytes(t, "held", read(t, a.cache, oh), held)
	checkBytes(t, "missing", read(t, a.cache, om), missing)
	st := a.src.Stats()
	if st.PeerBytes["b"] != objSize || st.OriginBytes != objSize || st.PeerErrors["not_found"] != 0 {
		t.Errorf("a's Stats = %+v; want the held object from b and the missing one from GCS (%d bytes each), "+
			"no error counted", st, objSize)
	}
	if _, ok := b.cache.Lookup(bucket, "missing"); ok {
		t.Error("b filled the object a owns")
	}
}

// TestGenerationMismatch: a generation GCS no longer has is a 404 from the
// owner and an error from GCS, never another generation's bytes; a newer
// generation is served as itself, although the owner holds the older one.
func TestGenerationMismatch(t *testing.T) {
	e := newGCSEnv(t)
	la, lb := listen(t), listen(t)
	a := startNode(t, e, "a", la, patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()})), nil)
	b := startNode(t, e, "b", lb, patient(ownedBy(Candidate{Name: "b", Self: true})), nil)

	v1, v2 := emulator.Pattern(4, objSize), emulator.Pattern(5, objSize-1000)
	o1 := e.put(t, bucket, "x", v1)
	checkBytes(t, "b reads v1", read(t, b.cache, o1), v1)
	o2 := e.put(t, bucket, "x", v2) // overwritten; the bucket keeps no versions
	checkBytes(t, "a reads v2", read(t, a.cache, o2), v2)
	if st := a.src.Stats(); st.PeerBytes["b"] != int64(len(v2)) {
		t.Errorf("a: Stats = %+v; want v2 from b", st)
	}

	gone := o1 // b dropped it for v2, and GCS keeps no versions
	r, err := a.src.NewRangeReader(t.Context(), gone, 0, 100)
	if err == nil {
		r.Close()
		t.Fatalf("NewRangeReader(%s) = a reader; want an error", gone)
	}
	if !errors.Is(err, object.ErrNotFound) && !errors.Is(err, object.ErrGenerationChanged) {
		t.Errorf("NewRangeReader(%s) error = %v; want ErrNotFound or ErrGenerationChanged", gone, err)
	}
	if st := a.src.Stats(); st.PeerErrors["not_found"] != 1 {
		t.Errorf("a: Stats = %+v; want one not_found", st)
	}
}
