package control

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/cacheagent/cacheagent/loader/ring"
)

// LoaderRequest is the body of POST /v1/loaders: the dataset and the
// loader's settings, as `cacheagent loader ids` takes them.
type LoaderRequest struct {
	// Data (gs://BUCKET/PREFIX) and Pattern (e.g. "shard-*.{x,y}.npy")
	// name the dataset; or Manifest holds a manifest (see
	// loader.ParseManifest). Exactly one of Data and Manifest.
	Data     string          `json:"data,omitempty"`
	Pattern  string          `json:"pattern,omitempty"`
	Manifest json.RawMessage `json:"manifest,omitempty"`
	// Format is the shards' format: "npy", "tokens", "megatron" or
	// "webdataset"; "" guesses as `cacheagent loader` does
	// (loader.GuessFormat). A manifest lists .npy datasets only.
	Format string `json:"format,omitempty"`
	// SeqLen is a token dataset's window length L (samples are L+1
	// tokens; required for "tokens" and "megatron"); TokenDType the raw
	// token files' type ("uint16", "int32"…; llm.c shards and Megatron
	// indexes carry theirs).
	SeqLen     int    `json:"seq_len,omitempty"`
	TokenDType string `json:"token_dtype,omitempty"`
	// TokenOutDType is the "tokens" array's type: "" for the tokens' own,
	// "int64" or "int32" to widen them as they are gathered (as
	// --token-out-dtype).
	TokenOutDType string `json:"token_out_dtype,omitempty"`
	// FieldBytes bounds each WebDataset field's bytes in one batch, the
	// size of its data array in the ring (0: batch_size × the field's
	// largest member; see loader.Config.FieldBytes). A batch that does not
	// fit ends the session with an error.
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
	// Rank/(World/Nodes), torchrun's numbering). See sampler.Place.
	RanksPerNode int  `json:"ranks_per_node,omitempty"`
	Nodes        int  `json:"nodes,omitempty"`
	Node         *int `json:"node,omitempty"`
	// DropLast drops each epoch's last batch if it is not full; Tail is
	// "wrap" (the default: pad the epoch across ranks with repeats) or
	// "drop".
	DropLast bool   `json:"drop_last,omitempty"`
	Tail     string `json:"tail,omitempty"`
	// Prefetch is the number of ring slots: batches held by the client,
	// ready, or being gathered (0 means 4, at most 64).
	Prefetch int `json:"prefetch,omitempty"`
	// Workers is the number of gathering goroutines (0: the loader's
	// default).
	Workers int `json:"workers,omitempty"`
	// Resume starts at a state saved from a session with the same
	// settings (except the rank).
	Resume *LoaderState `json:"resume,omitempty"`
}

// LoaderState is a position in a loader's sequence of batches
// (loader.State): the next batch is batch Batch of epoch Epoch.
type LoaderState struct {
	Epoch       int    `json:"epoch"`
	Batch       int    `json:"batch"`
	Fingerprint uint64 `json:"fingerprint,omitempty"`
}

// LoaderSession is the first line of POST /v1/loaders's stream: what the
// client needs to join the session on the data socket and read its ring.
type LoaderSession struct {
	// Protocol is the ring protocol's version (ring.Protocol).
	Protocol int `json:"protocol"`
	// Session and Token go in the data socket's Hello.
	Session string `json:"session"`
	Token   string `json:"token"`
	// DataSocket is the data socket's path.
	DataSocket string `json:"data_socket"`
	// RingBytes is the ring's size: Slots slots of SlotBytes.
	RingBytes int64 `json:"ring_bytes"`
	SlotBytes int64 `json:"slot_bytes"`
	Slots     int   `json:"slots"`
	// BatchSize is the most samples of a batch.
	BatchSize int `json:"batch_size"`
	// Format is the dataset's format (loader.Format's name).
	Format string `json:"format"`
	// Arrays are every batch's arrays in descriptor order, the samples'
	// ids ("ids", "<i8") last. A token dataset has one array, "tokens"
	// (samples of SeqLen+1 tokens). A WebDataset dataset has two per
	// field (Fields order): "<field>.offsets" ("<i8", batch+1 entries,
	// the first 0) and "<field>.data" ("|u1", the samples' values back
	// to back: sample i's is data[offsets[i]:offsets[i+1]], empty if it
	// lacks the field); both are variable-length (ArraySpec.Bytes is
	// their capacity) and a slot's descriptors give each batch's shapes,
	// [n+1] and [offsets[n]].
	Arrays []ring.ArraySpec `json:"arrays"`
	// Fields are a WebDataset dataset's field names.
	Fields []string `json:"fields,omitempty"`
	// BatchesPerEpoch is the number of batches of each epoch.
	BatchesPerEpoch int `json:"batches_per_epoch"`
	// Start is the position of the first batch.
	Start LoaderState `json:"start"`
}

// LoaderEvent is a later line of POST /v1/loaders's stream: the last one,
// saying why the session ended.
type LoaderEvent struct {
	Ended string `json:"ended,omitempty"`
}

// LoaderConn is a client's loader session: the control stream that keeps
// it open and its data-socket client, whose ring is mapped. Close ends the
// session.
type LoaderConn struct {
	// Info is the session's first line.
	Info LoaderSession
	*ring.Client
	body   io.Closer
	cancel context.CancelFunc
}

// OpenLoader opens a loader session (POST /v1/loaders) and joins it on the
// data socket. ctx bounds only the opening. Errors are the daemon's
// (matching ErrInvalid, object.ErrNotFound, …) or the data socket's.
func (c *Client) OpenLoader(ctx context.Context, req LoaderRequest) (*LoaderConn, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("control: open loader: %w", err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, cancel)
	resp, err := c.send(sctx, http.MethodPost, "/v1/loaders", nil, bytes.NewReader(b))
	if err != nil {
		stop()
		cancel()
		return nil, fmt.Errorf("control: open loader: %w", errors.Join(ctx.Err(), err))
	}
	var info LoaderSession
	err = json.NewDecoder(bufio.NewReader(resp.Body)).Decode(&info)
	if err == nil {
		var rc *ring.Client
		if rc, err = ring.Dial(ctx, info.DataSocket, info.Session, info.Token); err == nil {
			stop()
			return &LoaderConn{Info: info, Client: rc, body: resp.Body, cancel: cancel}, nil
		}
	}
	stop()
	cancel()
	resp.Body.Close()
	return nil, fmt.Errorf("control: open loader: %w", errors.Join(ctx.Err(), err))
}

// Close ends the session: it leaves the data socket, unmaps the ring and
// closes the control stream.
func (l *LoaderConn) Close() error {
	err := l.Client.Close()
	l.cancel()
	l.body.Close()
	return err
}
