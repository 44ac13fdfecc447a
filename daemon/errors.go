package daemon

import (
	"context"
	"errors"

	"github.com/cacheagent/cacheagent/checkpoint"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// errorCodes maps the errors the daemon answers with to their control
// codes, most specific first; the client maps each code back to a
// sentinel of control's or fetch's (control.Error).
var errorCodes = []struct {
	err  error
	code string
}{
	{object.ErrNotFound, control.CodeObjectNotFound},
	{object.ErrInvalidName, control.CodeInvalidName},
	{object.ErrChecksum, control.CodeChecksum},
	{tier.ErrNoSpace, control.CodeNoSpace},
	{tier.ErrNoShm, control.CodeNoShm},
	{control.ErrNotFound, control.CodeNotFound},
	{tier.ErrNoPlan, control.CodeNotFound},
	{control.ErrInvalid, control.CodeInvalid},
	{control.ErrSessionEnded, control.CodeSessionEnded},
	{control.ErrUnavailable, control.CodeUnavailable},
	{control.ErrNoFleet, control.CodeNoFleet},
	{checkpoint.ErrNoPeers, control.CodeNoFleet},
	{checkpoint.ErrCommitted, control.CodeConflict},
	{checkpoint.ErrBusy, control.CodeConflict},
	{checkpoint.ErrMismatch, control.CodeConflict},
	{checkpoint.ErrPermission, control.CodePermission},
	{control.ErrPermission, control.CodePermission},
	{checkpoint.ErrFailed, control.CodeCheckpoint},
	{checkpoint.ErrNoCheckpoint, control.CodeNotFound},
	{checkpoint.ErrUnsafeFile, control.CodeInvalid},
	{checkpoint.ErrChanged, control.CodeInvalid},
	{checkpoint.ErrManifest, control.CodeInvalid},
	{tier.ErrClosed, control.CodeUnavailable},
	{checkpoint.ErrClosed, control.CodeUnavailable},
	{context.Canceled, control.CodeUnavailable},
	{context.DeadlineExceeded, control.CodeTimeout}, // a timeout the request set
}

// codeOf returns the error code and HTTP status the daemon answers err
// with.
func codeOf(err error) (code string, status int) {
	for _, c := range errorCodes {
		if errors.Is(err, c.err) {
			return c.code, control.StatusOf(c.code)
		}
	}
	return control.CodeInternal, control.StatusOf(control.CodeInternal)
}
