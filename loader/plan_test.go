package loader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// recordingPlanner is a Planner that records what the Loader tells it.
type recordingPlanner struct {
	mu       sync.Mutex
	plans    [][]object.Object
	advances [][]int // per plan
	dropped  []string
	id       string
}

func (p *recordingPlanner) Plan(_ context.Context, id string, objs []object.Object) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.id = id
	p.plans = append(p.plans, slices.Clone(objs))
	p.advances = append(p.advances, nil)
	return nil
}

func (p *recordingPlanner) AdvancePlan(_ context.Context, id string, pos int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id != p.id || len(p.plans) == 0 {
		return errors.New("advance of an unknown plan")
	}
	p.advances[len(p.advances)-1] = append(p.advances[len(p.advances)-1], pos)
	return nil
}

func (p *recordingPlanner) DropPlan(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropped = append(p.dropped, id)
	return nil
}

func TestPlannerSeesShardOrder(t *testing.T) {
	e := newEnv(t, unevenData)
	p := &recordingPlanner{}
	l := e.open(t, Config{BatchSize: 4, Seed: 5, Window: 2, Epochs: 2, Planner: p})
	drain(t, l, unevenData)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	shards := len(unevenData.Rows)
	if len(p.plans) != 2 || len(p.plans[0]) != 2*2*shards || len(p.plans[1]) != 2*shards {
		t.Fatalf("plans of %d objects; want two: both epochs (%d objects), then the last (%d)",
			len(p.plans), 4*shards, 2*shards)
	}
	if !slices.Equal(p.plans[0][2*shards:], p.plans[1]) {
		t.Errorf("the second epoch's plan differs from what the first announced for it")
	}
	for i, adv := range p.advances {
		// Each shard's arrays (x, y) in order, every shard of the epoch once.
		if len(adv) != shards {
			t.Errorf("plan %d: %d advances; want one per shard (%d)", i, len(adv), shards)
		}
		for j, pos := range adv {
			if pos != 2*j {
				t.Errorf("plan %d: advance %d to %d; want %d", i, j, pos, 2*j)
			}
			x, y := p.plans[i][pos], p.plans[i][pos+1]
			if filepath.Ext(x.Name) != ".npy" || x.Name[len(x.Name)-5:] != "x.npy" || y.Name[len(y.Name)-5:] != "y.npy" {
				t.Errorf("plan %d position %d: %s, %s; want a shard's x then y", i, pos, x.Name, y.Name)
			}
		}
	}
	if len(p.dropped) != 1 || p.dropped[0] != l.PlanID() {
		t.Errorf("dropped %v; want [%s]", p.dropped, l.PlanID())
	}
}

// gatedStager is a Stager whose Fetch waits for release.
type gatedStager struct {
	release chan struct{}
}

func (s *gatedStager) Fetch(ctx context.Context, _ []object.Object) error {
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *gatedStager) Promote(context.Context, []object.Object) error {
	return errors.New("no shm here")
}

func TestNextHonoursContext(t *testing.T) {
	e := newEnv(t, unevenData)
	st := &gatedStager{release: make(chan struct{})}
	l := e.open(t, Config{BatchSize: 4, Seed: 1, Stager: st})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next(cancelled) = %v; want context.Canceled", err)
	}
	close(st.release)
	b, err := l.Next(context.Background())
	if err != nil || b.Epoch != 0 || b.Index != 0 {
		t.Fatalf("Next after the cancelled call = %+v, %v; want batch 0", b, err)
	}
	checkBatch(t, b, unevenData)
	b.Release()
	drain(t, l, unevenData)
	s := l.Stats()
	if s.StageErrors == 0 {
		t.Errorf("Promote failures not counted")
	}
	if sum := s.WaitFetch + s.WaitPromote + s.WaitGather + s.WaitOther; sum != s.Wait {
		t.Errorf("stall parts add up to %v; Wait is %v", sum, s.Wait)
	}
}

func TestStallAttribution(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tl := timeline{
		waits: []waitSpan{
			{from: at(10), to: at(50), fetched: at(30), promoted: at(45)},
			{from: at(50), to: at(60), fetched: at(0), promoted: at(55)},
		},
		gatherStart: at(60), gatherEnd: at(80),
	}
	tests := []struct {
		from, to                      int
		fetch, promote, gather, other int
	}{
		{0, 100, 20, 20 + 10, 20, 30},
		{20, 40, 10, 10, 0, 0},
		{70, 90, 0, 0, 10, 10},
		{85, 90, 0, 0, 0, 5},
	}
	for _, tt := range tests {
		f, p, g, o := tl.attribute(at(tt.from), at(tt.to))
		ms := func(d time.Duration) int { return int(d / time.Millisecond) }
		if ms(f) != tt.fetch || ms(p) != tt.promote || ms(g) != tt.gather || ms(o) != tt.other {
			t.Errorf("[%d, %d): fetch %v promote %v gather %v other %v; want %d %d %d %d ms",
				tt.from, tt.to, f, p, g, o, tt.fetch, tt.promote, tt.gather, tt.other)
		}
	}
}

