package emulator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
)

// objSize is the size of the object the fault tests read: several chunks.
const objSize = 300_000

// faultServer starts an emulator holding b/o = Pattern(1, objSize) and a
// plain HTTP client for it.
func faultServer(t *testing.T) (*Server, *http.Client, []byte) {
	t.Helper()
	s := start(t, Options{})
	data := Pattern(1, objSize)
	if _, err := s.Put("b", "o", data); err != nil {
		t.Fatalf("Put: %v", err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return s, &http.Client{Transport: tr}, data
}

// only returns a plan that applies f to every media GET.
func only(f Fault) FaultPlan { return func(*http.Request, int) Fault { return f } }

// fetch GETs url with an optional Range and reads the whole body.
func fetch(ctx context.Context, c *http.Client, url, rng string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestStatusFaults(t *testing.T) {
	s, c, _ := faultServer(t)
	tests := []struct {
		f          Fault
		wantStatus int
	}{
		{Fault{Status: http.StatusServiceUnavailable, RetryAfter: "1"}, 503},
		{Fault{Status: http.StatusTooManyRequests}, 429},
		{Fault{Status: http.StatusForbidden}, 403},
		{Fault{Status: 42}, 500},
	}
	for _, tt := range tests {
		s.SetFaults(only(tt.f))
		resp, body, err := fetch(testCtx(t), c, mediaURL(s, "b", "o"), "")
		if err != nil {
			t.Fatalf("GET with %+v: %v", tt.f, err)
		}
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("status %d: got %d; want %d", tt.f.Status, resp.StatusCode, tt.wantStatus)
		}
		if got := resp.Header.Get("Retry-After"); got != tt.f.RetryAfter {
			t.Errorf("status %d: Retry-After = %q; want %q", tt.f.Status, got, tt.f.RetryAfter)
		}
		if tt.wantStatus == tt.f.Status && len(body) != 0 {
			t.Errorf("status %d: body has %d bytes; want none", tt.f.Status, len(body))
		}
	}
	if got, want := s.BytesServed(), int64(0); got != want {
		t.Errorf("BytesServed() = %d; want %d", got, want)
	}
}

func TestBodyFaults(t *testing.T) {
	tests := []struct {
		name     string
		f        Fault
		rng      string // Range header, if any
		wantLen  int    // body bytes received
		wantErr  error  // from reading the body
		wantFlip int64  // offset of the one corrupted byte, or -1
	}{
		{"none", Fault{}, "", objSize, nil, -1},
		{"reset", Fault{ResetAfter: 100_000}, "", 100_000, syscall.ECONNRESET, -1},
		{"reset mid-chunk", Fault{ResetAfter: 70_001}, "", 70_001, syscall.ECONNRESET, -1},
		{"close", Fault{CloseAfter: 100_000}, "", 100_000, io.ErrUnexpectedEOF, -1},
		{"truncate", Fault{TruncateTo: 100_000}, "", 100_000, nil, -1},
		{"truncate range", Fault{TruncateTo: 1000}, "bytes=5000-", 1000, nil, -1},
		{"truncate beyond end", Fault{TruncateTo: objSize + 1}, "", objSize, nil, -1},
		{"corrupt", Fault{Corrupt: true, CorruptAt: 70_000}, "", objSize, nil, 70_000},
		{"corrupt first", Fault{Corrupt: true, CorruptAt: 0}, "", objSize, nil, 0},
		{"corrupt last", Fault{Corrupt: true, CorruptAt: objSize - 1}, "", objSize, nil, objSize - 1},
		{"corrupt range", Fault{Corrupt: true, CorruptAt: 10}, "bytes=5000-5999", 1000, nil, 10},
		{"corrupt middle", Fault{Corrupt: true, CorruptMiddle: true}, "", objSize, nil, objSize / 2},
		{"corrupt middle of range", Fault{Corrupt: true, CorruptAt: 3, CorruptMiddle: true}, "bytes=5000-5999", 1000, nil, 500},
		{"corrupt middle of a long range", Fault{Corrupt: true, CorruptMiddle: true}, "bytes=5000-", objSize - 5000, nil,
			(objSize - 5000) / 2},
		{"corrupt then close", Fault{Corrupt: true, CorruptAt: 5, CloseAfter: 9}, "", 9, io.ErrUnexpectedEOF, 5},
		{"stall at end", Fault{StallAt: objSize, Stall: time.Millisecond}, "", objSize, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, c, data := faultServer(t)
			s.SetFaults(only(tt.f))
			resp, body, err := fetch(testCtx(t), c, mediaURL(s, "b", "o"), tt.rng)
			if resp == nil {
				t.Fatalf("GET: %v", err)
			}
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("read body: %v; want no error", err)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("read body: error %v; want %v", err, tt.wantErr)
			}
			if len(body) != tt.wantLen {
				t.Fatalf("got %d body bytes; want %d", len(body), tt.wantLen)
			}
			want := data
			if tt.rng != "" {
				want = data[5000:]
			}
			if diffs := diffOffsets(body, want[:len(body)]); tt.wantFlip < 0 && len(diffs) != 0 {
				t.Errorf("body differs at offsets %v; want identical", diffs)
			} else if tt.wantFlip >= 0 && (len(diffs) != 1 || diffs[0] != tt.wantFlip) {
				t.Errorf("body differs at offsets %v; want exactly [%d]", diffs, tt.wantFlip)
			}
			s.Close() // waits for the handler, so the count is final
			if got := s.BytesServed(); got != int64(tt.wantLen) {
				t.Errorf("BytesServed() = %d; want %d", got, tt.wantLen)
			}
			if got := s.MediaGETs(); got != 1 {
				t.Errorf("MediaGETs() = %d; want 1", got)
			}
		})
	}
}

