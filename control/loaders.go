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
	"github.com/cacheagent/cacheagent/loader/spec"
)

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
	Start spec.State `json:"start"`
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

// OpenLoader opens a loader session of sp (POST /v1/loaders; the body is
// sp's JSON) and joins it on the data socket. ctx bounds only the opening. Errors are the daemon's
// (matching ErrInvalid, object.ErrNotFound, …) or the data socket's.
func (c *Client) OpenLoader(ctx context.Context, sp spec.Spec) (*LoaderConn, error) {
	b, err := json.Marshal(sp)
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
