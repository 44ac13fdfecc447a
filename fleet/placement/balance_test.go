package placement

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// items returns n keys of a dataset's shards, size bytes each.
func items(n int, size int64) []Item {
	var out []Item
	for i := range n {
		k := Key{Bucket: "bkt", Object: fmt.Sprintf("train/shard-%05d", i), Generation: 1700000000000000 + int64(i)}
		out = append(out, Item{Key: k, Size: size})
	}
	return out
}

// checkBound fails if a member owns more than its bound (plus one key).
func checkBound(t *testing.T, a *Assignment, its []Item, slack float64) {
	t.Helper()
	var total, largest, sum int64
	for _, it := range its {
		total += it.Size
		largest = max(largest, it.Size)
	}
	tab := a.Table()
	for _, m := range tab.Members() {
		got := a.OwnedBytes(m.Name)
		sum += got
		bound := (1+slack)*tab.OwnedShare(m.Name)*float64(total) + float64(largest)
		if float64(got) > bound {
			t.Errorf("%s owns %d bytes; bound %.0f", m.Name, got, bound)
		}
	}
	if sum != total {
		t.Errorf("owned bytes sum to %d; want %d", sum, total)
	}
}

// TestBalanceEqualKeys: 48 equal keys over 3 equal members, where
// rendezvous alone gives one of them 46 % of the bytes: 16 each.
func TestBalanceEqualKeys(t *testing.T) {
	tab := mustNew(t, []Member{{"n1", 1}, {"n2", 1}, {"n3", 1}})
	its := items(48, 2<<20)
	a := tab.Balance(its, DefaultSlack)
	for _, m := range tab.Members() {
		if got := a.OwnedBytes(m.Name); got != 16*(2<<20) {
			t.Errorf("%s owns %d keys' bytes (%d); want 16 keys", m.Name, got/(2<<20), got)
		}
	}
	if a.Len() != 48 {
		t.Errorf("Len = %d; want 48", a.Len())
	}
	for _, it := range its {
		m, ok := a.Owner(it.Key)
		if !ok {
			t.Fatalf("Owner(%v) missing", it.Key)
		}
		if own := a.Owners(it.Key, 3); len(own) != 3 || own[0] != m {
			t.Errorf("Owners(%v) = %v; want 3 starting with %v", it.Key, own, m)
		}
	}
}

// TestBalanceWeighted: mixed sizes over weighted members stay within each
// member's bound, and the answer does not depend on the items' order or
// on duplicates.
func TestBalanceWeighted(t *testing.T) {
	tab := mustNew(t, []Member{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 2}})
	rng := rand.New(rand.NewPCG(1, 2))
	var its []Item
	for i, it := range items(500, 0) {
		it.Size = 1<<20 + rng.Int64N(8<<20)
		its = append(its, it)
		if i%7 == 0 {
			its = append(its, it) // a duplicate counts once
		}
	}
	a := tab.Balance(its, DefaultSlack)
	if a.Len() != 500 {
		t.Errorf("Len = %d; want 500", a.Len())
	}
	checkBound(t, a, items500(its), DefaultSlack)
	shuffled := append([]Item(nil), its...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b := tab.Balance(shuffled, DefaultSlack)
	for _, it := range its {
		ma, _ := a.Owner(it.Key)
		mb, _ := b.Owner(it.Key)
		if ma != mb {
			t.Fatalf("%v: owner %s, and %s with the items shuffled", it.Key, ma.Name, mb.Name)
		}
	}
}

// items500 drops the duplicates of TestBalanceWeighted's items.
func items500(its []Item) []Item {
	seen := make(map[Key]bool)
	var out []Item
	for _, it := range its {
		if !seen[it.Key] {
			seen[it.Key] = true
			out = append(out, it)
		}
	}
	return out
}

// TestBalanceOutside: keys outside the set are ranked by rendezvous, and a
// key larger than every bound still gets an owner.
func TestBalanceOutside(t *testing.T) {
	tab := mustNew(t, []Member{{"n1", 1}, {"n2", 1}, {"n3", 1}})
	its := append(items(10, 1), Item{Key: Key{Bucket: "bkt", Object: "huge", Generation: 1}, Size: 1 << 40})
	a := tab.Balance(its, 0)
	if _, ok := a.Owner(Key{Bucket: "bkt", Object: "huge", Generation: 1}); !ok {
		t.Errorf("the huge key has no owner")
	}
	out := Key{Bucket: "bkt", Object: "elsewhere", Generation: 1}
	if _, ok := a.Owner(out); ok {
		t.Errorf("Owner of a key outside the set reported")
	}
	got, want := a.Owners(out, 2), tab.Owners(out, 2)
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("Owners(outside) = %v; want %v", got, want)
	}
	if got := a.Owners(its[0].Key, 10); len(got) != 3 {
		t.Errorf("Owners(k=10) of 3 members = %v", got)
	}
	if got := a.Owners(its[0].Key, 0); len(got) != 0 {
		t.Errorf("Owners(k=0) = %v", got)
	}
}

