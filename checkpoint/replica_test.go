package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// TestReplicaRefusals feeds a replica bad input: a manifest that is not
// one (or names escaping its prefix), files of the wrong length or bytes,
// an index out of range, a completion before every file is here. Each is
// refused with its sentinel, and a good replica is held after them; one
// cut short does not survive a restart.
func TestReplicaRefusals(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	data := []byte("replica bytes")
	m := Manifest{Format: manifestFormat, URI: "gs://" + testBucket + "/run/step-9/", Save: "51", Node: "node-b",
		Files: []File{{Name: "model.pt", Size: int64(len(data)), CRC32C: crc32.Checksum(data, castagnoli)}}}
	enc := func(m Manifest) []byte {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	bad := m
	bad.Files = []File{{Name: "../escape", Size: 1}}
	if err := e.store.ReplicaBegin(ctx, "../51", enc(m)); !errors.Is(err, ErrManifest) {
		t.Errorf("a save id escaping the store: %v; want ErrManifest", err)
	}
	for name, b := range map[string][]byte{
		"not json":     []byte("{"),
		"wrong id":     enc(Manifest{Format: manifestFormat, URI: m.URI, Save: "0be"}),
		"escape":       enc(bad),
		"wrong format": enc(Manifest{Format: "x", URI: m.URI, Save: "51"}),
	} {
		if err := e.store.ReplicaBegin(ctx, "51", b); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: ReplicaBegin = %v; want ErrManifest", name, err)
		}
	}
	if err := e.store.ReplicaFile("51", 0, bytes.NewReader(data)); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("a file before the replica began: %v; want ErrNoCheckpoint", err)
	}
	if err := e.store.ReplicaBegin(ctx, "51", enc(m)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ReplicaComplete("51", []string{"node-a"}); !errors.Is(err, ErrManifest) {
		t.Errorf("complete without the file: %v; want ErrManifest", err)
	}
	for name, c := range map[string]struct {
		i    int
		body []byte
		want error
	}{
		"short":    {0, data[:3], object.ErrShortRead},
		"long":     {0, append(bytes.Clone(data), 'x'), object.ErrShortRead},
		"flipped":  {0, []byte(strings.ToUpper(string(data))), object.ErrChecksum},
		"no index": {1, data, ErrManifest},
	} {
		if err := e.store.ReplicaFile("51", c.i, bytes.NewReader(c.body)); !errors.Is(err, c.want) {
			t.Errorf("%s: ReplicaFile = %v; want %v", name, err, c.want)
		}
	}
	// Cut short here: a restart drops it (the saver sends it again).
	e.store.Close()
	e.open()
	if err := e.store.ReplicaFile("51", 0, bytes.NewReader(data)); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("a replica cut short survived a restart: %v", err)
	}
	if err := e.store.ReplicaBegin(ctx, "51", enc(m)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ReplicaFile("51", 0, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ReplicaComplete("51", []string{"node-a"}); err != nil {
		t.Fatal(err)
	}
	st := e.store.Status(object.URI{})
	if len(st) != 1 || st[0].State != Replica {
		t.Fatalf("status %+v; want one replica", st)
	}
	// Complete, it survives a restart, then is dropped.
	e.store.Close()
	e.open()
	if st := e.store.Status(object.URI{}); len(st) != 1 || st[0].State != Replica {
		t.Fatalf("after a restart, status %+v; want the replica", st)
	}
	if err := e.store.ReplicaDrop("51"); err != nil {
		t.Fatal(err)
	}
	if st := e.store.Status(object.URI{}); len(st) != 0 {
		t.Errorf("after the drop, status %+v; want none", st)
	}
	if _, err := os.Stat(filepath.Join(e.cfg.Dir, "saves", "51")); !os.IsNotExist(err) {
		t.Errorf("the dropped replica's directory remains (%v)", err)
	}
}

// fleet is an in-process fleet of stores: members call each other's
// Replica methods directly.
type fleet struct {
	mu       sync.Mutex
	stores   map[string]*Store
	dead     map[string]bool // out of the fleet
	down     map[string]bool // in the fleet, but unreachable
	failPuts map[string]int  // member -> file pushes still to fail
	ranking  []string        // Pick's order
}

// newFleet returns a fleet whose Pick ranks members in ranking.
func newFleet(ranking ...string) *fleet {
	return &fleet{stores: map[string]*Store{}, dead: map[string]bool{}, down: map[string]bool{},
		failPuts: map[string]int{}, ranking: ranking}
}

// set changes the fleet under its lock.
func (f *fleet) set(change func(f *fleet)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

// view is one member's Fleet.
type view struct {
	f    *fleet
	self string
}

func (v *view) Pick(key string, n int) []string {
	var out []string
	for _, m := range v.f.ranking {
		if m != v.self && len(out) < n {
			out = append(out, m)
		}
	}
	return out
}

func (v *view) Dead(m string) bool {
	v.f.mu.Lock()
	defer v.f.mu.Unlock()
	return v.f.dead[m]
}

func (v *view) Prefer(context.Context, object.URI, string) {}

func (v *view) Do(ctx context.Context, member, method, p string, body io.Reader, size int64) error {
	v.f.mu.Lock()
	s, ok := v.f.stores[member], !v.f.dead[member] && !v.f.down[member]
	fail := method == "PUT" && strings.Count(p, "/") == 4 && v.f.failPuts[member] > 0
	if fail {
		v.f.failPuts[member]--
	}
	v.f.mu.Unlock()
	if s == nil || !ok {
		return fmt.Errorf("%s is unreachable", member)
	}
	if fail {
		return errors.New("injected: connection reset")
	}
	p, q, _ := strings.Cut(strings.TrimPrefix(p, "/v1/replicas/"), "?")
	parts := strings.Split(p, "/")
	switch {
	case method == "PUT" && len(parts) == 1:
		b, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		return s.ReplicaBegin(ctx, parts[0], b)
	case method == "PUT" && len(parts) == 2:
		i, err := strconv.Atoi(parts[1])
		if err != nil {
			return err
		}
		return s.ReplicaFile(parts[0], i, body)
	case method == "POST" && len(parts) == 2 && parts[1] == "complete":
		vals, err := url.ParseQuery(q)
		if err != nil {
			return err
		}
		return s.ReplicaComplete(parts[0], strings.Split(vals.Get("holders"), ","))
	case method == "DELETE" && len(parts) == 1:
		return s.ReplicaDrop(parts[0])
	}
	return fmt.Errorf("no route %s %s", method, p)
}

// join makes e's store the fleet member "node-a", saving with replicas
// (its uploads held at the gate it returns), and opens a store of its own
// for each other member, on the same bucket; it returns them and their
// caches.
func (e *env) join(f *fleet, replicas int, others ...string) (*gatedBucket, map[string]*Store, map[string]*tier.Cache) {
	e.t.Helper()
	e.cfg.Fleet, e.cfg.Replicas = &view{f, e.cfg.Node}, replicas
	g := e.gated()
	f.set(func(f *fleet) { f.stores[e.cfg.Node] = e.store })
	stores, caches := map[string]*Store{}, map[string]*tier.Cache{}
	for _, name := range others {
		dir := filepath.Join(e.t.TempDir(), "cache")
		c := cachetest.Cache(e.t, e.gcs, cachetest.NewDownloader(e.t, e.gcs), tier.Config{Dir: dir})
		s, err := Open(context.Background(), Config{Dir: filepath.Join(dir, "checkpoints"), Cache: c, Bucket: e.gcs,
			Node: name, PartSize: 1 << 20, Fleet: &view{f, name}, Replicas: replicas})
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { s.Close() })
		f.set(func(f *fleet) { f.stores[name] = s })
		stores[name], caches[name] = s, c
	}
	return g, stores, caches
}

// TestReplicationRetry: a replication that failed at its second member
// (a push reset) tries again without pushing to the first, whose replica
// is complete (it refuses more files), and reaches "peers".
func TestReplicationRetry(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	f := newFleet("node-b", "node-c")
	f.failPuts["node-c"] = 1
	g, stores, _ := e.join(f, 2, "node-b", "node-c")
	defer close(g.gate) // not committed: "peers" is the replicas' alone
	u := uri(t, "run/peers/")
	if _, err := e.store.Save(ctx, e.writeTree(map[string][]byte{"model.pt": []byte("weights")}), u, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.waitFor(u, Peers); err != nil {
		t.Fatalf("Wait(peers) after a failed push to node-c: %v; status %+v", err, e.store.Status(u))
	}
	for name, s := range stores {
		if st := s.Status(u); len(st) != 1 || st[0].State != Replica {
			t.Errorf("%s holds %+v; want a replica", name, st)
		}
	}
}

// TestFailedSaveDropsReplicas: a save that fails for good (its file
// written after the save, through a descriptor its writer kept) drops its
// replicas: at once where the holder hears of it, and, where it does not
// (unreachable then), at the holder's next sweep, which finds the claim
// gone. The holder never takes the failed save over when the saver leaves
// the fleet, and holds no dirty bytes for it.
func TestFailedSaveDropsReplicas(t *testing.T) {
	for _, reachable := range []bool{true, false} {
		t.Run(map[bool]string{true: "told", false: "swept"}[reachable], func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, Config{}, 0)
			f := newFleet("node-b")
			g, stores, caches := e.join(f, 1, "node-b")
			b := stores["node-b"]
			u := uri(t, "run/fail/")
			dir := e.writeTree(map[string][]byte{"model.pt": bytes.Repeat([]byte("w"), 4096)})
			w, err := os.OpenFile(filepath.Join(dir, "model.pt"), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			if _, err := e.store.Save(ctx, dir, u, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := e.waitFor(u, Peers); err != nil {
				t.Fatal(err)
			}
			if !reachable {
				f.set(func(f *fleet) { f.down["node-b"] = true })
			}
			if _, err := w.WriteAt([]byte("X"), 0); err != nil {
				t.Fatal(err)
			}
			close(g.gate)
			if err := e.waitFor(u, GCS); !errors.Is(err, ErrFailed) {
				t.Fatalf("Wait(gcs) = %v; want ErrFailed", err)
			}
			// The saver leaves the fleet (its VM is deleted at the end of
			// the job); the holder sweeps.
			f.set(func(f *fleet) { f.dead["node-a"], f.down["node-b"] = true, false })
			b.sweepReplicas(ctx, map[string]time.Time{})
			if st := b.Status(u); len(st) != 0 {
				t.Errorf("the holder still holds %+v", st)
			}
			if d := caches["node-b"].Stats().Tiers[0].DirtyBytes; d != 0 {
				t.Errorf("the holder holds %d dirty bytes", d)
			}
			if _, err := ReadManifest(ctx, e.gcs, u); !errors.Is(err, ErrNoCheckpoint) {
				t.Errorf("ReadManifest = %v; want ErrNoCheckpoint (the failed save is not committed)", err)
			}
		})
	}
}
