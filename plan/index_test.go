package plan

import (
	"fmt"
	"slices"
	"testing"
)

func TestNextUse(t *testing.T) {
	x := NewIndex[string]()
	x.Announce("a", []string{"s0", "s1", "s2", "s0", "s3"})
	tests := []struct {
		cursor int
		key    string
		want   int
	}{
		{0, "s0", 0},
		{0, "s1", 1},
		{0, "s3", 4},
		{0, "s9", Never},
		{1, "s0", 2}, // the repeat at position 3
		{4, "s0", Never},
		{4, "s3", 0},
		{5, "s3", Never},
		{99, "s3", Never}, // clamped to the end
		{-3, "s1", 1},     // clamped to 0
	}
	for _, tt := range tests {
		x.Advance("a", tt.cursor)
		if got := x.NextUse(tt.key); got != tt.want {
			t.Errorf("cursor %d: NextUse(%q) = %d; want %d", tt.cursor, tt.key, got, tt.want)
		}
	}
}

func TestNextUseAcrossPlans(t *testing.T) {
	x := NewIndex[int]()
	x.Announce("a", []int{1, 2, 3, 4, 5})
	x.Announce("b", []int{5, 4, 3, 2, 1})
	x.Advance("a", 1)
	x.Advance("b", 2)
	// a: cursor at 2 (distance 0 for 2); b: cursor at 3 (distance 0).
	for k, want := range map[int]int{1: 2, 2: 0, 3: 0, 4: 2, 5: 3} {
		if got := x.NextUse(k); got != want {
			t.Errorf("NextUse(%d) = %d; want %d", k, got, want)
		}
	}
	if !x.Remove("b") || x.Remove("b") {
		t.Fatalf("Remove(b) twice: want true then false")
	}
	if got := x.NextUse(1); got != Never {
		t.Errorf("after removing b: NextUse(1) = %d; want Never", got)
	}
	if x.Advance("b", 0) {
		t.Errorf("Advance of a removed plan = true")
	}
	if got := x.Plans(); got != 1 {
		t.Errorf("Plans() = %d; want 1", got)
	}
}

func TestAnnounceReplaces(t *testing.T) {
	x := NewIndex[string]()
	keys := []string{"a", "b", "a"}
	x.Announce("p", keys)
	keys[0] = "zzz" // Announce copies
	x.Advance("p", 1)
	x.Announce("p", []string{"c", "a"})
	if c, n, ok := x.Cursor("p"); !ok || c != 0 || n != 2 {
		t.Errorf("Cursor(p) = %d, %d, %v; want 0, 2, true", c, n, ok)
	}
	for k, want := range map[string]int{"a": 1, "b": Never, "c": 0, "zzz": Never} {
		if got := x.NextUse(k); got != want {
			t.Errorf("NextUse(%q) = %d; want %d", k, got, want)
		}
	}
	x.Remove("p")
	if len(x.uses) != 0 {
		t.Errorf("uses left after removing every plan: %v", x.uses)
	}
}

func TestUpcoming(t *testing.T) {
	x := NewIndex[string]()
	x.Announce("a", []string{"x", "y", "z", "w"})
	x.Announce("b", []string{"q", "z", "r"})
	x.Advance("a", 1)
	type kd struct {
		k string
		d int
	}
	var got []kd
	for k, d := range x.Upcoming() {
		got = append(got, kd{k, d})
	}
	want := []kd{{"y", 0}, {"q", 0}, {"z", 1}, {"w", 2}, {"r", 2}}
	if !slices.Equal(got, want) {
		t.Errorf("Upcoming = %v; want %v", got, want)
	}
	n := 0
	for range x.Upcoming() {
		n++
		break
	}
	if n != 1 {
		t.Errorf("Upcoming did not stop when asked")
	}
}