// TestBalanceJoin reports how many keys a join moves: the new member's
// share and the spills it undoes.
func TestBalanceJoin(t *testing.T) {
	its := items(192, 1<<20)
	three := mustNew(t, []Member{{"n1", 1}, {"n2", 1}, {"n3", 1}})
	four := mustNew(t, []Member{{"n1", 1}, {"n2", 1}, {"n3", 1}, {"n4", 1}})
	a, b := three.Balance(its, DefaultSlack), four.Balance(its, DefaultSlack)
	moved := 0
	for _, it := range its {
		ma, _ := a.Owner(it.Key)
		mb, _ := b.Owner(it.Key)
		if ma != mb {
			moved++
		}
	}
	// Rendezvous moves 1/4 of the keys; the bound adds its spills.
	t.Logf("join of a 4th member moved %d of %d keys (rendezvous: about %d); spilled %d then %d",
		moved, len(its), len(its)/4, a.Moved(), b.Moved())
	if moved > len(its)/2 {
		t.Errorf("a join moved %d of %d keys", moved, len(its))
	}
	checkBound(t, b, its, DefaultSlack)
}

func BenchmarkBalance(b *testing.B) {
	its := items(100000, 4<<20)
	var ms []Member
	for i := range 16 {
		ms = append(ms, Member{fmt.Sprintf("node-%02d", i), 1})
	}
	tab, err := New(ms)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		tab.Balance(its, DefaultSlack)
	}
}

// TestSimulationBalanced is TestSimulationTable's dataset (4096 objects ×
// 256 MiB in 8 MiB chunks) placed by Balance instead of rendezvous alone:
// the busiest owner's bytes against the mean (equal weights) and against
// its weight share (half the nodes twice as heavy), and the share of keys
// a join and a leave move.
func TestSimulationBalanced(t *testing.T) {
	nodes := []int{8, 16, 64, 256, 1024}
	if testing.Short() || raceEnabled {
		nodes = nodes[:3]
	}
	var its []Item
	for i := range 4096 {
		for c := range 32 {
			its = append(its, Item{Key: Key{Bucket: "bkt", Object: fmt.Sprintf("shard-%05d", i), Generation: int64(i + 1), Chunk: c}, Size: 8 << 20})
		}
	}
	var b strings.Builder
	b.WriteString("| N | max/mean owned, equal | max owned/weight share, half 2× | keys spilled | join: moved | ideal 1/(N+1) | leave: moved | ideal 1/N |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range nodes {
		eq := mustNew(t, members(n, 1))
		a := eq.Balance(its, DefaultSlack)
		var heavy []Member
		for i, m := range members(n, 1) {
			if i%2 == 1 {
				m.Weight = 2
			}
			heavy = append(heavy, m)
		}
		hw := mustNew(t, heavy)
		ah := hw.Balance(its, DefaultSlack)
		var most, mostShare float64
		for _, m := range eq.Members() {
			most = max(most, float64(a.OwnedBytes(m.Name)))
		}
		for _, m := range hw.Members() {
			mostShare = max(mostShare, float64(ah.OwnedBytes(m.Name))/(hw.OwnedShare(m.Name)*float64(len(its))*(8<<20)))
		}
		mean := float64(len(its)) * (8 << 20) / float64(n)
		joined := mustNew(t, append(members(n, 1), Member{Name: "node-new", Weight: 1}))
		left := mustNew(t, members(n, 1)[1:])
		aj, al := joined.Balance(its, DefaultSlack), left.Balance(its, DefaultSlack)
		var mj, ml int
		for _, it := range its {
			o, _ := a.Owner(it.Key)
			if x, _ := aj.Owner(it.Key); x.Name != o.Name {
				mj++
			}
			if x, _ := al.Owner(it.Key); x.Name != o.Name {
				ml++
			}
		}
		if most/mean > 1+DefaultSlack+0.01 || mostShare > 1+DefaultSlack+0.01 {
			t.Errorf("N=%d: busiest owner %.3f of the mean, %.3f of its share; want ≤ %.2f", n, most/mean, mostShare, 1+DefaultSlack)
		}
		k := float64(len(its))
		fmt.Fprintf(&b, "| %d | %.3f | %.3f | %d | %.5f | %.5f | %.5f | %.5f |\n", n, most/mean, mostShare, a.Moved(),
			float64(mj)/k, 1/float64(n+1), float64(ml)/k, 1/float64(n))
	}
	t.Logf("D = 4096 objects × 256 MiB, 8 MiB chunks (131072 keys), slack %.2f\n\n%s", DefaultSlack, b.String())
}
