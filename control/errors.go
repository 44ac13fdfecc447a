package control

import (
	"errors"
	"net/http"

	"github.com/cacheagent/cacheagent/object"
)

// Sentinel errors. Test them with errors.Is.
var (
	// ErrUnavailable means no daemon answers on the socket (nothing listens
	// there, or the daemon is shutting down).
	ErrUnavailable = errors.New("control: daemon unavailable")
	// ErrNotFound means a job, plan, session or lease does not exist.
	// Objects that do not exist match object.ErrNotFound instead.
	ErrNotFound = errors.New("control: not found")
	// ErrInvalid means the daemon refused a malformed request.
	ErrInvalid = errors.New("control: invalid request")
	// ErrSessionEnded means a lease session is over: its leases are void.
	ErrSessionEnded = errors.New("control: lease session ended")
	// ErrClosed means the Client has been closed.
	ErrClosed = errors.New("control: client closed")
	// ErrReleased means a Lease was released twice.
	ErrReleased = errors.New("control: lease already released")
	// ErrNoSpace means the daemon's cache has no room for an object: what
	// is pinned or in use fills its budget (the cache's own error is
	// tier.ErrNoSpace).
	ErrNoSpace = errors.New("control: no space in the cache")
	// ErrNoShm means the daemon's cache has no shm tier (tier.ErrNoShm).
	ErrNoShm = errors.New("control: no shm tier configured")
	// ErrNoFleet means the daemon runs without a fleet: section (one
	// node): GET /v1/fleet has nothing to show.
	ErrNoFleet = errors.New("fleet mode is not configured")
	// ErrConflict means a checkpoint prefix is taken: a checkpoint is
	// committed there, or another save owns it, or its objects no longer
	// match its manifest.
	ErrConflict = errors.New("control: checkpoint conflict")
	// ErrPermission means the caller may not use a directory or file it
	// named (it belongs to another user).
	ErrPermission = errors.New("control: permission denied")
	// ErrCheckpointFailed means a checkpoint save failed for good.
	ErrCheckpointFailed = errors.New("control: checkpoint save failed")
	// ErrTimeout means the daemon gave up waiting within the timeout the
	// request set (a checkpoint wait's).
	ErrTimeout = errors.New("control: timed out")
)

// Error codes of ErrorBody.Code.
const (
	CodeObjectNotFound = "object_not_found"  // object.ErrNotFound
	CodeInvalidName    = "invalid_name"      // object.ErrInvalidName
	CodeChecksum       = "checksum"          // object.ErrChecksum
	CodeNoSpace        = "no_space"          // ErrNoSpace
	CodeNoShm          = "no_shm"            // ErrNoShm
	CodeNotFound       = "not_found"         // ErrNotFound
	CodeInvalid        = "invalid"           // ErrInvalid
	CodeUnavailable    = "unavailable"       // ErrUnavailable
	CodeSessionEnded   = "session_ended"     // ErrSessionEnded
	CodeNoFleet        = "no_fleet"          // ErrNoFleet
	CodeConflict       = "conflict"          // ErrConflict
	CodePermission     = "permission"        // ErrPermission
	CodeCheckpoint     = "checkpoint_failed" // ErrCheckpointFailed
	CodeTimeout        = "timeout"           // ErrTimeout
	CodeInternal       = "internal"          // anything else
)

// codes maps each error code to its HTTP status and the sentinel an Error
// with that code matches. The daemon decides which code an error of its
// own gets (it knows the cache's sentinels); the client only reads codes.
var codes = map[string]struct {
	status int
	err    error
}{
	CodeObjectNotFound: {http.StatusNotFound, object.ErrNotFound},
	CodeInvalidName:    {http.StatusBadRequest, object.ErrInvalidName},
	CodeChecksum:       {http.StatusBadGateway, object.ErrChecksum},
	CodeNoSpace:        {http.StatusInsufficientStorage, ErrNoSpace},
	CodeNoShm:          {http.StatusConflict, ErrNoShm},
	CodeNotFound:       {http.StatusNotFound, ErrNotFound},
	CodeInvalid:        {http.StatusBadRequest, ErrInvalid},
	CodeSessionEnded:   {http.StatusGone, ErrSessionEnded},
	CodeUnavailable:    {http.StatusServiceUnavailable, ErrUnavailable},
	CodeNoFleet:        {http.StatusNotFound, ErrNoFleet},
	CodeConflict:       {http.StatusConflict, ErrConflict},
	CodePermission:     {http.StatusForbidden, ErrPermission},
	CodeCheckpoint:     {http.StatusUnprocessableEntity, ErrCheckpointFailed},
	CodeTimeout:        {http.StatusGatewayTimeout, ErrTimeout},
}

// StatusOf returns the HTTP status of an error code
// (500 for CodeInternal and unknown codes).
func StatusOf(code string) int {
	if c, ok := codes[code]; ok {
		return c.status
	}
	return http.StatusInternalServerError
}

// sentinelOf returns the sentinel an error code stands for, nil for
// CodeInternal and unknown codes.
func sentinelOf(code string) error { return codes[code].err }

// Error is an error answer from the daemon. It matches (errors.Is) the
// sentinel its code stands for: object.ErrNotFound, object.ErrInvalidName,
// object.ErrChecksum, ErrNoSpace, ErrNoShm, ErrNotFound, ErrInvalid,
// ErrSessionEnded, ErrUnavailable, ErrNoFleet, ErrConflict, ErrPermission,
// ErrCheckpointFailed or ErrTimeout.
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
	err := sentinelOf(e.Code)
	return err != nil && err == target
}
