package control

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// serve runs h on a Unix socket in a temp dir until the test ends and
// returns the socket's path.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		srv.Serve(ln)
		close(done)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return path
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestDialUnavailable(t *testing.T) {
	dir := t.TempDir()
	_, err := Dial(ctxT(t), filepath.Join(dir, "missing.sock"))
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Dial(missing socket) = %v; want ErrUnavailable", err)
	}
	// A socket file nobody listens on (a dead daemon's).
	path := filepath.Join(dir, "dead.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := Dial(ctxT(t), path); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Dial(dead socket) = %v; want ErrUnavailable", err)
	}
}

func TestErrorCodes(t *testing.T) {
	for code, sentinel := range map[string]error{CodeObjectNotFound: object.ErrNotFound,
		CodeInvalidName: object.ErrInvalidName, CodeChecksum: object.ErrChecksum, CodeNoSpace: ErrNoSpace,
		CodeNoShm: ErrNoShm, CodeNotFound: ErrNotFound, CodeInvalid: ErrInvalid,
		CodeSessionEnded: ErrSessionEnded, CodeUnavailable: ErrUnavailable} {
		e := &Error{Status: StatusOf(code), Code: code, Message: "m"}
		if !errors.Is(e, sentinel) {
			t.Errorf("code %q (status %d) does not match %v", code, e.Status, sentinel)
		}
		if e.Status < 400 || e.Status == http.StatusInternalServerError {
			t.Errorf("code %q: status %d", code, e.Status)
		}
	}
	if status := StatusOf(CodeInternal); status != http.StatusInternalServerError {
		t.Errorf("StatusOf(internal) = %d; want 500", status)
	}
	e := &Error{Code: CodeUnavailable}
	if errors.Is(e, context.Canceled) || errors.Is(e, ErrNotFound) {
		t.Error("an unavailable answer matches context.Canceled or ErrNotFound; want only ErrUnavailable")
	}
	if errors.Is(&Error{Code: "unknown"}, ErrInvalid) {
		t.Error("an unknown code matches ErrInvalid")
	}
}

// TestSessionEvents serves a session that reports lease 1 stale and then
// ends: the first lease turns stale, then the second, and Release of both
// succeeds without the daemon.
func TestSessionEvents(t *testing.T) {
	staleNow := make(chan struct{})
	endNow := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ping", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(Info{Version: "fake"})
	})
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		enc.Encode(SessionEvent{Session: "s1"})
		http.NewResponseController(w).Flush()
		select {
		case <-staleNow:
		case <-r.Context().Done():
			return
		}
		enc.Encode(SessionEvent{Stale: []uint64{1}})
		http.NewResponseController(w).Flush()
		select {
		case <-endNow:
		case <-r.Context().Done():
		}
	})
	var next atomic.Uint64
	mux.HandleFunc("POST /v1/sessions/s1/leases", func(w http.ResponseWriter, r *http.Request) {
		var ref ObjectRef
		json.NewDecoder(r.Body).Decode(&ref)
		json.NewEncoder(w).Encode(LeaseInfo{ID: next.Add(1), Path: "/x/" + ref.Name,
			Attrs: Attrs{Bucket: ref.Bucket, Name: ref.Name, Generation: 7, Size: 3}})
	})
	mux.HandleFunc("DELETE /v1/sessions/s1/leases/{id}", func(w http.ResponseWriter, _ *http.Request) {
		writeGone(w)
	})
	c, err := Dial(ctxT(t), serve(t, mux))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	l1, err := c.Acquire(ctx, object.Object{Bucket: "b", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Acquire(ctx, object.Object{Bucket: "b", Name: "two"})
	if err != nil {
		t.Fatal(err)
	}
	if l1.Path() != "/x/one" || l1.Size() != 3 || l1.Attrs().Generation != 7 || l1.Stale() {
		t.Errorf("lease = %q %d %+v stale %v", l1.Path(), l1.Size(), l1.Attrs(), l1.Stale())
	}
	close(staleNow)
	awaitDone(t, l1)
	if l2.Stale() {
		t.Error("lease 2 stale after an event naming only lease 1")
	}
	close(endNow)
	awaitDone(t, l2)
	for _, l := range []*Lease{l1, l2} {
		if err := l.Close(); err != nil {
			t.Errorf("Close of a lease of an ended session = %v; want nil", err)
		}
	}
}

// writeGone answers that the session ended.
func writeGone(w http.ResponseWriter) {
	w.WriteHeader(http.StatusGone)
	json.NewEncoder(w).Encode(ErrorBody{Error: "gone", Code: CodeSessionEnded})
}

// awaitDone waits for l to turn stale.
func awaitDone(t *testing.T, l *Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(time.Minute):
		t.Fatalf("lease %d never turned stale", l.id)
	}
}
