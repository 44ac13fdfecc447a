package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/cacheagent/cacheagent/checkpoint"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// TestErrorCodes checks that each error the daemon answers with reaches a
// client as the sentinel it stands for there.
func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct{ err, client error }{
		{object.ErrNotFound, object.ErrNotFound},
		{object.ErrInvalidName, object.ErrInvalidName},
		{object.ErrChecksum, object.ErrChecksum},
		{tier.ErrNoSpace, control.ErrNoSpace},
		{tier.ErrNoShm, control.ErrNoShm},
		{tier.ErrNoPlan, control.ErrNotFound},
		{tier.ErrClosed, control.ErrUnavailable},
		{control.ErrNotFound, control.ErrNotFound},
		{control.ErrInvalid, control.ErrInvalid},
		{control.ErrSessionEnded, control.ErrSessionEnded},
		{control.ErrUnavailable, control.ErrUnavailable},
		{checkpoint.ErrClosed, control.ErrUnavailable},
		{context.DeadlineExceeded, control.ErrTimeout}, // a checkpoint wait's timeout_ms
	} {
		code, status := codeOf(fmt.Errorf("context: %w", tc.err))
		if e := (&control.Error{Status: status, Code: code}); !errors.Is(e, tc.client) {
			t.Errorf("%v: code %q (status %d) does not match %v at the client", tc.err, code, status, tc.client)
		}
	}
	if code, status := codeOf(errors.New("boom")); code != control.CodeInternal || status != http.StatusInternalServerError {
		t.Errorf("codeOf(other) = %q, %d; want internal, 500", code, status)
	}
}
