package stats

// Mount describes a FUSE mount (package mount) and what it served.
type Mount struct {
	// Path is the mountpoint.
	Path string `json:"path"`
	// Open is how the mount answers opens: "ask" (each open is a request;
	// reads by passthrough where Passthrough), "skip" (the kernel opens
	// files itself), or "auto" until the first open decides.
	Open string `json:"open"`
	// Passthrough reports whether the kernel reads opened files' cached
	// copies itself.
	Passthrough bool `json:"passthrough"`
	// Opens counts the opens the kernel asked for, OpenErrors those that
	// failed; OpenFiles is the files open now.
	Opens      int64 `json:"opens"`
	OpenErrors int64 `json:"open_errors"`
	OpenFiles  int64 `json:"open_files"`
	// Reads counts the reads the daemon served (none with passthrough),
	// ReadBytes the bytes they asked for.
	Reads     int64 `json:"reads"`
	ReadBytes int64 `json:"read_bytes"`
	// Listings and ListErrors count bucket listings done and failed;
	// Buckets is the buckets shown now.
	Listings   int64 `json:"listings"`
	ListErrors int64 `json:"list_errors"`
	Buckets    int64 `json:"buckets"`
	// Skipped counts the distinct object names left out (not valid
	// paths); Probes the existence checks of buckets at the source
	// (dynamic mounts).
	Skipped int64 `json:"skipped"`
	Probes  int64 `json:"probes"`
}
