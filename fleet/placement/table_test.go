package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
)

// members returns n members named node-000.. with weight w.
func members(n int, w float64) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("node-%03d", i), Weight: w}
	}
	return ms
}

func mustNew(t testing.TB, ms []Member) *Table {
	t.Helper()
	tb, err := New(ms)
	if err != nil {
		t.Fatalf("New(%v): %v", ms, err)
	}
	return tb
}

// testKey returns the i-th key of a synthetic dataset: 64 chunks per object.
func testKey(i int) Key {
	return Key{Bucket: "bucket", Object: fmt.Sprintf("shard-%06d", i/64), Generation: 1700000000000000 + int64(i/64), Chunk: i % 64}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		members []Member
		want    error
	}{
		{"nil", nil, ErrNoMembers},
		{"empty name", []Member{{"a", 1}, {"", 1}}, ErrEmptyName},
		{"duplicate", []Member{{"a", 1}, {"b", 1}, {"a", 2}}, ErrDuplicateMember},
		{"zero weight", []Member{{"a", 0}}, ErrBadWeight},
		{"negative weight", []Member{{"a", 1}, {"b", -1}}, ErrBadWeight},
		{"NaN weight", []Member{{"a", math.NaN()}}, ErrBadWeight},
		{"infinite weight", []Member{{"a", math.Inf(1)}}, ErrBadWeight},
		{"infinite total", []Member{{"a", math.MaxFloat64}, {"b", math.MaxFloat64}}, ErrBadWeight},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := New(tt.members)
			if !errors.Is(err, tt.want) {
				t.Errorf("New(%v) = %v, %v; want %v", tt.members, tb, err, tt.want)
			}
		})
	}
}

func TestNewDoesNotRetain(t *testing.T) {
	ms := []Member{{"b", 1}, {"a", 2}}
	tb := mustNew(t, ms)
	ms[0].Name = "z"
	if got := tb.Members(); got[0] != (Member{"a", 2}) || got[1] != (Member{"b", 1}) {
		t.Errorf("Members() = %v after the caller's slice changed", got)
	}
}

func TestOwnerPinned(t *testing.T) {
	// A change to the key encoding, the hash, the mixer or the logarithm
	// moves owners; this table makes it a deliberate, visible change.
	tb := mustNew(t, []Member{
		{"agent-a", 1 << 40}, {"agent-b", 2 << 40}, {"agent-c", 3 << 40}, {"agent-d", 1 << 40}, {"agent-e", 1 << 41},
	})
	eq := mustNew(t, members(5, 1))
	tests := []struct {
		key      Key
		hash     uint64
		weighted string
		equal    string
	}{
		{Key{"bkt", "train/shard-000000.npy", 1, 0}, 0x7aa7d5407aec956e, "agent-d", "node-004"},
		{Key{"bkt", "train/shard-000000.npy", 1, 1}, 0x8535eca728384c59, "agent-e", "node-001"},
		{Key{"bkt", "train/shard-000001.npy", 1, 0}, 0xa4be980c85baf43c, "agent-e", "node-003"},
		{Key{"bkt", "train/shard-000001.npy", 2, 0}, 0x7693947b2813645d, "agent-a", "node-003"},
		{Key{"other", "x", 1732600000000000, 127}, 0xe443268d6226eec, "agent-e", "node-004"},
		{Key{"", "", 0, 0}, 0x41b4d1c910c1a58d, "agent-e", "node-000"},
	}
	for _, tt := range tests {
		if got := tt.key.hash(); got != tt.hash {
			t.Errorf("%v hash = %#x; want %#x", tt.key, got, tt.hash)
		}
		if got := tb.Owner(tt.key).Name; got != tt.weighted {
			t.Errorf("weighted Owner(%v) = %s; want %s", tt.key, got, tt.weighted)
		}
		if got := eq.Owner(tt.key).Name; got != tt.equal {
			t.Errorf("equal-weight Owner(%v) = %s; want %s", tt.key, got, tt.equal)
		}
	}
}

