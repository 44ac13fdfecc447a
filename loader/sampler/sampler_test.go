package sampler

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// run reads a whole epoch for one rank, checking the event protocol as it
// goes: every sample's group is open, opens follow Order, each group opens
// and closes once, and at most maxOpen groups are open at a time.
func run(t *testing.T, rows []int, cfg Config, epoch, maxOpen int) []Sample {
	t.Helper()
	e, err := NewEpoch(rows, cfg, epoch)
	if err != nil {
		t.Fatalf("NewEpoch(%v, %+v, %d): %v", rows, cfg, epoch, err)
	}
	open := make(map[int]bool)
	var opened, closed []int
	var out []Sample
	for {
		s, ok := e.Next()
		if !ok {
			break
		}
		evs := e.Events()
		i := 0
		for ; i < len(evs) && evs[i].Kind == Open; i++ {
			if open[evs[i].Group] {
				t.Fatalf("group %d opened twice", evs[i].Group)
			}
			open[evs[i].Group] = true
			opened = append(opened, evs[i].Group)
		}
		if !open[s.Group] {
			t.Fatalf("sample %+v of a group that is not open", s)
		}
		for _, ev := range evs[i:] {
			if ev.Kind != Close || !open[ev.Group] {
				t.Fatalf("event %+v out of order or of a closed group", ev)
			}
			delete(open, ev.Group)
			closed = append(closed, ev.Group)
		}
		// A replacement opens before the exhausted group closes: the
		// bound holds once each position's events are handled.
		if len(open) > maxOpen {
			t.Fatalf("%d groups open; want at most %d", len(open), maxOpen)
		}
		out = append(out, s)
	}
	if len(open) != 0 {
		t.Errorf("groups still open at the end: %v", open)
	}
	if !slices.Equal(opened, e.Order()) {
		t.Errorf("opens %v; want Order %v", opened, e.Order())
	}
	if len(closed) != len(opened) {
		t.Errorf("%d closes for %d opens", len(closed), len(opened))
	}
	if len(out) != e.Len() {
		t.Errorf("read %d samples; Len() = %d", len(out), e.Len())
	}
	return out
}

// check verifies a sample against the row counts.
func check(t *testing.T, rows []int, s Sample) {
	t.Helper()
	off, _ := Offsets(rows)
	if s.Group < 0 || s.Group >= len(rows) || s.Row < 0 || s.Row >= rows[s.Group] || s.ID != off[s.Group]+int64(s.Row) {
		t.Fatalf("bad sample %+v", s)
	}
}

var datasets = map[string][]int{
	"even":       {10, 10, 10, 10, 10, 10},
	"uneven":     {7, 1, 13, 0, 5, 9, 2, 11},
	"one shard":  {23},
	"many small": {1, 2, 1, 3, 1, 1, 2, 1, 1, 1, 2, 3},
}

func TestEveryEpochIsAPermutation(t *testing.T) {
	for name, rows := range datasets {
		off, _ := Offsets(rows)
		n := int(off[len(rows)])
		for _, mode := range []Mode{ShardWindow, Global, Sequential} {
			for _, world := range []int{1, 2, 3, 4} {
				for _, tail := range []Tail{Wrap, Drop} {
					t.Run(fmt.Sprintf("%s/%s/world%d/%s", name, mode, world, tail), func(t *testing.T) {
						permutationCase(t, rows, n, Config{Mode: mode, Seed: 42, Window: 3, World: world, Tail: tail})
					})
				}
			}
		}
	}
}

