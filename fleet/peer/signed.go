package peer

import (
	"errors"
	"net/http"
	"time"
)

// Sign adds the data plane's authentication headers to req, dated now, as
// a Source signs its range requests: for the other routes peers serve each
// other (checkpoint replicas), behind Authenticated.
func Sign(key []byte, req *http.Request) error { return sign(key, req, time.Now()) }

// Authenticated returns h behind the data plane's authentication: a request
// not signed with key, replayed, or dated more than DefaultMaxSkew from
// now is refused (401; 503 when the replay cache is full) and never
// reaches h. The MAC covers the method and the URI, not the body: a body
// must carry its own check (a checkpoint file's CRC32C), or travel over the
// data plane's TLS.
func Authenticated(key []byte, h http.Handler) (http.Handler, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	v := newVerifier(key, DefaultMaxSkew)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := v.verify(r, time.Now()); err != nil {
			code := http.StatusUnauthorized
			if errors.Is(err, ErrBusy) {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, ErrAuth.Error(), code)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}
