package fetch

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"google.golang.org/api/googleapi"
)

// RetryCause is why a range (or, for CauseChecksum, an object) was
// retried. The set is small and fixed so it maps onto a metric label.
type RetryCause uint8

// Retry causes.
const (
	// CauseThrottled is HTTP 429 Too Many Requests.
	CauseThrottled RetryCause = iota
	// CauseServer is HTTP 408 or 5xx.
	CauseServer
	// CauseNetwork is a transport failure: connection reset or refused,
	// unexpected EOF, a network timeout.
	CauseNetwork
	// CauseShortRead is a body that ended cleanly but early (object.ErrShortRead).
	CauseShortRead
	// CauseStall is a range that delivered no bytes for Config.StallTimeout.
	CauseStall
	// CauseChecksum is a round of re-reads of an object (whole, or the
	// parts its reads disagree on) after a CRC32C mismatch.
	CauseChecksum

	numRetryCauses = iota
)

// String returns the cause's metric label.
func (c RetryCause) String() string {
	switch c {
	case CauseThrottled:
		return "throttled"
	case CauseServer:
		return "server"
	case CauseNetwork:
		return "network"
	case CauseShortRead:
		return "short_read"
	case CauseStall:
		return "stall"
	case CauseChecksum:
		return "checksum"
	}
	return "unknown"
}

// errStalled is the cancellation cause the stall watchdog gives a range.
var errStalled = errors.New("fetch: no bytes received within the stall timeout")

// errOverlong means a range reader returned more bytes than asked: the
// source is broken, and retrying would not help.
var errOverlong = errors.New("fetch: range returned more bytes than requested")

// classify reports whether err, from one attempt at a range of a download
// whose context is parent, is worth retrying, and why. Nothing is retried
// once parent has ended.
func classify(parent context.Context, err error) (RetryCause, bool) {
	var dstErr *dstError
	switch {
	case parent.Err() != nil, errors.As(err, &dstErr):
		return 0, false
	case errors.Is(err, errStalled):
		return CauseStall, true
	}
	switch {
	case errors.Is(err, object.ErrShortRead):
		return CauseShortRead, true
	case errors.Is(err, object.ErrNotFound), errors.Is(err, object.ErrGenerationChanged),
		errors.Is(err, object.ErrInvalidName), errors.Is(err, errOverlong):
		return 0, false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// Not ours (the parent is live, the watchdog did not fire): a
		// source's own timeout. Retry it like any other timeout.
		return CauseNetwork, true
	}
	var apiErr *googleapi.Error
	if errors.As(err, &apiErr) {
		switch c := apiErr.Code; {
		case c == 429:
			return CauseThrottled, true
		case c == 408 || c >= 500 && c <= 599:
			return CauseServer, true
		}
		return 0, false
	}
	if isNetworkError(err) {
		return CauseNetwork, true
	}
	return 0, false
}

// isNetworkError reports whether err is a transport-level failure, matched
// by type and errno, never by text.
func isNetworkError(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true // timeouts, dial and DNS failures, closed connections
	}
	// Every *url.Error from the HTTP client is a transport failure (HTTP
	// statuses arrive as googleapi.Error); context errors were handled above.
	var urlErr *url.Error
	return errors.As(err, &urlErr)
}

// backoff returns the wait before retry number n (1-based): full jitter,
// uniform in [0, min(max, initial·2^(n-1))).
func backoff(n int, initial, limit time.Duration) time.Duration {
	ceil := initial
	for i := 1; i < n && ceil < limit; i++ {
		ceil *= 2
	}
	ceil = min(ceil, limit)
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil)
}
