package peer

import "errors"

// Sentinel errors. Callers test them with errors.Is.
var (
	// ErrBadKey means a data-plane key is shorter than MinKeyLen.
	ErrBadKey = errors.New("peer: key too short")
	// ErrAuth means a request's authentication is missing, wrong, stale or
	// replayed (HTTP 401).
	ErrAuth = errors.New("peer: request not authenticated")
	// ErrBusy means the server cannot take the request now (HTTP 503).
	ErrBusy = errors.New("peer: server busy")
	// ErrBadRequest means a request's parameters are malformed (HTTP 400).
	ErrBadRequest = errors.New("peer: bad request")
	// ErrConfig means a Config or ServerConfig is invalid.
	ErrConfig = errors.New("peer: invalid config")
)