func TestOwnerIgnoresMemberOrder(t *testing.T) {
	ms := []Member{{"c", 3}, {"a", 1}, {"b", 2}, {"d", 1}}
	rev := slices.Clone(ms)
	slices.Reverse(rev)
	t1, t2 := mustNew(t, ms), mustNew(t, rev)
	for i := range 1000 {
		k := testKey(i)
		if a, b := t1.Owner(k), t2.Owner(k); a != b {
			t.Fatalf("Owner(%v) = %v with one member order, %v with another", k, a, b)
		}
	}
}

func TestWeightedBalance(t *testing.T) {
	const keys = 100_000
	tests := []struct {
		name    string
		members []Member
	}{
		{"1:2:3", []Member{{"a", 1}, {"b", 2}, {"c", 3}}},
		{"1:2:3 in bytes", []Member{{"a", 100 << 30}, {"b", 200 << 30}, {"c", 300 << 30}}},
		{"equal 8", members(8, 1)},
		{"2:1 halves", []Member{{"a", 2}, {"b", 1}, {"c", 2}, {"d", 1}, {"e", 2}, {"f", 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := mustNew(t, tt.members)
			counts := make([]int, tb.Len())
			for i := range keys {
				counts[tb.OwnerIndex(testKey(i))]++
			}
			for i, m := range tb.Members() {
				got, want := float64(counts[i])/keys, tb.OwnedShare(m.Name)
				if math.Abs(got-want) > 0.01 {
					t.Errorf("%s owns %.4f of %d keys; want %.4f ± 0.01", m.Name, got, keys, want)
				}
			}
		})
	}
}

func TestOwnedShare(t *testing.T) {
	tb := mustNew(t, []Member{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 2}})
	for name, want := range map[string]float64{"a": 0.125, "b": 0.25, "c": 0.375, "d": 0.25, "x": 0} {
		if got := tb.OwnedShare(name); got != want {
			t.Errorf("OwnedShare(%q) = %v; want %v", name, got, want)
		}
	}
}

// moves compares owners before and after a membership change over n keys:
// moved counts keys whose owner changed, stray those that moved to a member
// other than to (when to is set) or from a member other than from.
func moves(before, after *Table, n int, from, to string) (moved, stray int) {
	for i := range n {
		k := testKey(i)
		b, a := before.Owner(k).Name, after.Owner(k).Name
		if a == b {
			continue
		}
		moved++
		if (to != "" && a != to) || (from != "" && b != from) {
			stray++
		}
	}
	return moved, stray
}

func TestMinimalMovement(t *testing.T) {
	const keys = 100_000
	het := []Member{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 1}, {"e", 2}, {"f", 3}, {"g", 1}, {"h", 2}, {"i", 3}}
	tests := []struct {
		name   string
		base   []Member
		change Member // joins if not in base, else leaves
	}{
		{"join equal", members(10, 1), Member{"node-new", 1}},
		{"join heavy", members(10, 1), Member{"node-new", 3}},
		{"join weighted", het, Member{"j", 2}},
		{"leave equal", members(10, 1), Member{"node-004", 1}},
		{"leave weighted", het, Member{"c", 3}},
		{"leave light", het, Member{"a", 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := mustNew(t, tt.base)
			leaving := slices.Contains(tt.base, tt.change)
			var after *Table
			var share float64
			var moved, stray int
			if leaving {
				after = mustNew(t, slices.DeleteFunc(slices.Clone(tt.base), func(m Member) bool { return m == tt.change }))
				share = before.OwnedShare(tt.change.Name)
				moved, stray = moves(before, after, keys, tt.change.Name, "")
			} else {
				after = mustNew(t, append(slices.Clone(tt.base), tt.change))
				share = after.OwnedShare(tt.change.Name)
				moved, stray = moves(before, after, keys, "", tt.change.Name)
			}
			if stray != 0 {
				t.Errorf("%d keys moved between members that did not change", stray)
			}
			if got := float64(moved) / keys; math.Abs(got-share) > 0.01 {
				t.Errorf("%.4f of keys moved; want the changed member's weight share %.4f ± 0.01", got, share)
			}
		})
	}
}

