package metrics

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/fetch"
)

// fakeDownloader fails objects named "bad".
type fakeDownloader struct{}

func (fakeDownloader) Fetch(_ context.Context, a fetch.Attrs, _ io.WriterAt, _ *fetch.Urgency) error {
	if a.Name == "bad" {
		return errors.New("boom")
	}
	return nil
}

func TestMetrics(t *testing.T) {
	var fs fetch.Stats
	fs.Retries[fetch.CauseStall] = 3
	fs.Bytes = 42
	m := New("v1", Sources{
		Tiers: func() []TierStats {
			return []TierStats{{Tier: "disk", Objects: 2, UsedBytes: 8192}, {Tier: "shm", Promotions: 5, HasPromotions: true}}
		},
		Fetch:       func() fetch.Stats { return fs },
		Connections: func() int { return 64 },
		Pending:     func() map[fetch.Priority]int { return map[fetch.Priority]int{fetch.Warm: 7} },
		Leases:      func() (int, int) { return 1, 4 },
		Jobs:        func() map[string]int { return map[string]int{"running": 1} },
		Loaders: func() LoaderStats {
			return LoaderStats{Plans: 2, Batches: 3, Samples: 96, Bytes: 4096, FetchSeconds: 1.5, OtherSeconds: 0.25}
		},
	})
	d := m.WrapDownloader(fakeDownloader{})
	d.Fetch(context.Background(), fetch.Attrs{Object: fetch.Object{Name: "ok"}}, nil, fetch.NewUrgency(fetch.Demand))
	d.Fetch(context.Background(), fetch.Attrs{Object: fetch.Object{Name: "bad"}}, nil, nil)
	m.ObserveRequest("GET /v1/status", 200)
	m.ObserveReload(nil)

	srv := httptest.NewServer(m.Handler(func() bool { return false }))
	defer srv.Close()
	body := get(t, srv.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		`cacheagent_tier_objects{tier="disk"} 2`,
		`cacheagent_tier_bytes{tier="disk"} 8192`,
		`cacheagent_tier_promotions_total{tier="shm"} 5`,
		`cacheagent_fetch_retries_total{cause="stall"} 3`,
		`cacheagent_fetch_bytes_total 42`,
		`cacheagent_fetch_connections_limit 64`,
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
