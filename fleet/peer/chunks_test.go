package peer

import (
	"net"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// testChunk is the chunk size of the chunked test fleets: a quarter of a
// testFetch slice, so one slice spans several chunks and their owners.
const testChunk = 128 << 10

// bigSize is the size of the chunked test objects: 24 chunks and a ragged
// tail.
const bigSize = 24*testChunk + 4567

// chunkOwners returns the owner of each chunk of o (bigSize bytes).
func chunkOwners(table *placement.Table, o object.Object) []string {
	out := make([]string, placement.Chunks(bigSize, testChunk))
	for i := range out {
		out[i] = table.Owner(placement.Key{Bucket: o.Bucket, Object: o.Name, Generation: o.Generation, Chunk: i}).Name
	}
	return out
}

// TestChunkedReadAllAtOnce: every node reads one large object at once;
// each chunk leaves GCS once, through its owner, which serves it to both
// other nodes, so the object's bytes spread over every node's uplink; the
// owners keep their chunks as chunk copies, kept first, and the whole
// copies are not.
func TestChunkedReadAllAtOnce(t *testing.T) {
	e := newGCSEnv(t)
	nodes, table := chunkedFleet(t, e, 3, testChunk)
	data := emulator.Pattern(21, bigSize)
	o := e.put(t, bucket, "hot/shard-0000.bin", data)
	readAtOnce(t, nodes, []object.Object{o}, [][]byte{data})

	if got := originBytes(nodes...); got != bigSize {
		t.Errorf("GCS served %d bytes for one %d-byte object read by 3 nodes; want %d (each chunk once)", got, bigSize, bigSize)
	}
	owners := chunkOwners(table, o)
	want := make(map[string]int64)
	for i, name := range owners {
		_, n := placement.ChunkRange(bigSize, testChunk, i)
		want[name] += 2 * n // both other nodes read it from its owner
	}
	if len(want) != 3 {
		t.Fatalf("chunk owners %v: want all three nodes to own some (pick another object name)", owners)
	}
	for _, n := range nodes {
		if got := n.srv.Stats().ServedBytes; got != want[n.name] {
			t.Errorf("%s served %d bytes; want %d (twice its chunks)", n.name, got, want[n.name])
		}
		if n.src.Keeps(object.Attrs{Object: o, Size: bigSize}) {
			t.Errorf("%s keeps the whole copy first; want only its chunks kept", n.name)
		}
		for i, owner := range owners {
			c := chunkObject(o, i)
			_, held := n.cache.Lookup(c.Bucket, c.Name)
			if held != (owner == n.name) {
				t.Errorf("%s: holds chunk %d copy = %v; owner is %s", n.name, i, held, owner)
			}
			_, cn := placement.ChunkRange(bigSize, testChunk, i)
			if keeps := n.src.Keeps(object.Attrs{Object: c, Size: cn}); keeps != (owner == n.name) {
				t.Errorf("%s: Keeps(chunk %d) = %v; owner is %s", n.name, i, keeps, owner)
			}
		}
	}
}

// TestChunkedOwnerDown: one of three members is down; the chunks it owns
// are read from GCS (its successor holds no copy), the rest from their
// owners, and every byte is right.
func TestChunkedOwnerDown(t *testing.T) {
	e := newGCSEnv(t)
	members := []placement.Member{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}, {Name: "c", Weight: 1}}
	table, err := placement.New(members)
	if err != nil {
		t.Fatal(err)
	}
	la, lb, lc := listen(t), listen(t), listen(t)
	addrs := map[string]string{"a": la.Addr().String(), "b": lb.Addr().String(), "c": lc.Addr().String()}
	lc.Close() // c is down: connections are refused
	start := func(name string, ln net.Listener) *node {
		cfg := patient(TableOwners(table, name, addrs, 2))
		cfg.ChunkSize = testChunk
		return startNode(t, e, name, ln, cfg, nil)
	}
	a, b := start("a", la), start("b", lb)
	data := emulator.Pattern(22, bigSize)
	o := e.put(t, bucket, "big", data)
	checkBytes(t, "a reads", read(t, a.cache, o), data)
	checkBytes(t, "b reads", read(t, b.cache, o), data)
	var down int64
	for i, owner := range chunkOwners(table, o) {
		if owner == "c" {
			_, n := placement.ChunkRange(bigSize, testChunk, i)
			down += n
		}
	}
	if down == 0 {
		t.Fatal("c owns no chunk: pick another object name")
	}
	// A refusal costs no wait, and c is skipped while it cools down.
	if st := a.src.Stats(); st.PeerErrors["refused"] == 0 || st.FailoverMaxSeconds > 1 {
		t.Errorf("a: Stats = %+v; want refusals from c, and no read waiting long on it", st)
	}
	// Each of a and b reads c's chunks from GCS at most once each, plus
	// their own chunks once.
	if got := originBytes(a, b); got < bigSize || got > bigSize+down {
		t.Errorf("GCS served %d bytes; want between %d and %d", got, bigSize, bigSize+down)
	}
}

// corruptChunkedPair starts two nodes with testChunk chunks: a, whose
// Source ranks aOwners, and b on lb, which owns every key and flips a byte
// of everything it sends.
func corruptChunkedPair(t *testing.T, e *gcsEnv, aOwners Owners, lb net.Listener) (a, b *node) {
	t.Helper()
	cfgA, cfgB := patient(aOwners), patient(ownedBy(Candidate{Name: "b", Self: true}))
	cfgA.ChunkSize, cfgB.ChunkSize = testChunk, testChunk
	a = startNode(t, e, "a", listen(t), cfgA, nil)
	b = startNode(t, e, "b", lb, cfgB, func(c *ServerConfig) {
		c.CorruptForTest = func(_ object.Object, _ int64, p []byte) { p[0] ^= 0x55 }
	})
	return a, b
}