func permutationCase(t *testing.T, rows []int, n int, cfg Config) {
	count := make(map[int64]int)
	length := -1
	for rank := range cfg.World {
		cfg.Rank = rank
		maxOpen := len(rows)
		if cfg.Mode != Global {
			maxOpen = cfg.Window + cfg.World // the tail's repeats may hold a few more
		}
		got := run(t, rows, cfg, 3, maxOpen)
		if length >= 0 && len(got) != length {
			t.Fatalf("rank %d reads %d samples, rank 0 %d", rank, len(got), length)
		}
		length = len(got)
		for _, s := range got {
			check(t, rows, s)
			count[s.ID]++
		}
	}
	w := cfg.World
	switch cfg.Tail {
	case Wrap:
		if length != (n+w-1)/w {
			t.Errorf("each rank reads %d; want ceil(%d/%d)", length, n, w)
		}
		if len(count) != n {
			t.Errorf("%d distinct samples; want all %d", len(count), n)
		}
		extra := 0
		for _, c := range count {
			extra += c - 1
		}
		if extra != length*w-n {
			t.Errorf("%d repeats; want %d", extra, length*w-n)
		}
	case Drop:
		if length != n/w {
			t.Errorf("each rank reads %d; want %d/%d", length, n, w)
		}
		for id, c := range count {
			if c != 1 {
				t.Errorf("sample %d read %d times", id, c)
			}
		}
	}
}

func TestRanksDisjoint(t *testing.T) {
	rows := datasets["uneven"]
	cfg := Config{Seed: 9, Window: 2, World: 4, Tail: Drop}
	seen := make(map[int64]int)
	for rank := range 4 {
		cfg.Rank = rank
		for _, s := range run(t, rows, cfg, 0, 6) {
			if r, ok := seen[s.ID]; ok {
				t.Fatalf("sample %d read by ranks %d and %d", s.ID, r, rank)
			}
			seen[s.ID] = rank
		}
	}
}