func TestOwners(t *testing.T) {
	tb := mustNew(t, []Member{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 1}, {"e", 5}, {"f", 1}})
	eq := mustNew(t, members(7, 1))
	for _, tb := range []*Table{tb, eq} {
		for i := range 2000 {
			k := testKey(i)
			all := tb.Owners(k, tb.Len()+3)
			if len(all) != tb.Len() {
				t.Fatalf("Owners(%v, %d) has %d members; want %d", k, tb.Len()+3, len(all), tb.Len())
			}
			seen := map[string]bool{}
			for _, m := range all {
				if seen[m.Name] {
					t.Fatalf("Owners(%v) = %v repeats %s", k, all, m.Name)
				}
				seen[m.Name] = true
			}
			if got := tb.Owners(k, 1); len(got) != 1 || got[0] != tb.Owner(k) {
				t.Fatalf("Owners(%v, 1) = %v; Owner = %v", k, got, tb.Owner(k))
			}
			for n := range tb.Len() {
				if got := tb.Owners(k, n); !slices.Equal(got, all[:n]) {
					t.Fatalf("Owners(%v, %d) = %v; want the prefix %v", k, n, got, all[:n])
				}
			}
			if got := tb.Member(tb.OwnerIndex(k)); got != all[0] {
				t.Fatalf("Member(OwnerIndex(%v)) = %v; want %v", k, got, all[0])
			}
		}
	}
	if got := tb.Owners(testKey(0), 0); got != nil {
		t.Errorf("Owners(k, 0) = %v; want nil", got)
	}
}

func TestFallbackConsistency(t *testing.T) {
	// Removing the first owner makes the rest of the ranking the new
	// ranking, in the same order.
	ms := []Member{{"a", 1}, {"b", 2}, {"c", 3}, {"d", 1}, {"e", 2}}
	tb := mustNew(t, ms)
	for i := range 2000 {
		k := testKey(i)
		all := tb.Owners(k, len(ms))
		rest := mustNew(t, slices.DeleteFunc(slices.Clone(ms), func(m Member) bool { return m == all[0] }))
		if got := rest.Owner(k); got != all[1] {
			t.Fatalf("without %s, Owner(%v) = %v; want the second owner %v", all[0].Name, k, got, all[1])
		}
		if got := rest.Owners(k, len(ms)); !slices.Equal(got, all[1:]) {
			t.Fatalf("without %s, Owners(%v) = %v; want %v", all[0].Name, k, got, all[1:])
		}
	}
}

func TestUniformMatchesWeighted(t *testing.T) {
	// With equal weights the table ranks by the draw alone; the full score
	// must give the same owners.
	tb := mustNew(t, members(16, 3<<30))
	slow := *tb
	slow.uniform = false
	for i := range 20_000 {
		h := testKey(i).hash()
		if a, b := tb.ownerOf(h), slow.ownerOf(h); a != b {
			t.Fatalf("key %d: owner %d by draw, %d by score", i, a, b)
		}
	}
}

func TestConcurrentReads(t *testing.T) {
	tb := mustNew(t, []Member{{"a", 1}, {"b", 2}, {"c", 3}})
	want := make([]Member, 500)
	for i := range want {
		want[i] = tb.Owner(testKey(i))
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range want {
				if got := tb.Owners(testKey(i), 2)[0]; got != want[i] {
					t.Errorf("concurrent Owners(%v)[0] = %v; want %v", testKey(i), got, want[i])
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkOwner(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		for _, weights := range []string{"equal", "weighted"} {
			ms := members(n, 1<<40)
			if weights == "weighted" {
				for i := range ms {
					ms[i].Weight = float64(int64(1+i%3) << 40)
				}
			}
			tb := mustNew(b, ms)
			keys := make([]Key, 1024)
			for i := range keys {
				keys[i] = testKey(i)
			}
			b.Run(fmt.Sprintf("N=%d/%s", n, weights), func(b *testing.B) {
				i := 0
				for b.Loop() {
					tb.OwnerIndex(keys[i%len(keys)])
					i++
				}
			})
		}
	}
}

func BenchmarkOwners3(b *testing.B) {
	tb := mustNew(b, members(64, 1))
	i := 0
	for b.Loop() {
		tb.Owners(testKey(i%1024), 3)
		i++
	}
}