// TestUpcomingRepeats checks that Upcoming yields a key once however often
// the plans hold it, and that the Index keeps count of such keys as plans
// come and go.
func TestUpcomingRepeats(t *testing.T) {
	x := NewIndex[string]()
	keys := func() []string {
		var ks []string
		for k := range x.Upcoming() {
			ks = append(ks, k)
		}
		return ks
	}
	x.Announce("a", []string{"x", "y", "x"})
	if got, want := keys(), []string{"x", "y"}; !slices.Equal(got, want) || x.repeated != 1 {
		t.Errorf("one plan repeating x: Upcoming = %v, repeated %d; want %v, 1", got, x.repeated, want)
	}
	x.Announce("a", []string{"x", "y"})
	x.Announce("b", []string{"y", "z"})
	if got, want := keys(), []string{"x", "y", "z"}; !slices.Equal(got, want) || x.repeated != 1 {
		t.Errorf("two plans sharing y: Upcoming = %v, repeated %d; want %v, 1", got, x.repeated, want)
	}
	x.Remove("b")
	if got, want := keys(), []string{"x", "y"}; !slices.Equal(got, want) || x.repeated != 0 {
		t.Errorf("after removing b: Upcoming = %v, repeated %d; want %v, 0", got, x.repeated, want)
	}
}

func TestOrderAndVictims(t *testing.T) {
	x := NewIndex[string]()
	x.Announce("p", []string{"a", "b", "c", "d"})
	x.Advance("p", 1) // a is past: no next use
	cands := []Candidate[string]{
		{Key: "c", Size: 10, LastUse: 5},
		{Key: "u2", Size: 10, LastUse: 9}, // unplanned, recent
		{Key: "b", Size: 10, LastUse: 1},
		{Key: "a", Size: 10, LastUse: 7}, // finished its last use
		{Key: "d", Size: 10, LastUse: 2},
	}
	x.Order(cands)
	var keys []string
	for _, c := range cands {
		keys = append(keys, c.Key)
	}
	if want := []string{"a", "u2", "d", "c", "b"}; !slices.Equal(keys, want) {
		t.Fatalf("Order = %v; want %v", keys, want)
	}
	tests := []struct {
		need      int64
		farther   int
		wantN     int
		wantFreed int64
	}{
		{0, -1, 0, 0},
		{1, -1, 1, 10},
		{25, -1, 3, 30},
		{1000, -1, 5, 50},
		{1000, 1, 3, 30}, // c (distance 1) and b (0) are needed no later than 1
		{1000, 2, 2, 20}, // d is at distance 2: not farther than 2
		{5, Never - 1, 1, 10},
		{25, Never - 1, 2, 20}, // only the unplanned qualify
	}
	for _, tt := range tests {
		n, freed := Victims(cands, tt.need, tt.farther)
		if n != tt.wantN || freed != tt.wantFreed {
			t.Errorf("Victims(need %d, farther %d) = %d, %d; want %d, %d",
				tt.need, tt.farther, n, freed, tt.wantN, tt.wantFreed)
		}
	}
}

func TestDueCountsAsNeededNext(t *testing.T) {
	x := NewIndex[string]()
	x.Announce("p", []string{"a", "b", "c"})
	x.Advance("p", 2) // a and b are behind the reader's position
	cands := []Candidate[string]{
		{Key: "a", Size: 10, LastUse: 1},            // read: done with
		{Key: "b", Size: 10, LastUse: 2, Due: true}, // passed, not read yet
		{Key: "c", Size: 10, LastUse: 3, Due: true}, // next: its distance (0) stands
	}
	x.Order(cands)
	var got []string
	for _, c := range cands {
		got = append(got, fmt.Sprintf("%s:%d", c.Key, c.Next))
	}
	if want := []string{"a:" + fmt.Sprint(Never), "b:0", "c:0"}; !slices.Equal(got, want) {
		t.Errorf("Order = %v; want %v (a due entry with no next use counts as needed next)", got, want)
	}
	if n, _ := Victims(cands, 10, 0); n != 1 {
		t.Errorf("Victims(farther 0) = %d; want 1: only a", n)
	}
}
