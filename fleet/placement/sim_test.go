package placement

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func TestSimulateErrors(t *testing.T) {
	tests := []SimConfig{
		{Nodes: 1},
		{Nodes: 4, Budget: -1},
		{Nodes: 4, ChunkSize: -8},
		{Nodes: 4, HeavyFactor: math.NaN()},
		{Nodes: 4, HeavyFactor: -2},
		{Nodes: 4, Objects: math.MaxInt64 / 2, ObjectSize: 1 << 20},
	}
	for _, cfg := range tests {
		if _, err := Simulate(cfg); !errors.Is(err, ErrBadConfig) {
			t.Errorf("Simulate(%+v) error = %v; want ErrBadConfig", cfg, err)
		}
	}
	if _, err := SimulateHotSpot(1, 1<<30, 8<<20, 0); !errors.Is(err, ErrBadConfig) {
		t.Errorf("SimulateHotSpot(1 node) error = %v; want ErrBadConfig", err)
	}
	if _, err := SimulateHotSpot(4, 0, 8<<20, 0); !errors.Is(err, ErrBadConfig) {
		t.Errorf("SimulateHotSpot(empty object) error = %v; want ErrBadConfig", err)
	}
}

func TestSimulateDeterministic(t *testing.T) {
	cfg := SimConfig{Nodes: 12, Objects: 300, Budget: 20 << 30, Seed: 7}
	a, err := Simulate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Simulate(cfg)
	if a != b {
		t.Errorf("Simulate(%+v) gave %+v, then %+v", cfg, a, b)
	}
	cfg.Seed = 8
	if c, _ := Simulate(cfg); c.Balance == a.Balance && c.JoinMovedKeys == a.JoinMovedKeys {
		t.Errorf("Simulate with seeds 7 and 8 placed alike: %+v", c)
	}
}

func TestSimulateCapacity(t *testing.T) {
	// 16 objects of 64 MiB in 8 MiB chunks: D = 1 GiB, 128 keys.
	base := SimConfig{Nodes: 4, Objects: 16, ObjectSize: 64 << 20}
	tests := []struct {
		name          string
		budget        int64
		epoch1, later float64
	}{
		{"unlimited", 0, 1, 0},
		{"ample", 1 << 30, 1, 0},
		{"less than a chunk", 4 << 20, 4, 4}, // every chunk fetched by each of the 4 readers
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.Budget = tt.budget
			r, err := Simulate(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.Keys != 128 || r.DatasetBytes != 1<<30 {
				t.Errorf("Keys, DatasetBytes = %d, %d; want 128, 1 GiB", r.Keys, r.DatasetBytes)
			}
			if r.Epoch1Egress != tt.epoch1 || r.LaterEgress != tt.later {
				t.Errorf("egress = %v, %v; want %v, %v", r.Epoch1Egress, r.LaterEgress, tt.epoch1, tt.later)
			}
		})
	}
	// Half the dataset fits: epoch 1 fetches the kept half once and the
	// rest N times; later epochs only the rest.
	cfg := base
	cfg.Budget = 128 << 20 // N*B = D/2
	r, err := Simulate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	over := r.LaterEgress / 4 // the share no owner kept
	if over < 0.5 || over > 0.75 {
		t.Errorf("LaterEgress = %v; want 4 × a share in [0.5, 0.75]", r.LaterEgress)
	}
	if got, want := r.Epoch1Egress, 1-over+4*over; math.Abs(got-want) > 1e-12 {
		t.Errorf("Epoch1Egress = %v; want %v", got, want)
	}
}

