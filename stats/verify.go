package stats

// Verify is what a verification of cached copies found: one pass of
// tier.Cache.Verify, as `cacheagent verify` prints it and the daemon's
// scrub logs it. Every checked copy is counted once in Verified,
// Unverifiable, Corrupt, Damaged or Skipped.
type Verify struct {
	// Objects counts the cached objects looked at; Copies their copies
	// (disk, and shm where there is one) read.
	Objects int64 `json:"objects"`
	Copies  int64 `json:"copies"`
	// Bytes counts the bytes read.
	Bytes int64 `json:"bytes"`
	// Verified counts the copies whose CRC32C matched the one the index
	// records.
	Verified int64 `json:"verified"`
	// Unverifiable counts the copies indexed without a CRC32C: their size
	// was checked, not their bytes. Copies filled now always have one (a
	// source without CRC32Cs, a local directory or a fleet's chunk copy,
	// gets the CRC32C of the bytes as filled); older indexes may hold
	// such copies.
	Unverifiable int64 `json:"unverifiable"`
	// Corrupt counts the copies whose bytes did not match their CRC32C or
	// could not be read: dropped (doomed while in use), refetched at the
	// next open.
	Corrupt int64 `json:"corrupt"`
	// Damaged counts the copies whose file was deleted, replaced or
	// truncated behind the cache's back: dropped like Corrupt ones.
	Damaged int64 `json:"damaged"`
	// Skipped counts the copies that left the cache (evicted, replaced)
	// while the pass reached them.
	Skipped int64 `json:"skipped"`
}
