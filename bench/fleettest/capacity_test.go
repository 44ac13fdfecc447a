package fleettest

import (
	"context"
	"testing"
	"time"
)

// TestCapacity: a dataset of 2.5 times each node's disk budget B, which
// all three nodes prefetch at once. A node cannot hold it, so each caches
// the objects it owns (balanced: no owner's share exceeds its B) and warms
// the others at their owners: the dataset leaves GCS once, every object
// is cached on some node, no node exceeds B, and a second prefetch reads
// nothing from GCS.
func TestCapacity(t *testing.T) {
	need(t)
	const objects, size = 30, 2 << 20
	h := fleet(t, Config{Objects: objects, Size: size, DiskMax: "24MiB"}) // D = 60 MiB = 2.5·B
	ctx := context.Background()
	b, d := int64(24<<20), h.D()
	sum, _ := prefetchEvery(t, h, 120*time.Second)
	if float64(sum) > 1.05*float64(d) {
		t.Errorf("GCS bytes %d > 1.05·D (%d)", sum, d)
	}
	where := make(map[string]int)
	for _, n := range h.Nodes {
		names, err := n.Cached(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			where[name]++
		}
		used, err := n.DiskUsed(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d objects cached, %d bytes of B = %d", n.Name, len(names), used, b)
		if used > b {
			t.Errorf("%s holds %d bytes > B = %d", n.Name, used, b)
		}
		r, err := n.Verify(ctx)
		if err != nil || r.Bad() > 0 {
			t.Errorf("%s: verify: %v, %v", n.Name, r, err)
		}
	}
	for i := range objects {
		if where[h.ObjectName(i)] == 0 {
			t.Errorf("%s is cached on no node", h.ObjectName(i))
		}
	}
	again, _ := prefetchEvery(t, h, 60*time.Second)
	if float64(again-sum) > 0.01*float64(d) {
		t.Errorf("second prefetch read %d GCS bytes; want ≤ 0.01·D = %.0f", again-sum, 0.01*float64(d))
	}
	// Every node reads every object right, through the owners.
	for _, n := range h.Nodes {
		for i := range objects {
			got, err := n.Cat(ctx, h.ObjectName(i))
			if err != nil {
				t.Fatalf("%s: cat %s: %v", n.Name, h.ObjectName(i), err)
			}
			if diff(got, want(i)) != 0 || len(got) != len(want(i)) {
				t.Errorf("%s: %s differs from GCS", n.Name, h.ObjectName(i))
			}
		}
	}
}
