package metrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// fakeDownloader fails objects named "bad".
type fakeDownloader struct{}

func (fakeDownloader) Fetch(_ context.Context, a object.Attrs, _ io.WriterAt, _ *object.Urgency) error {
	if a.Name == "bad" {
		return errors.New("boom")
	}
	return nil
}

func TestMetrics(t *testing.T) {
	srv := newTestServer(t)
	body := get(t, srv.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		`cacheagent_tier_objects{tier="disk"} 2`,
		`cacheagent_tier_bytes{tier="disk"} 8192`,
		`cacheagent_tier_hits_total{tier="shm"} 3`,
		`cacheagent_tier_promotions_total{tier="shm"} 5`,
		`cacheagent_tier_promotions_skipped_total{tier="shm"} 1`,
		`cacheagent_tier_verify_bytes_total{tier="disk"} 9000`,
		`cacheagent_tier_verified_total{tier="disk"} 4`,
		`cacheagent_tier_unverifiable_total{tier="disk"} 2`,
		`cacheagent_tier_corrupt_total{tier="shm"} 1`,
		`cacheagent_fetch_retries_total{cause="stall"} 3`,
		`cacheagent_fetch_retries_total{cause="throttled"} 0`,
		`cacheagent_fetch_bytes_total 42`,
		`cacheagent_fetch_objects_total{result="ok"} 5`,
		`cacheagent_fetch_objects_total{result="error"} 1`,
		`cacheagent_fetch_connections_limit 64`,
		`cacheagent_fetch_waiting_slices 2`,
		`cacheagent_fetch_small_waiting 1`,
		`cacheagent_plan_lookahead_bytes 1024`,
		`cacheagent_fetch_duration_seconds_count{priority="demand",result="ok"} 1`,
		`cacheagent_fetch_duration_seconds_count{priority="warm",result="error"} 1`,
		`cacheagent_fetch_inflight{priority="demand"} 0`,
		`cacheagent_prefetch_pending_objects{priority="warm"} 7`,
		`cacheagent_leases 4`,
		`cacheagent_jobs{state="running"} 1`,
		`cacheagent_loader_stall_seconds_total{cause="fetch"} 1.5`,
		`cacheagent_loader_stall_seconds_total{cause="promote"} 0`,
		`cacheagent_loader_stall_seconds_total{cause="gather"} 0`,
		`cacheagent_loader_stall_seconds_total{cause="other"} 0.25`,
		`cacheagent_loader_samples_total 96`,
		`cacheagent_loader_batches_total 3`,
		`cacheagent_loader_bytes_total 4096`,
		`cacheagent_loader_plans 2`,
		`cacheagent_config_reloads_total{result="ok"} 1`,
		`cacheagent_build_info{goversion=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `cacheagent_tier_promotions_total{tier="disk"}`) {
		t.Error("promotions exported for a tier without them")
	}
	get(t, srv.URL+"/healthz", http.StatusOK)
	get(t, srv.URL+"/readyz", http.StatusServiceUnavailable)
}

// newTestServer serves the metrics of fake sources, every one set, after
// two downloads, a request and a reload, so that every series appears.
func newTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	fs := stats.Fetch{Connections: 64, Bytes: 42, Objects: 5, Failures: 1, WaitingSlices: 3, SmallWaiting: 1,
		Retries: map[string]int64{fetch.CauseStall.String(): 3}}
	m := New("v1", Sources{
		Tiers: func() stats.Cache {
			return stats.Cache{Tiers: []stats.Tier{
				{Name: "shm", Hits: 3, Promotions: 5, PromotionsSkipped: 1, Corrupt: 1},
				{Name: "disk", Entries: 2, UsedBytes: 8192, VerifiedBytes: 9000, Verified: 4, Unverifiable: 2}}}
		},
		Fetch:   func() stats.Fetch { return fs },
		Pending: func() map[object.Priority]int { return map[object.Priority]int{object.Warm: 7} },
		Leases:  func() (int, int) { return 1, 4 },
		Jobs:    func() map[string]int { return map[string]int{"running": 1} },
		Plans:   func() stats.Plan { return stats.Plan{Plans: 1, Lookahead: 1024} },
		Loaders: func() (int, stats.Loader) {
			return 2, stats.Loader{Batches: 3, Samples: 96, Bytes: 4096, WaitFetch: 1500 * time.Millisecond,
				WaitOther: 250 * time.Millisecond}
		},
		Fleet: func() (stats.Fleet, bool) {
			return stats.Fleet{Self: "node-a", Members: map[string]int{"alive": 2, "dead": 1},
				PeerReads: stats.PeerReads{PeerBytes: map[string]int64{"node-b": 1 << 20}, OriginBytes: 1 << 20,
					PeerErrors: map[string]int64{"timeout": 1}},
				PeerServes: stats.PeerServes{ServedRequests: map[string]int64{"ok": 3}}}, true
		},
		Mount: func() (stats.Mount, bool) {
			return stats.Mount{Path: "/mnt/gcs", Open: "skip", Opens: 3, Reads: 2, ReadBytes: 4096, Buckets: 1}, true
		},
		Checkpoints: func() stats.Checkpoints {
			return stats.Checkpoints{Saves: 2, Commits: 1, Pending: 1, DirtyBytes: 1 << 20, UploadedBytes: 3 << 20,
				FailuresByCause: map[string]int64{"changed": 1}}
		},
	})
	d := m.WrapDownloader(fakeDownloader{})
	d.Fetch(context.Background(), object.Attrs{Object: object.Object{Name: "ok"}}, nil, object.NewUrgency(object.Demand))
	d.Fetch(context.Background(), object.Attrs{Object: object.Object{Name: "bad"}}, nil, nil)
	m.ObserveRequest("GET /v1/status", 200)
	m.ObserveReload(nil)
	srv := httptest.NewServer(m.Handler(func() bool { return false }))
	t.Cleanup(srv.Close)
	return srv
}

// TestDocumentedMetrics checks that every series docs/operations.md lists
// is exported, and that every cacheagent series exported is listed. In
// the table, a name starting with "_" continues its row's first name's
// prefix: `cacheagent_tier_pinned_bytes`, `_reserved_bytes` is
// cacheagent_tier_reserved_bytes.
func TestDocumentedMetrics(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedMetrics(string(doc))
	if len(documented) < 40 {
		t.Fatalf("found %d metric names in docs/operations.md; the table's format changed?", len(documented))
	}
	body := get(t, newTestServer(t).URL+"/metrics", http.StatusOK)
	exported := make(map[string]bool)
	for line := range strings.Lines(body) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			exported[f[2]] = true
		}
	}
	for _, name := range documented {
		if !exported[name] {
			t.Errorf("documented metric %s is not exported", name)
		}
	}
	for name := range exported {
		if strings.HasPrefix(name, "cacheagent_") && !slices.Contains(documented, name) {
			t.Errorf("exported metric %s is not documented in docs/operations.md", name)
		}
	}
}

// documentedMetrics returns the cacheagent_* names in the first column of
// the metrics table of docs/operations.md.
func documentedMetrics(doc string) []string {
	var names []string
	for line := range strings.Lines(doc) {
		cols := strings.Split(line, "|")
		if len(cols) < 3 || !strings.Contains(cols[1], "`cacheagent_") {
			continue
		}
		prefix := ""
		for _, n := range strings.Split(cols[1], ",") {
			n = strings.Trim(strings.TrimSpace(n), "`")
			switch {
			case strings.HasPrefix(n, "cacheagent_"):
				parts := strings.SplitN(n, "_", 3)
				prefix = parts[0] + "_" + parts[1]
				names = append(names, n)
			case strings.HasPrefix(n, "_") && prefix != "":
				names = append(names, prefix+n)
			}
		}
	}
	return names
}

func get(t *testing.T, url string, want int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if resp.StatusCode != want {
		t.Errorf("GET %s: %d; want %d", url, resp.StatusCode, want)
	}
	return b.String()
}