// shmDir returns a fresh directory under /dev/shm for one test.
func shmDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skipf("/dev/shm is not a tmpfs (statfs: %v)", err)
	}
	dir, err := os.MkdirTemp("/dev/shm", "loader-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestClairvoyantCache runs the Loader over a real two-tier cache, at half
// the dataset's size on disk, that takes its plans and stages its shards.
func TestClairvoyantCache(t *testing.T) {
	data := synth.Uniform(8, 64, 4096-8) // x and y of a shard: 64 pages and a half
	e := newEnv(t, data)
	shm := shmDir(t)
	dl, err := fetch.NewDownloader(e.src, fetch.Config{SliceSize: 1 << 20, Connections: 4})
	if err != nil {
		t.Fatal(err)
	}
	shardBytes := int64(64*4096 + 2*4096 + 64*8 + 4096)
	c, err := tier.Open(context.Background(), tier.Config{Dir: filepath.Join(t.TempDir(), "cache"),
		MaxBytes: 4 * shardBytes, ShmDir: shm, ShmMaxBytes: 3 * shardBytes, PromoteHits: -1,
		Revalidate: -1, Source: e.src, Downloader: dl})
	if err != nil {
		t.Fatal(err)
	}
	store := mmapstore.New(c.Opener(), mmapstore.Config{MaxIdleMappings: -1, Revalidate: -1})
	t.Cleanup(func() {
		store.Close()
		c.Close()
	})
	l, err := New(FromStore(store), Config{Dataset: e.dataset(t), BatchSize: 16, Seed: 2, Window: 2,
		Lookahead: 1, Prefetch: 2, Epochs: 3, Planner: c, Stager: c.Stager()})
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, l, data)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	checkNoGoroutines(t, l)
	if len(got) != 3*l.BatchesPerEpoch() {
		t.Errorf("%d batches; want %d", len(got), 3*l.BatchesPerEpoch())
	}
	if ps := c.PlanStats(); ps.Plans != 0 {
		t.Errorf("%d plans left after Close", ps.Plans)
	}
	for _, tr := range c.Stats().Tiers {
		if tr.UsedBytes > tr.MaxBytes {
			t.Errorf("cache stats %+v: %s over budget", tr, tr.Name)
		}
	}
	// Staging queues the promotion of a shard whose disk copy is resident,
	// and the promoter makes it once readers pause: now.
	for deadline := time.Now().Add(30 * time.Second); shmPromotions(c) == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("cache stats %+v: nothing promoted after the loader closed", c.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := store.Stats().Leases; n != 0 {
		t.Errorf("%d leases left", n)
	}
	s := l.Stats()
	if sum := s.WaitFetch + s.WaitPromote + s.WaitGather + s.WaitOther; sum != s.Wait {
		t.Errorf("stall parts add up to %v; Wait is %v", sum, s.Wait)
	}
}

// shmPromotions returns the copies c made into its shm tier.
func shmPromotions(c *tier.Cache) int64 {
	shm, _ := c.Stats().Shm()
	return shm.Promotions
}

// reportingPlanner is a recordingPlanner that also takes Stats.
type reportingPlanner struct {
	recordingPlanner
	reports []stats.Loader
	ids     []string
}

func (p *reportingPlanner) ReportStats(_ context.Context, id string, s stats.Loader) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, id)
	p.reports = append(p.reports, s)
	return nil
}

func TestStatsReportedToPlanner(t *testing.T) {
	e := newEnv(t, unevenData)
	p := &reportingPlanner{}
	l := e.open(t, Config{BatchSize: 4, Seed: 5, Epochs: 2, Planner: p})
	drain(t, l, unevenData)
	final := l.Stats()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The first shard's opening reports (nothing yet), then at most one a
	// second, then Close reports the totals.
	if len(p.reports) < 2 {
		t.Fatalf("%d reports; want the first one and the one at Close", len(p.reports))
	}
	for _, id := range p.ids {
		if id != l.PlanID() {
			t.Errorf("report for plan %q; want %q", id, l.PlanID())
		}
	}
	last := p.reports[len(p.reports)-1]
	if last.Batches != final.Batches || last.Samples != final.Samples || last.Wait != final.Wait {
		t.Errorf("last report %+v; want the totals at Close %+v", last, final)
	}
	if len(p.dropped) != 1 {
		t.Errorf("dropped %v; want the plan dropped after the last report", p.dropped)
	}
}
