package fleettest

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fleet/placement"
)

// TestHotObject: every node reads one large object at once. Its chunks
// are placed apart, so each node fills only the chunks it owns from GCS
// and serves them to the others: the object leaves GCS once, and each
// node serves its owned chunks to the N-1 others (a whole-object owner
// would serve all of it).
func TestHotObject(t *testing.T) {
	need(t)
	const chunks = 5
	size := chunks*placement.DefaultChunkSize + 12345 // 6 chunks, the last short
	h := fleet(t, Config{Objects: 1, Size: size, GCSMbit: 160, PeerMbit: 640, DiskMax: "512MiB"})
	ctx := context.Background()
	sum, per := prefetchEvery(t, h, 120*time.Second)
	for _, nd := range h.Nodes {
		if st, err := nd.Status(ctx); err == nil {
			t.Logf("%s: %d ranges read, %d split", nd.Name, st.Fetch.Ranges, st.Fetch.Splits)
		}
	}
	if float64(sum) > 1.05*float64(size) {
		t.Errorf("GCS bytes %d > 1.05·D (%d)", sum, size)
	}

	// Who owns which chunk, from the members' weights, the object's
	// generation and the dataset.
	fs, err := h.Nodes[0].Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var members []placement.Member
	for _, m := range fs.Members {
		members = append(members, placement.Member{Name: m.Name, Weight: m.Weight})
	}
	table, err := placement.New(members)
	if err != nil {
		t.Fatal(err)
	}
	out, err := h.Nodes[0].CLI(ctx, "ls", "--json", h.URI())
	if err != nil {
		t.Fatal(err)
	}
	var objs []control.Object
	if err := json.Unmarshal(out, &objs); err != nil || len(objs) != 1 {
		t.Fatalf("ls --json: %v: %s", err, out)
	}
	// The prefetch listed the dataset, so each node balanced its chunks'
	// owners over it.
	var items []placement.Item
	for i := range placement.Chunks(size, placement.DefaultChunkSize) {
		k := placement.Key{Bucket: h.cfg.Bucket, Object: objs[0].Name, Generation: objs[0].Generation, Chunk: i}
		_, cn := placement.ChunkRange(size, placement.DefaultChunkSize, i)
		items = append(items, placement.Item{Key: k, Size: cn})
	}
	balanced := table.Balance(items, placement.DefaultSlack)
	owned := make(map[string]int64)
	for _, it := range items {
		m, _ := balanced.Owner(it.Key)
		owned[m.Name] += it.Size
	}
	t.Logf("bytes owned per node: %v", owned)
	others := int64(len(h.Nodes) - 1)
	for i, nd := range h.Nodes {
		st, err := nd.Fleet(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// A chunk read from GCS after its owner failed (none should here)
		// moves at most one chunk per reader.
		want, slack := others*owned[nd.Name], others*placement.DefaultChunkSize
		if got := st.Traffic.ServedBytes; got > want || got < want-slack {
			t.Errorf("%s served %d bytes; want %d (its chunks to each other node)", nd.Name, got, want)
		}
		if got := per[i]; got < owned[nd.Name] || float64(got) > float64(owned[nd.Name])+0.01*float64(size)+float64(slack) {
			t.Errorf("%s: %d GCS bytes; want about the %d bytes of its chunks", nd.Name, got, owned[nd.Name])
		}
	}
	wantData := emulator.Pattern(1, int(size))
	for _, nd := range h.Nodes {
		got, err := nd.Cat(ctx, h.ObjectName(0))
		if err != nil {
			t.Errorf("%s: cat: %v", nd.Name, err)
		} else if !bytes.Equal(got, wantData) {
			t.Errorf("%s: %d bytes, %d differing from the first", nd.Name, len(got), diff(got, wantData))
		}
		if rep, err := nd.Verify(ctx); err != nil || rep.Bad() != 0 {
			t.Errorf("%s: verify: %v %+v", nd.Name, err, rep)
		}
	}
}