func TestSimulateChurnAndBalance(t *testing.T) {
	r, err := Simulate(SimConfig{Nodes: 10, Objects: 2000, Budget: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if r.JoinStray != 0 || r.LeaveStray != 0 {
		t.Errorf("stray moves: join %d, leave %d; want 0", r.JoinStray, r.LeaveStray)
	}
	if math.Abs(r.JoinMovedKeys-1.0/11) > 0.01 || math.Abs(r.LeaveMovedKeys-1.0/10) > 0.01 {
		t.Errorf("moved join %v, leave %v; want about 1/11, 1/10", r.JoinMovedKeys, r.LeaveMovedKeys)
	}
	if r.JoinMovedKeys != r.JoinMovedBytes {
		t.Errorf("with whole chunks, moved keys %v != moved bytes %v", r.JoinMovedKeys, r.JoinMovedBytes)
	}
	if r.Balance < 1 || r.Balance > 1.1 {
		t.Errorf("Balance = %v; want in [1, 1.1] for 6400 keys per node", r.Balance)
	}
	// Half the nodes weigh 2: they own 2/1.5 of the mean.
	if math.Abs(r.HeteroBalance-4.0/3) > 0.1 || r.HeteroWeighted > 1.1 {
		t.Errorf("HeteroBalance, HeteroWeighted = %v, %v; want about 4/3, at most 1.1", r.HeteroBalance, r.HeteroWeighted)
	}
}

func TestHotSpot(t *testing.T) {
	// Whole-object placement: one owner uploads to N-1 readers.
	h, err := SimulateHotSpot(8, 1<<30, 1<<30, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Chunks != 1 || h.Owners != 1 || h.MaxOverMean != 8 || h.Time != 7 {
		t.Errorf("whole object: %+v; want 1 chunk, 1 owner, max/mean 8, time 7", h)
	}
	// Striped: at least several owners, and never worse than whole-object.
	h, err = SimulateHotSpot(8, 1<<30, 8<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Chunks != 128 || h.Owners != 8 || h.Time < 7.0/8 || h.Time > 1.5 {
		t.Errorf("striped: %+v; want 128 chunks over 8 owners, time in [7/8, 1.5]", h)
	}
	// More nodes than chunks: at most one owner per chunk.
	h, err = SimulateHotSpot(64, 16<<20, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Owners > 16 || h.Time < 63.0/16 {
		t.Errorf("16 chunks on 64 nodes: %+v; want at most 16 owners, time at least 63/16", h)
	}
}

func TestBytesString(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1: "1 B", 1 << 10: "1 KiB", 3 << 29: "1536 MiB", 64 << 30: "64 GiB", 1 << 40: "1 TiB"} {
		if got := bytesString(n); got != want {
			t.Errorf("bytesString(%d) = %q; want %q", n, got, want)
		}
	}
}

// TestSimulationTable prints the tables of docs/fleet-simulation.md:
//
//	go test -run TestSimulationTable -v ./fleet/placement
//
// Under -short (and the race detector's build, see race_test.go) it stops
// at N = 64 to stay quick.
func TestSimulationTable(t *testing.T) {
	nodes := []int{8, 16, 64, 256, 1024}
	if testing.Short() || raceEnabled {
		nodes = nodes[:3]
	}
	var results []SimResult
	for _, n := range nodes {
		r, err := Simulate(SimConfig{Nodes: n, Budget: 64 << 30})
		if err != nil {
			t.Fatal(err)
		}
		if r.JoinStray != 0 || r.LeaveStray != 0 {
			t.Errorf("N=%d: stray moves on join %d, leave %d; want 0", n, r.JoinStray, r.LeaveStray)
		}
		if r.Epoch1Egress < 1 {
			t.Errorf("N=%d: Epoch1Egress = %v; want at least 1", n, r.Epoch1Egress)
		}
		if float64(n)*float64(64<<30) >= 2*float64(r.DatasetBytes) && r.LaterEgress != 0 {
			t.Errorf("N=%d: LaterEgress = %v with twice the dataset's size in budget; want 0", n, r.LaterEgress)
		}
		results = append(results, r)
	}
	t.Logf("D = 4096 objects × 256 MiB, 8 MiB chunks, B = 64 GiB per node, seed 0\n\n%s", Markdown(results))

	// The hot spot depends on how one object's chunks happen to fall, so
	// it is shown over 200 objects (seeds 0..199), not just one.
	var b strings.Builder
	b.WriteString("| N | chunk | chunks | owners (p50) | time p50 (×S/r_p) | p95 | max |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range []int{4, 8, 16, 64, 256, 1024} {
		if (testing.Short() || raceEnabled) && n > 64 {
			break
		}
		for _, c := range []int64{1 << 20, 4 << 20, 8 << 20} {
			var times, owners []float64
			for seed := range uint64(200) {
				h, err := SimulateHotSpot(n, 1<<30, c, seed)
				if err != nil {
					t.Fatal(err)
				}
				times, owners = append(times, h.Time), append(owners, float64(h.Owners))
			}
			slices.Sort(times)
			slices.Sort(owners)
			fmt.Fprintf(&b, "| %d | %s | %d | %.0f | %.2f | %.2f | %.2f |\n",
				n, bytesString(c), Chunks(1<<30, c), owners[100], times[100], times[190], times[199])
		}
	}
	t.Logf("hot spot: one 1 GiB object read by all N nodes at once, 200 objects per row\n\n%s", b.String())
}