// TestChunkedCorruptPeer: a peer that flips a byte of every chunk it sends
// is caught by the object's CRC32C; the re-read goes to GCS.
func TestChunkedCorruptPeer(t *testing.T) {
	e := newGCSEnv(t)
	lb := listen(t)
	a, b := corruptChunkedPair(t, e, ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}), lb)
	data := emulator.Pattern(23, bigSize)
	o := e.put(t, bucket, "x", data)
	checkBytes(t, "a reads", read(t, a.cache, o), data)
	if st := a.local.Stats(); st.CRCFailures != 1 {
		t.Errorf("a: %d CRC failures; want 1 (the peer's bytes)", st.CRCFailures)
	}
	if st := a.src.Stats(); st.PeerBytes["b"] != bigSize || st.OriginBytes != bigSize {
		t.Errorf("a: Stats = %+v; want the object once from b, once (the re-read) from GCS", st)
	}
	if n := b.srv.Stats().ServedRequests["ok"]; n != int64(placement.Chunks(bigSize, testChunk)) {
		t.Errorf("b answered %d requests; want one per chunk", n)
	}
}

// TestChunkRequests: the server serves a chunk request from a whole copy
// it holds or from its chunk copy, and refuses a range outside the chunk.
func TestChunkRequests(t *testing.T) {
	e := newGCSEnv(t)
	ln := listen(t)
	cfg := patient(ownedBy(Candidate{Name: "s", Self: true}))
	cfg.ChunkSize = testChunk
	s := startNode(t, e, "s", ln, cfg, nil)
	data := emulator.Pattern(24, bigSize)
	o := e.put(t, bucket, "c", data)
	chunkURI := func(off, n int64, chunk int, cached bool) string {
		return Path + "?" + request{obj: o, off: off, n: n, chunked: true, chunk: chunk, cached: cached}.query()
	}
	for _, c := range []struct {
		name   string
		uri    string
		status int
		want   []byte
	}{
		{"cached only, not held", chunkURI(testChunk, 10, 1, true), 404, nil},
		{"fills chunk 1", chunkURI(testChunk+5, 100, 1, false), 200, data[testChunk+5 : testChunk+105]},
		{"held now", chunkURI(testChunk, testChunk, 1, true), 200, data[testChunk : 2*testChunk]},
		{"last chunk, ragged", chunkURI(24*testChunk, 4567, 24, false), 200, data[24*testChunk:]},
		{"past the chunk", chunkURI(testChunk-1, 2, 0, false), 400, nil},
		{"before the chunk", chunkURI(0, 2, 1, false), 400, nil},
		{"past the object", chunkURI(24*testChunk, 4568, 24, false), 416, nil},
		{"no such chunk", chunkURI(30*testChunk, 1, 30, false), 404, nil},
	} {
		status, _, body := get(t, s.addr, c.uri, testKey)
		if status != c.status || c.want != nil && string(body) != string(c.want) {
			t.Errorf("%s: status %d, %d bytes; want %d, %d bytes", c.name, status, len(body), c.status, len(c.want))
		}
	}
	// A whole copy held here answers chunk requests too.
	read(t, s.cache, o)
	if status, _, body := get(t, s.addr, chunkURI(3*testChunk, 7, 3, true), testKey); status != 200 ||
		string(body) != string(data[3*testChunk:3*testChunk+7]) {
		t.Errorf("chunk 3 from the whole copy: status %d", status)
	}
	if got := s.srv.Stats().ServedRequests["ok"]; got != 4 {
		t.Errorf("%d answers ok; want 4", got)
	}
}

// TestParseChunk: chunk names round-trip; other names, including ones that
// look almost like chunk names, are not chunks.
func TestParseChunk(t *testing.T) {
	o := object.Object{Bucket: "b", Name: "a/b.bin", Generation: 9}
	for i := range []int{0, 1, 17, 1 << 30} {
		c := chunkObject(o, i)
		whole, j, ok := parseChunk(c)
		if !ok || whole != o || j != i || !IsChunk(c.Name) {
			t.Errorf("parseChunk(%q) = %v, %d, %v; want %v, %d, true", c.Name, whole, j, ok, o, i)
		}
	}
	for _, name := range []string{"a", "a\x00chunk ", "a\x00chunk -1", "a\x00chunk 01", "\x00chunk 1", "a\x00chunk 1x",
		"a\x00chunk 99999999999999999999", "a chunk 1"} {
		if _, _, ok := parseChunk(object.Object{Bucket: "b", Name: name, Generation: 1}); ok {
			t.Errorf("parseChunk(%q) accepted", name)
		}
	}
}

// FuzzParseChunk: parseChunk accepts exactly the names chunkObject makes.
func FuzzParseChunk(f *testing.F) {
	for _, s := range []string{"a\x00chunk 0", "a\x00chunk 12", "a\x00chunk 012", "x", "\x00chunk 3", "a\x00chunk 1\x00chunk 2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		o := object.Object{Bucket: "b", Name: name, Generation: 1}
		whole, i, ok := parseChunk(o)
		if !ok {
			return
		}
		if i < 0 || whole.Name == "" || chunkObject(whole, i) != o {
			t.Fatalf("parseChunk(%q) = %q, %d: does not round-trip", name, whole.Name, i)
		}
	})
}
