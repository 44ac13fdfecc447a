package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// hangGuard bounds the waits of these tests: reached only on a hang.
const hangGuard = 30 * time.Second

// keepaliveForever serves every request 200, then a keepalive frame every
// 20ms until the requester goes: a batch owner that never answers.
func keepaliveForever(t *testing.T) string {
	ln := listen(t)
	serve(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
			if _, err := w.Write(appendFrame(nil, frame{st: itemWait})); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	return ln.Addr().String()
}

// readWithin reads n bytes of o from src on ctx, and fails the test if
// that hangs.
func readWithin(t *testing.T, ctx context.Context, src *Source, o object.Object, n int64) ([]byte, error) {
	t.Helper()
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := src.NewRangeReader(ctx, o, 0, n)
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		done <- result{b, err}
	}()
	select {
	case res := <-done:
		return res.b, res.err
	case <-time.After(hangGuard):
		t.Fatalf("the read of %s still blocked after %v", o, hangGuard)
		return nil, nil
	}
}

// TestBatchReadEndsWithItsContext: a read that sends a batch returns when
// its context ends, although the owner keeps the batch alive with
// keepalives; Close ends the batch it leaves behind.
func TestBatchReadEndsWithItsContext(t *testing.T) {
	e := newGCSEnv(t)
	src, err := New(e.gcs, patient(ownedBy(Candidate{Name: "p", Addr: keepaliveForever(t)})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(withSize(t.Context(), 2000), 200*time.Millisecond)
	defer cancel()
	o := object.Object{Bucket: bucket, Name: "small", Generation: 1}
	if _, err := readWithin(t, ctx, src, o, 2000); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("read = %v; want its context's deadline", err)
	}
	closed := make(chan struct{})
	go func() {
		src.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(hangGuard):
		t.Fatal("Close still waiting for the batch")
	}
}

// TestBatchTimeout: a batch whose owner sends only keepalives ends after
// BatchTimeout; its read counts a timeout and reads GCS instead.
func TestBatchTimeout(t *testing.T) {
	e := newGCSEnv(t)
	cfg := patient(ownedBy(Candidate{Name: "p", Addr: keepaliveForever(t)}))
	cfg.BatchTimeout = 200 * time.Millisecond
	src, err := New(e.gcs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	data := emulator.Pattern(800, 2000)
	o := e.put(t, bucket, "small", data)
	got, err := readWithin(t, withSize(t.Context(), int64(len(data))), src, o, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	checkBytes(t, "read", got, data)
	if st := src.Stats(); st.PeerErrors["timeout"] != 1 || st.OriginBytes != int64(len(data)) {
		t.Errorf("Stats = %+v; want one timeout, then the object from GCS", st)
	}
}

// TestBatchKeepaliveKeepsFillAlive: while the owner fills a batch's
// objects, its keepalive frames tell the requester's Downloader, as a
// single request's heartbeats do, so a fill longer than the Downloader's
// stall timeout is not taken for a stall.
func TestBatchKeepaliveKeepsFillAlive(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			e := newGCSEnv(t)
			la, lb := listen(t), listen(t)
			cfg := patient(ownedBy(Candidate{Name: "b", Addr: lb.Addr().String()}))
			if !batch {
				cfg.BatchBelow = -1
			}
			fcfg := testFetch
			fcfg.StallTimeout = 500 * time.Millisecond // the requester's Downloader only
			a := startNodeFetch(t, e, "a", la, cfg, fcfg, nil)
			objs, datas := slowOwner(t, e, lb, 700, 1500*time.Millisecond)
			readAllOn(t, a, objs, datas)
			if st := a.local.Stats(); st.Stalls != 0 {
				t.Errorf("a's Downloader counted %d stalls while b was filling; want none", st.Stalls)
			}
			if st := a.src.Stats(); batch && st.BatchedObjects == 0 {
				t.Errorf("Stats = %+v; want the objects batched", st)
			}
		})
	}
}
