package plan

// Policy is an eviction policy that Simulate can replay.
type Policy uint8

const (
	// LRU evicts the least recently used entry.
	LRU Policy = iota
	// Belady evicts by Order with the whole trace announced as one plan:
	// the entry whose next use is farthest (the clairvoyant policy).
	Belady
)

// String returns "lru" or "belady".
func (p Policy) String() string {
	switch p {
	case LRU:
		return "lru"
	case Belady:
		return "belady"
	}
	return "invalid"
}

// Result counts what a simulated cache did.
type Result struct {
	// Hits and Misses count accesses; HitBytes and MissBytes their sizes.
	Hits, Misses        int
	HitBytes, MissBytes int64
	// Evictions counts entries evicted.
	Evictions int
}

// HitRatio returns Hits/(Hits+Misses), or 0 for an empty trace.
func (r Result) HitRatio() float64 {
	if r.Hits+r.Misses == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Hits+r.Misses)
}

// Simulate replays trace through a demand-filled cache of capacity bytes
// that evicts under policy p, and counts hits. size gives each key's size
// (nil: 1 each). A miss always inserts the key, evicting Order's victims
// until it fits, except a key larger than the whole capacity, which is
// never cached. LRU is the same machinery with no plan announced, so the
// two differ only in what the Index knows.
func Simulate[K comparable](trace []K, size func(K) int64, capacity int64, p Policy) Result {
	if size == nil {
		size = func(K) int64 { return 1 }
	}
	x := NewIndex[K]()
	const id = "trace"
	if p == Belady {
		x.Announce(id, trace)
	}
	type resident struct {
		size    int64
		lastUse int64
	}
	cache := make(map[K]*resident)
	var used int64
	var res Result
	var cands []Candidate[K]
	for i, k := range trace {
		x.Advance(id, i+1) // the access at i is now in the past
		s := size(k)
		if r, ok := cache[k]; ok {
			r.lastUse = int64(i)
			res.Hits++
			res.HitBytes += s
			continue
		}
		res.Misses++
		res.MissBytes += s
		if s > capacity {
			continue
		}
		if need := used + s - capacity; need > 0 {
			cands = cands[:0]
			for key, r := range cache {
				cands = append(cands, Candidate[K]{Key: key, Size: r.size, LastUse: r.lastUse})
			}
			n, _ := x.Select(cands, need, -1)
			for _, v := range cands[:n] {
				used -= v.Size
				delete(cache, v.Key)
				res.Evictions++
			}
		}
		cache[k] = &resident{size: s, lastUse: int64(i)}
		used += s
	}
	return res
}
