package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"google.golang.org/api/googleapi"
)

func TestClassify(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("read gs://b/o: %w", err) }
	cases := []struct {
		name  string
		err   error
		cause RetryCause
		retry bool
	}{
		{"429", wrap(&googleapi.Error{Code: 429}), CauseThrottled, true},
		{"503", wrap(&googleapi.Error{Code: 503}), CauseServer, true},
		{"500", &googleapi.Error{Code: 500}, CauseServer, true},
		{"408", &googleapi.Error{Code: 408}, CauseServer, true},
		{"400", &googleapi.Error{Code: 400}, 0, false},
		{"401", &googleapi.Error{Code: 401}, 0, false},
		{"403", wrap(&googleapi.Error{Code: 403}), 0, false},
		{"404", &googleapi.Error{Code: 404}, 0, false},
		{"416", &googleapi.Error{Code: 416}, 0, false},
		{"not found", wrap(object.ErrNotFound), 0, false},
		{"generation", wrap(object.ErrGenerationChanged), 0, false},
		{"invalid name", wrap(object.ErrInvalidName), 0, false},
		{"overlong", errOverlong, 0, false},
		{"short read", wrap(fmt.Errorf("%w: got 1 of 2 bytes", object.ErrShortRead)), CauseShortRead, true},
		{"stall", fmt.Errorf("%w: %w", errStalled, context.Canceled), CauseStall, true},
		{"unexpected EOF", wrap(io.ErrUnexpectedEOF), CauseNetwork, true},
		{"reset", wrap(&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), CauseNetwork, true},
		{"refused", &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, CauseNetwork, true},
		{"url error", &url.Error{Op: "Get", URL: "http://x", Err: errors.New("tls: handshake failure")}, CauseNetwork, true},
		{"source timeout", wrap(context.DeadlineExceeded), CauseNetwork, true},
		{"dst EPIPE", &dstError{syscall.EPIPE}, 0, false},
		{"dst ENOSPC", &dstError{syscall.ENOSPC}, 0, false},
		{"unknown", errors.New("something else"), 0, false},
	}
	for _, tc := range cases {
		cause, retry := classify(context.Background(), tc.err)
		if retry != tc.retry || retry && cause != tc.cause {
			t.Errorf("classify(%s) = %v, %v; want %v, %v", tc.name, cause, retry, tc.cause, tc.retry)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, retry := classify(ctx, &googleapi.Error{Code: 503}); retry {
		t.Error("classify under a finished download context retries; want no retry")
	}
}

func TestBackoff(t *testing.T) {
	const initial, limit = 100 * time.Millisecond, time.Second
	for n := 1; n <= 10; n++ {
		ceil := min(initial<<(n-1), limit)
		for range 100 {
			if d := backoff(n, initial, limit); d < 0 || d >= ceil {
				t.Fatalf("backoff(%d) = %v; want in [0, %v)", n, d, ceil)
			}
		}
	}
	if d := backoff(1, 0, 0); d != 0 {
		t.Errorf("backoff with zero bounds = %v; want 0", d)
	}
}

func TestRetryCauseString(t *testing.T) {
	seen := map[string]bool{}
	for c := range RetryCause(numRetryCauses) {
		s := c.String()
		if s == "unknown" || seen[s] {
			t.Errorf("RetryCause(%d).String() = %q; want a unique name", c, s)
		}
		seen[s] = true
	}
	if s := RetryCause(numRetryCauses).String(); s != "unknown" {
		t.Errorf("out-of-range cause = %q; want unknown", s)
	}
}