// diffOffsets returns the offsets (at most 10) where a and b differ.
func diffOffsets(a, b []byte) []int64 {
	var d []int64
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] && len(d) < 10 {
			d = append(d, int64(i))
		}
	}
	return d
}

// TestResetDeliversExactPrefix resets a body larger than the socket buffers:
// the reset must wait for the peer to acknowledge what was written, or the
// kernel discards the unsent tail and the client sees fewer bytes.
func TestResetDeliversExactPrefix(t *testing.T) {
	const size, cut = 16 << 20, 12<<20 + 3
	s := start(t, Options{Faults: only(Fault{ResetAfter: cut})})
	if _, err := s.Put("b", "o", Pattern(5, size)); err != nil {
		t.Fatalf("Put: %v", err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	_, body, err := fetch(testCtx(t), &http.Client{Transport: tr}, mediaURL(s, "b", "o"), "")
	if len(body) != cut || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("got %d bytes, error %v; want %d bytes, ECONNRESET", len(body), err, cut)
	}
}

func TestStallHoldsBytesUntilCancelled(t *testing.T) {
	s, c, data := faultServer(t)
	s.SetFaults(only(Fault{StallAt: 1000, Stall: time.Hour}))
	ctx, cancel := context.WithCancel(testCtx(t))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, mediaURL(s, "b", "o"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	head := make([]byte, 1000)
	if _, err := io.ReadFull(resp.Body, head); err != nil || !bytes.Equal(head, data[:1000]) {
		t.Fatalf("first 1000 bytes: err %v, equal %v; want the object's", err, bytes.Equal(head, data[:1000]))
	}
	cancel() // the only way past an hour-long stall
	n, err := io.Copy(io.Discard, resp.Body)
	if n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("after the stall began: read %d bytes, error %v; want 0 bytes, context.Canceled", n, err)
	}
	s.Close() // returns only once the stalled handler has seen the cancellation
	if got := s.BytesServed(); got != 1000 {
		t.Errorf("BytesServed() = %d; want 1000", got)
	}
}

func TestStallDelaysRest(t *testing.T) {
	s, c, data := faultServer(t)
	const stall = 100 * time.Millisecond
	s.SetFaults(only(Fault{StallAt: 1000, Stall: stall}))
	began := time.Now()
	_, body, err := fetch(testCtx(t), c, mediaURL(s, "b", "o"), "")
	if err != nil || !bytes.Equal(body, data) {
		t.Fatalf("GET: %d bytes, error %v; want the %d-byte object", len(body), err, len(data))
	}
	// A lower bound only: the stall cannot end before it has lasted.
	if got := time.Since(began); got < stall {
		t.Errorf("stalled body took %v; want at least %v", got, stall)
	}
}

func TestHeaderWait(t *testing.T) {
	s, c, _ := faultServer(t)
	const wait = 100 * time.Millisecond
	s.SetFaults(only(Fault{HeaderWait: wait}))
	began := time.Now()
	resp, _, err := fetch(testCtx(t), c, mediaURL(s, "b", "o"), "")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status = %d; want 200", resp.StatusCode)
	}
	if got := time.Since(began); got < wait { // lower bound only
		t.Errorf("headers after %v; want at least %v", got, wait)
	}
}

