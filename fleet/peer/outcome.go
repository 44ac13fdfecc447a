package peer

import "net/http"

// outcome is how a Server answered one request: a metric label and a
// status.
type outcome uint8

const (
	outcomeOK outcome = iota
	outcomeBadRequest
	outcomeAuth
	outcomeForbidden
	outcomeNotFound
	outcomeLoop
	outcomeRange
	outcomeBusy
	outcomeError
	outcomeGone

	numOutcomes = iota
)

// String returns the outcome's metric label.
func (o outcome) String() string {
	switch o {
	case outcomeOK:
		return "ok"
	case outcomeBadRequest:
		return "bad_request"
	case outcomeAuth:
		return "auth"
	case outcomeForbidden:
		return "forbidden"
	case outcomeNotFound:
		return "not_found"
	case outcomeLoop:
		return "loop"
	case outcomeRange:
		return "range"
	case outcomeBusy:
		return "busy"
	case outcomeError:
		return "error"
	case outcomeGone:
		return "gone"
	}
	return "unknown"
}

// status returns the HTTP status that answers the outcome.
func (o outcome) status() int {
	switch o {
	case outcomeOK:
		return http.StatusOK
	case outcomeBadRequest:
		return http.StatusBadRequest
	case outcomeAuth:
		return http.StatusUnauthorized
	case outcomeForbidden:
		return http.StatusForbidden
	case outcomeNotFound:
		return http.StatusNotFound
	case outcomeLoop:
		return http.StatusConflict
	case outcomeRange:
		return http.StatusRequestedRangeNotSatisfiable
	case outcomeBusy:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}

// Cause is why a peer did not serve a range read: a metric label for
// Stats.PeerErrors.
type Cause uint8

// Causes of peer errors.
const (
	// CauseRefused is a connection that could not be made or broke before
	// an answer.
	CauseRefused Cause = iota
	// CauseTimeout is no answer within the first-byte timeout, or a body
	// that stalled for the stall timeout.
	CauseTimeout
	// CauseBadResponse is an answer other than the exact range of the
	// exact generation (wrong status, length or generation header, or a
	// body cut short).
	CauseBadResponse
	// CauseAuth is a 401 or 403: the peer has another key, or does not
	// serve the bucket.
	CauseAuth
	// CauseNotFound is a 404: the peer cannot get that generation.
	CauseNotFound
	// CauseLoop is a 409: the peer is itself reading the object from a
	// peer.
	CauseLoop

	numCauses = iota
)

// String returns the cause's metric label.
func (c Cause) String() string {
	switch c {
	case CauseRefused:
		return "refused"
	case CauseTimeout:
		return "timeout"
	case CauseBadResponse:
		return "bad_response"
	case CauseAuth:
		return "auth"
	case CauseNotFound:
		return "not_found"
	case CauseLoop:
		return "loop"
	}
	return "unknown"
}

// causeOf maps a peer's non-200 status to a cause.
func causeOf(status int) Cause {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden:
		return CauseAuth
	case http.StatusNotFound:
		return CauseNotFound
	case http.StatusConflict:
		return CauseLoop
	}
	return CauseBadResponse
}