func ids(ss []Sample) []int64 {
	out := make([]int64, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func TestDeterministicAndDistinct(t *testing.T) {
	rows := datasets["even"]
	for _, mode := range []Mode{ShardWindow, Global} {
		cfg := Config{Mode: mode, Seed: 1, Window: 2}
		a := ids(run(t, rows, cfg, 0, len(rows)))
		b := ids(run(t, rows, cfg, 0, len(rows)))
		if !slices.Equal(a, b) {
			t.Errorf("%s: same seed and epoch gave different orders", mode)
		}
		if c := ids(run(t, rows, cfg, 1, len(rows))); slices.Equal(a, c) {
			t.Errorf("%s: epochs 0 and 1 gave the same order", mode)
		}
		cfg.Seed = 2
		if c := ids(run(t, rows, cfg, 0, len(rows))); slices.Equal(a, c) {
			t.Errorf("%s: seeds 1 and 2 gave the same order", mode)
		}
	}
	seq := ids(run(t, rows, Config{Mode: Sequential}, 5, len(rows)))
	for i, id := range seq {
		if id != int64(i) {
			t.Fatalf("sequential order %v", seq)
		}
	}
}

// TestPinnedOrders pins the first samples of known configurations: a
// failure means every user's shuffles changed, which must be deliberate.
func TestPinnedOrders(t *testing.T) {
	rows := []int{4, 4, 4, 4}
	tests := []struct {
		cfg  Config
		want []int64
	}{
		{Config{Mode: ShardWindow, Seed: 7, Window: 2}, pinnedWindow},
		{Config{Mode: Global, Seed: 7}, pinnedGlobal},
	}
	for _, tt := range tests {
		got := ids(run(t, rows, tt.cfg, 1, len(rows)))
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s seed 7 epoch 1 = %#v; want %#v", tt.cfg.Mode, got, tt.want)
		}
	}
}

func TestSkip(t *testing.T) {
	rows := datasets["uneven"]
	for _, mode := range []Mode{ShardWindow, Global, Sequential} {
		cfg := Config{Mode: mode, Seed: 5, Window: 3, World: 2, Rank: 1}
		full := run(t, rows, cfg, 2, len(rows))
		for _, k := range []int{0, 1, 7, len(full) - 1, len(full)} {
			e, err := NewEpoch(rows, cfg, 2)
			if err != nil {
				t.Fatal(err)
			}
			e.Skip(k)
			if e.Read() != k {
				t.Errorf("%s: Read after Skip(%d) = %d", mode, k, e.Read())
			}
			// The groups open after k samples, from replaying the full run.
			ref, _ := NewEpoch(rows, cfg, 2)
			open := map[int]bool{}
			for range k {
				ref.Next()
				for _, ev := range ref.Events() {
					open[ev.Group] = ev.Kind == Open
				}
			}
			for _, g := range e.OpenGroups() {
				if !open[g] {
					t.Errorf("%s Skip(%d): OpenGroups has %d, not open", mode, k, g)
				}
				delete(open, g)
			}
			for g, o := range open {
				if o {
					t.Errorf("%s Skip(%d): group %d open but not in OpenGroups", mode, k, g)
				}
			}
			if got := rest(e); !slices.Equal(got, full[k:]) {
				t.Errorf("%s: after Skip(%d) read %v; want %v", mode, k, ids(got), ids(full[k:]))
			}
		}
	}
}

func TestWindowMixesShards(t *testing.T) {
	rows := make([]int, 16)
	for i := range rows {
		rows[i] = 100
	}
	got := run(t, rows, Config{Seed: 3, Window: 4}, 0, 4)
	groups := map[int]bool{}
	for _, s := range got[:40] {
		groups[s.Group] = true
	}
	if len(groups) < 3 {
		t.Errorf("first 40 samples come from %d shards; want the window's 4 mixed", len(groups))
	}
	if got[0].Group == got[1].Group && got[1].Group == got[2].Group && got[0].Row+1 == got[1].Row {
		t.Errorf("rows are not shuffled within shards: %v", got[:3])
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		rows []int
		cfg  Config
	}{
		{[]int{5}, Config{Rank: 1}},
		{[]int{5}, Config{Rank: -1, World: 2}},
		{[]int{5}, Config{World: -2}},
		{[]int{5}, Config{Window: -1}},
		{[]int{5}, Config{Mode: 9}},
		{[]int{5}, Config{Tail: 9}},
		{[]int{}, Config{}},
		{[]int{0, 0}, Config{}},
		{[]int{-1, 5}, Config{}},
		{[]int{1}, Config{World: 3}},             // wrap would repeat 2 of 1
		{[]int{2}, Config{World: 3, Tail: Drop}}, // nothing left
	}
	for _, tt := range tests {
		if _, err := NewEpoch(tt.rows, tt.cfg, 0); !errors.Is(err, ErrConfig) {
			t.Errorf("NewEpoch(%v, %+v) = %v; want ErrConfig", tt.rows, tt.cfg, err)
		}
	}
	for _, s := range []string{"shard-window", "global", "sequential"} {
		if m, err := ParseMode(s); err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
	if _, err := ParseMode("random"); !errors.Is(err, ErrConfig) {
		t.Errorf("ParseMode(random) = %v; want ErrConfig", err)
	}
	if Mode(7).String() != "Mode(7)" || Wrap.String() != "wrap" || Drop.String() != "drop" || Tail(5).String() != "Tail(5)" {
		t.Errorf("String methods wrong")
	}
}

func TestFenwick(t *testing.T) {
	counts := []int64{3, 0, 2, 5, 0, 1}
	f := make(fenwick, len(counts))
	for i, c := range counts {
		f.add(i, c)
	}
	var want []int
	for i, c := range counts {
		for range c {
			want = append(want, i)
		}
	}
	for r, w := range want {
		if got := f.find(int64(r)); got != w {
			t.Errorf("find(%d) = %d; want %d", r, got, w)
		}
	}
}

// rest returns the samples e has left.
func rest(e *Epoch) []Sample {
	var out []Sample
	for {
		s, ok := e.Next()
		if !ok {
			return out
		}
		out = append(out, s)
	}
}
