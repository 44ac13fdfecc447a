package stats

// Plan describes the announced access plans and what the cache's planner
// did.
type Plan struct {
	// Plans is the number of announced plans; Objects the distinct objects
	// they hold.
	Plans   int `json:"plans"`
	Objects int `json:"objects"`
	// Prefetched counts the objects the planner fetched ahead of readers,
	// PrefetchedBytes their bytes.
	Prefetched      int64 `json:"prefetched"`
	PrefetchedBytes int64 `json:"prefetched_bytes"`
	// Listings counts the directories the planner listed to learn its
	// objects' attributes; Listed the objects it then fetched without a
	// metadata request of their own.
	Listings int64 `json:"listings"`
	Listed   int64 `json:"listed"`
	// FetchRate and ConsumeRate are the measured rates, in bytes per
	// second, of the planner's fetches and of readers advancing through
	// their plans (0: not measured yet).
	FetchRate   float64 `json:"fetch_rate"`
	ConsumeRate float64 `json:"consume_rate"`
	// Lookahead is how many bytes ahead of the readers the planner last
	// aimed to hold.
	Lookahead int64 `json:"lookahead"`
}