func TestHeaderWaitHonoursCancellation(t *testing.T) {
	s, c, _ := faultServer(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	planned := make(chan struct{})
	s.SetFaults(func(*http.Request, int) Fault {
		close(planned)
		return Fault{HeaderWait: time.Hour}
	})
	var wg sync.WaitGroup
	var err error
	wg.Go(func() { _, _, err = fetch(ctx, c, mediaURL(s, "b", "o"), "") })
	<-planned
	cancel()
	wg.Wait()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("GET = %v; want context.Canceled", err)
	}
	s.Close() // returns only once the waiting handler has seen the cancellation
}

func TestCloseEndsStalledHandlers(t *testing.T) {
	s, c, _ := faultServer(t)
	s.SetFaults(func(_ *http.Request, n int) Fault {
		if n == 1 {
			return Fault{StallAt: 1000, Stall: time.Hour}
		}
		return Fault{HeaderWait: time.Hour}
	})
	resp, err := c.Get(mediaURL(s, "b", "o"))
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
		t.Fatalf("read before the stall: %v", err)
	}
	planned := make(chan struct{})
	s.SetFaults(func(*http.Request, int) Fault {
		close(planned)
		return Fault{HeaderWait: time.Hour}
	})
	var wg sync.WaitGroup
	var err2 error
	wg.Go(func() { _, _, err2 = fetch(testCtx(t), c, mediaURL(s, "b", "o"), "") })
	<-planned
	s.Close() // a hang here (caught by go test -timeout) is a leaked handler
	if n, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Errorf("stalled body after Close: %d bytes, no error; want an error", n)
	}
	wg.Wait()
	if err2 == nil {
		t.Error("GET waiting for headers during Close succeeded; want an error")
	}
	if _, err := c.Get(mediaURL(s, "b", "o")); err == nil {
		t.Error("GET after Close succeeded; want an error")
	}
}

// TestClientUnderFaults drives the real storage client through faults it
// must survive: retried statuses and mid-body resets it resumes from.
func TestClientUnderFaults(t *testing.T) {
	tests := []struct {
		name     string
		plan     FaultPlan
		wantGETs int64
	}{
		{"503 then 429", func(_ *http.Request, n int) Fault {
			return [...]Fault{{Status: 503}, {Status: 429, RetryAfter: "0"}, {}}[min(n, 3)-1]
		}, 3},
		{"reset then close", func(_ *http.Request, n int) Fault {
			return [...]Fault{{ResetAfter: 150_000}, {CloseAfter: 70_000}, {}}[min(n, 3)-1]
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, data := faultServer(t)
			s.SetShape(Shape{BytesPerSec: 50e6})
			s.SetFaults(tt.plan)
			got, err := readObject(testCtx(t), newClient(t, s), "b", "o")
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read: %d bytes, error %v; want the %d-byte object", len(got), err, len(data))
			}
			if n := s.MediaGETs(); n != tt.wantGETs {
				t.Errorf("MediaGETs() = %d; want %d", n, tt.wantGETs)
			}
		})
	}
	t.Run("persistent 503 with deadline", func(t *testing.T) {
		s, _, _ := faultServer(t)
		s.SetFaults(only(Fault{Status: 503}))
		ctx, cancel := context.WithTimeout(testCtx(t), 200*time.Millisecond)
		defer cancel()
		_, err := readObject(ctx, newClient(t, s), "b", "o")
		// The client retries until the deadline; depending on where the
		// deadline lands it reports it, or the last 503 it got.
		var gerr *googleapi.Error
		if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &gerr) && gerr.Code == 503) {
			t.Errorf("read = %v; want context.DeadlineExceeded or the last 503", err)
		}
		if n := s.MediaGETs(); n < 2 {
			t.Errorf("MediaGETs() = %d; want retries", n)
		}
	})
	t.Run("503 without retries", func(t *testing.T) {
		s, _, _ := faultServer(t)
		s.SetFaults(only(Fault{Status: 503}))
		c := newClient(t, s)
		c.SetRetry(storage.WithPolicy(storage.RetryNever))
		_, err := readObject(testCtx(t), c, "b", "o")
		var gerr *googleapi.Error
		if !errors.As(err, &gerr) || gerr.Code != http.StatusServiceUnavailable {
			t.Errorf("read = %v; want a googleapi 503", err)
		}
		if n := s.MediaGETs(); n != 1 {
			t.Errorf("MediaGETs() = %d; want 1", n)
		}
	})
}
