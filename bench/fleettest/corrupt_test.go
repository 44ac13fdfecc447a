package fleettest

import (
	"context"
	"testing"
	"time"
)

// TestCorruptPeer: one member flips a byte of everything it serves (a
// test hook of the daemon). Every node prefetches the dataset at once;
// the others catch each object assembled from its bytes by the CRC32C,
// read it again from GCS, and nothing corrupt is cached or served.
func TestCorruptPeer(t *testing.T) {
	need(t)
	h := fleet(t, Config{CorruptServing: 2})
	ctx := context.Background()
	prefetchEvery(t, h, 90*time.Second)
	checkCopies(t, h, h.Nodes, func(i int) [][]byte { return [][]byte{want(i)} })
	bad := h.Nodes[1]
	fs, err := bad.Fleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Traffic.ServedBytes == 0 {
		t.Fatalf("%s served nothing: the test shows nothing", bad.Name)
	}
	for _, n := range []*Node{h.Nodes[0], h.Nodes[2]} {
		st, err := n.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d CRC32C mismatches caught, %d objects downloaded", n.Name, st.Fetch.CRCFailures, st.Fetch.Objects)
		if st.Fetch.CRCFailures == 0 {
			t.Errorf("%s caught no CRC32C mismatch; %s served %d bytes, all corrupt", n.Name, bad.Name, fs.Traffic.ServedBytes)
		}
	}
}
