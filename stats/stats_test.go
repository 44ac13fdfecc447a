package stats

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCache(t *testing.T) {
	base := Tier{Name: "disk", Hits: 3, Misses: 2}
	shm := Tier{Name: "shm", Hits: 4, Misses: 5}
	one := Cache{Tiers: []Tier{base}}
	two := Cache{Tiers: []Tier{shm, base}}
	if got := one.Base(); got != base {
		t.Errorf("Base() = %+v; want %+v", got, base)
	}
	if _, ok := one.Shm(); ok {
		t.Error("Shm() of a one-tier cache is ok")
	}
	if got, ok := two.Shm(); !ok || got != shm {
		t.Errorf("Shm() = %+v, %v; want %+v", got, ok, shm)
	}
	if got := two.Base(); got != base {
		t.Errorf("Base() = %+v; want %+v", got, base)
	}
	if two.Hits() != 7 || two.Misses() != 2 {
		t.Errorf("Hits, Misses = %d, %d; want 7, 2", two.Hits(), two.Misses())
	}
	if (Cache{}).Base() != (Tier{}) {
		t.Error("Base() of no tiers is not zero")
	}
}

func TestTierHitRatio(t *testing.T) {
	tr := Tier{Hits: 3, Misses: 1}
	tr.SetHitRatio()
	if tr.HitRatio != 0.75 {
		t.Errorf("HitRatio = %v; want 0.75", tr.HitRatio)
	}
	tr = Tier{}
	tr.SetHitRatio()
	if tr.HitRatio != 0 {
		t.Errorf("HitRatio of no opens = %v; want 0", tr.HitRatio)
	}
}

// TestTierJSONKeys checks the keys `cacheagent status --json` has always
// printed.
func TestTierJSONKeys(t *testing.T) {
	b, err := json.Marshal(Tier{Promotions: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "dir", "entries", "used_bytes", "max_bytes", "pinned_bytes", "reserved_bytes",
		"in_use_bytes", "pending_bytes", "hits", "misses", "hit_ratio", "bytes_fetched", "evictions", "promotions"} {
		if !strings.Contains(string(b), `"`+k+`":`) {
			t.Errorf("Marshal = %s; lacks %q", b, k)
		}
	}
	if b, _ := json.Marshal(Tier{}); strings.Contains(string(b), "promotions") {
		t.Errorf("Marshal = %s; want promotions omitted when zero", b)
	}
}

// TestFetchJSONKeys checks the keys of the downloader's status.
func TestFetchJSONKeys(t *testing.T) {
	b, err := json.Marshal(Fetch{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"connections", "conns_in_use", "waiting_slices", "small_conns_in_use", "slice_bytes",
		"objects", "failures", "bytes", "ranges", "retries", "crc_failures", "stalls"} {
		if !strings.Contains(string(b), `"`+k+`":`) {
			t.Errorf("Marshal = %s; lacks %q", b, k)
		}
	}
}
