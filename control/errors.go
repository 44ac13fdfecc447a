package control

import (
	"context"
	"errors"
	"net/http"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/tier"
)

// Sentinel errors. Test them with errors.Is.
var (
	// ErrUnavailable means no daemon answers on the socket (nothing listens
	// there, or the daemon is shutting down).
	ErrUnavailable = errors.New("control: daemon unavailable")
	// ErrNotFound means a job, plan, session or lease does not exist.
	// Objects that do not exist match fetch.ErrNotFound instead.
	ErrNotFound = errors.New("control: not found")
	// ErrInvalid means the daemon refused a malformed request.
	ErrInvalid = errors.New("control: invalid request")
	// ErrSessionEnded means a lease session is over: its leases are void.
	ErrSessionEnded = errors.New("control: lease session ended")
	// ErrClosed means the Client has been closed.
	ErrClosed = errors.New("control: client closed")
	// ErrReleased means a Lease was released twice.
	ErrReleased = errors.New("control: lease already released")
)

// Error codes of ErrorBody.Code.
const (
	CodeObjectNotFound = "object_not_found" // fetch.ErrNotFound
	CodeInvalidName    = "invalid_name"     // fetch.ErrInvalidName
	CodeChecksum       = "checksum"         // fetch.ErrChecksum
	CodeNoSpace        = "no_space"         // tier.ErrNoSpace
	CodeNoShm          = "no_shm"           // tier.ErrNoShm
	CodeNotFound       = "not_found"        // ErrNotFound
	CodeInvalid        = "invalid"          // ErrInvalid
	CodeUnavailable    = "unavailable"      // ErrUnavailable
	CodeSessionEnded   = "session_ended"    // ErrSessionEnded
	CodeInternal       = "internal"         // anything else
)

// codes maps error codes to HTTP statuses and the sentinels they stand for,
// most specific first.
var codes = []struct {
	code   string
	status int
	err    error
}{
	{CodeObjectNotFound, http.StatusNotFound, fetch.ErrNotFound},
	{CodeInvalidName, http.StatusBadRequest, fetch.ErrInvalidName},
	{CodeChecksum, http.StatusBadGateway, fetch.ErrChecksum},
	{CodeNoSpace, http.StatusInsufficientStorage, tier.ErrNoSpace},
	{CodeNoShm, http.StatusConflict, tier.ErrNoShm},
	{CodeNotFound, http.StatusNotFound, ErrNotFound},
	{CodeNotFound, http.StatusNotFound, tier.ErrNoPlan},
	{CodeInvalid, http.StatusBadRequest, ErrInvalid},
	{CodeSessionEnded, http.StatusGone, ErrSessionEnded},
	{CodeUnavailable, http.StatusServiceUnavailable, ErrUnavailable},
	{CodeUnavailable, http.StatusServiceUnavailable, tier.ErrClosed},
	{CodeUnavailable, http.StatusServiceUnavailable, context.Canceled},
}

// CodeOf returns the error code and HTTP status the daemon answers err
// with.
func CodeOf(err error) (code string, status int) {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code, c.status
		}
	}
	return CodeInternal, http.StatusInternalServerError
}

// Error is an error answer from the daemon. It matches (errors.Is) the
// sentinel its code stands for: fetch.ErrNotFound, fetch.ErrInvalidName,
// fetch.ErrChecksum, tier.ErrNoSpace, tier.ErrNoShm, ErrNotFound, ErrInvalid,
// ErrSessionEnded or ErrUnavailable.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the machine-readable code (Code* constants).
	Code string
	// Message is the daemon's description.
	Message string
}

// Error returns the daemon's message.
func (e *Error) Error() string { return "cacheagent daemon: " + e.Message }

// Is reports whether target is the sentinel e's code stands for.
func (e *Error) Is(target error) bool {
	for _, c := range codes {
		if c.code == e.Code {
			return c.err == target // the first entry of a code is its sentinel
		}
	}
	return false
}
