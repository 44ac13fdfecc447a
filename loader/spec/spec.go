// Package spec is the one shape of a loader request: which dataset to read
// and how, as `cacheagent loader`'s flags, the daemon's POST /v1/loaders
// body and the Python client's Loader arguments all say it. It is plain
// JSON-tagged data and imports only the standard library, so a client of
// the daemon links nothing of the loader; loader.Resolve turns a Spec into a
// loader configuration.
package spec

import "encoding/json"

// Spec is a loader request: the dataset and the loader's settings. Zero
// fields take their defaults. Its JSON is the body of POST /v1/loaders.
type Spec struct {
	// Data (gs://BUCKET/PREFIX) and Pattern (e.g. "shard-*.{x,y}.npy")
	// name the dataset; or Manifest holds a manifest (see
	// loader.ParseManifest). Exactly one of Data and Manifest.
	Data     string          `json:"data,omitempty"`
	Pattern  string          `json:"pattern,omitempty"`
	Manifest json.RawMessage `json:"manifest,omitempty"`
	// Format is the shards' format by its name ("npy", "tokens",
	// "megatron", "webdataset", … — every format the loader knows); ""
	// guesses it from the pattern and the token settings. A manifest
	// lists .npy datasets only.
	Format string `json:"format,omitempty"`
	// SeqLen is a token dataset's window length L (samples are L+1
	// tokens; required for "tokens" and "megatron"); TokenDType the raw
	// token files' type ("uint16", "int32"…; llm.c shards and Megatron
	// indexes carry theirs).
	SeqLen     int    `json:"seq_len,omitempty"`
	TokenDType string `json:"token_dtype,omitempty"`
	// TokenOutDType is the "tokens" array's type: "" for the tokens' own,
	// "int64" or "int32" to widen them as they are gathered.
	TokenOutDType string `json:"token_out_dtype,omitempty"`
	// FieldBytes bounds each WebDataset field's bytes in one batch, the
	// size of its data buffer (0: batch_size × the field's largest
	// member). A batch that does not fit fails.
	FieldBytes int `json:"field_bytes,omitempty"`
	// BatchSize is the number of samples per batch. Required.
	BatchSize int `json:"batch_size"`
	// Shuffle is "shard-window" (the default), "global", "sequential" or
	// "node"; Window the shard-window's window in shards (0: the
	// default).
	Shuffle string `json:"shuffle,omitempty"`
	Window  int    `json:"window,omitempty"`
	Seed    uint64 `json:"seed,omitempty"`
	// Epoch is the first epoch, Epochs how many (0 means 1).
	Epoch  int `json:"epoch,omitempty"`
	Epochs int `json:"epochs,omitempty"`
	// Rank of World (0 means 1).
	Rank  int `json:"rank,omitempty"`
	World int `json:"world,omitempty"`
	// RanksPerNode, Nodes and Node place the rank for the "node" shuffle
	// (other modes ignore them): Nodes nodes (0: World/RanksPerNode, or 1
	// node without RanksPerNode), this rank on node Node (nil:
	// Rank/(World/Nodes), torchrun's numbering).
	RanksPerNode int  `json:"ranks_per_node,omitempty"`
	Nodes        int  `json:"nodes,omitempty"`
	Node         *int `json:"node,omitempty"`
	// DropLast drops each epoch's last batch if it is not full; Tail is
	// "wrap" (the default: pad the epoch across ranks with repeats) or
	// "drop".
	DropLast bool   `json:"drop_last,omitempty"`
	Tail     string `json:"tail,omitempty"`
	// Prefetch is the number of batch buffers (a loader session's ring
	// slots): batches held by the consumer, ready, or being gathered (0:
	// the loader's default).
	Prefetch int `json:"prefetch,omitempty"`
	// Workers is the number of gathering goroutines (0: the loader's
	// default).
	Workers int `json:"workers,omitempty"`
	// Resume starts at a state saved from a loader with the same settings
	// (except the rank).
	Resume *State `json:"resume,omitempty"`
}

// State is a position in a loader's sequence of batches (loader.State):
// the next batch is batch Batch of epoch Epoch. Fingerprint identifies the
// settings it was saved with (0: unchecked).
type State struct {
	Epoch       int    `json:"epoch"`
	Batch       int    `json:"batch"`
	Fingerprint uint64 `json:"fingerprint,omitempty"`
}
