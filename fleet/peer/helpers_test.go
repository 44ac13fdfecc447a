package peer

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// testKey is the data-plane key of the test fleets.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// bucket is the bucket the test fleets serve.
const bucket = "data"

// objSize is the size of the test objects: a few slices of testFetch and
// a ragged tail.
const objSize = 2<<20 + 123

// testFetch is the Downloader config of the test nodes: 512 KiB slices,
// so one object is several peer requests, and fast retries.
var testFetch = fetch.Config{SliceSize: 512 << 10, Connections: 4, MaxAttempts: 4,
	BackoffInitial: time.Millisecond, BackoffMax: 10 * time.Millisecond, SmallObjectSize: fetch.NoSmallLane}

// patient returns a Source config whose timeouts no loaded test machine
// reaches: tests that want a timeout set their own.
func patient(owners Owners) Config {
	return Config{Key: testKey, Owners: owners, FirstByteFloor: time.Minute, FirstByteMax: time.Minute,
		StallTimeout: time.Minute}
}

// gcsEnv is the emulator and a GCS source over it.
type gcsEnv struct {
	emu *emulator.Server
	gcs *fetch.GCS
}

func newGCSEnv(t testing.TB) *gcsEnv {
	t.Helper()
	emu := cachetest.Emulator(t, emulator.Options{Buckets: []string{bucket, "other"}})
	gcs, err := fetch.NewGCS(context.Background(), fetch.GCSConfig{Endpoint: emu.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gcs.Close() })
	return &gcsEnv{emu: emu, gcs: gcs}
}

// put writes bucket/name with data and returns the object at its new
// generation.
func (e *gcsEnv) put(t testing.TB, bkt, name string, data []byte) object.Object {
	t.Helper()
	gen, err := e.emu.Put(bkt, name, data)
	if err != nil {
		t.Fatal(err)
	}
	return object.Object{Bucket: bkt, Name: name, Generation: gen}
}

// node is one agent of a test fleet: a peer Source over the emulator, a
// Downloader and tier.Cache over that, and a Server on 127.0.0.1.
type node struct {
	name string
	addr string
	src  *Source
	// local and owner are the Downloader's two budgets.
	local, owner *fetch.Downloader
	cache        *tier.Cache
	srv          *Server
}

// listen opens a listener on a fresh loopback port.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// startNode builds a node serving on ln. cfg is its Source config;
// scfg, if set, adjusts its Server config.
func startNode(t testing.TB, e *gcsEnv, name string, ln net.Listener, cfg Config, scfg func(*ServerConfig)) *node {
	t.Helper()
	return startNodeFetch(t, e, name, ln, cfg, testFetch, scfg)
}

// startNodeFetch is startNode with fcfg as its Downloaders' config.
func startNodeFetch(t testing.TB, e *gcsEnv, name string, ln net.Listener, cfg Config, fcfg fetch.Config,
	scfg func(*ServerConfig)) *node {
	t.Helper()
	src, err := New(e.gcs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	var fs [2]*fetch.Downloader
	for i := range fs {
		if fs[i], err = fetch.NewDownloader(src, fcfg); err != nil {
			t.Fatal(err)
		}
	}
	dl, err := NewDownloader(src, fs[0], fs[1])
	if err != nil {
		t.Fatal(err)
	}
	c := cachetest.Cache(t, src, dl, tier.Config{})
	src.SetCache(c)
	sc := ServerConfig{Key: testKey, Cache: c, Buckets: []string{bucket}, Forwarding: src, ChunkSize: cfg.ChunkSize}
	if scfg != nil {
		scfg(&sc)
	}
	srv, err := NewServer(sc)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, ln, srv)
	return &node{name: name, addr: ln.Addr().String(), src: src, local: fs[0], owner: fs[1], cache: c, srv: srv}
}

// serve serves h on ln until the test ends.
func serve(t testing.TB, ln net.Listener, h http.Handler) {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: time.Minute, ErrorLog: log.New(io.Discard, "", 0)}
	var wg sync.WaitGroup
	wg.Go(func() { hs.Serve(ln) }) // returns ErrServerClosed at Close
	t.Cleanup(func() {
		hs.Close()
		wg.Wait()
	})
}

// fleet starts n nodes named a-node, b-node, … owning objects by a
// placement table of equal weights (TableOwners, 2 candidates).
func fleet(t *testing.T, e *gcsEnv, n int) ([]*node, *placement.Table) {
	t.Helper()
	return chunkedFleet(t, e, n, 0)
}

// chunkedFleet is fleet with chunk size cs (0: the default).
func chunkedFleet(t *testing.T, e *gcsEnv, n int, cs int64) ([]*node, *placement.Table) {
	t.Helper()
	var members []placement.Member
	lns := make([]net.Listener, n)
	addrs := make(map[string]string)
	for i := range n {
		name := string(rune('a'+i)) + "-node"
		members = append(members, placement.Member{Name: name, Weight: 1})
		lns[i] = listen(t)
		addrs[name] = lns[i].Addr().String()
	}
	table, err := placement.New(members)
	if err != nil {
		t.Fatal(err)
	}
	nodes := make([]*node, n)
	for i, m := range members {
		cfg := patient(TableOwners(table, m.Name, addrs, 2))
		cfg.ChunkSize = cs
		nodes[i] = startNode(t, e, m.Name, lns[i], cfg, nil)
	}
	return nodes, table
}

// ownedBy returns Owners that rank the named candidates for every key.
func ownedBy(cs ...Candidate) Owners {
	return OwnersFunc(func(placement.Key) []Candidate { return cs })
}

// read opens o on c and returns its bytes.
func read(t testing.TB, c *tier.Cache, o object.Object) []byte {
	t.Helper()
	b, err := tryRead(c, o)
	if err != nil {
		t.Fatalf("read %s: %v", o, err)
	}
	return b
}

// tryRead opens o on c and returns its bytes or the error.
func tryRead(c *tier.Cache, o object.Object) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a deadlock fails, not hangs
	defer cancel()
	h, err := c.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	b := make([]byte, h.Size())
	_, err = h.ReadAt(b, 0)
	return b, err
}

// readAtOnce reads every object of objs (whose bytes are datas) on every
// node, all at once, and checks the bytes.
func readAtOnce(t *testing.T, nodes []*node, objs []object.Object, datas [][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	for _, n := range nodes {
		for i, o := range objs {
			wg.Go(func() {
				got, err := tryRead(n.cache, o)
				if err != nil {
					t.Errorf("%s: read %s: %v", n.name, o, err)
					return
				}
				checkBytes(t, n.name+" read "+o.Name, got, datas[i])
			})
		}
	}
	wg.Wait()
}

// originBytes returns the bytes the nodes read from GCS. (The emulator's
// count may lag: it counts a body after the handler returns, which can be
// after the client has every byte.)
func originBytes(nodes ...*node) int64 {
	var n int64
	for _, x := range nodes {
		n += x.src.Stats().OriginBytes
	}
	return n
}

// checkBytes reports a difference between got and want.
func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Errorf("%s: %d bytes, want %d; first difference at %d", what, len(got), len(want), i)
	}
}
