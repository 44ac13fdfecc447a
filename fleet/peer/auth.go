package peer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Header names of the request authentication (see the package doc).
const (
	headerTime  = "Cacheagent-Time"
	headerNonce = "Cacheagent-Nonce"
	headerMAC   = "Cacheagent-Mac"
	// headerGeneration echoes the generation served.
	headerGeneration = "Cacheagent-Generation"
)

// macDomain starts every MAC'ed message, so the key's MACs mean nothing in
// another protocol or version.
const macDomain = "cacheagent-peer-v1\n"

// MinKeyLen is the shortest data-plane key accepted, in bytes.
const MinKeyLen = 16

// nonceLen is the length of a request nonce in bytes.
const nonceLen = 16

// maxNonces bounds the replay cache; a server holding this many nonces
// within its window refuses requests until some expire.
const maxNonces = 1 << 20

// checkKey returns ErrBadKey unless key is long enough.
func checkKey(key []byte) error {
	if len(key) < MinKeyLen {
		return fmt.Errorf("%w: %d bytes, want at least %d", ErrBadKey, len(key), MinKeyLen)
	}
	return nil
}

// mac returns the HMAC-SHA256 of one request's fields under key.
func mac(key []byte, method, uri, ts, nonce string) []byte {
	h := hmac.New(sha256.New, key)
	for _, s := range []string{macDomain, method, "\n", uri, "\n", ts, "\n", nonce} {
		h.Write([]byte(s)) // a hash never fails
	}
	return h.Sum(nil)
}

// sign adds the authentication headers to req, dated now.
func sign(key []byte, req *http.Request, now time.Time) error {
	var n [nonceLen]byte
	if _, err := rand.Read(n[:]); err != nil {
		return fmt.Errorf("peer: nonce: %w", err)
	}
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	nonce := hex.EncodeToString(n[:])
	req.Header.Set(headerTime, ts)
	req.Header.Set(headerNonce, nonce)
	req.Header.Set(headerMAC, hex.EncodeToString(mac(key, req.Method, req.URL.RequestURI(), ts, nonce)))
	return nil
}

// verifier checks request MACs and remembers nonces. It is safe for
// concurrent use.
type verifier struct {
	key  []byte        // immutable
	skew time.Duration // immutable: accepted distance between clocks

	mu        sync.Mutex
	seen      map[[nonceLen]byte]int64 // nonce -> when it may be forgotten (Unix ns); guarded by mu
	nextPrune int64                    // guarded by mu
}

func newVerifier(key []byte, skew time.Duration) *verifier {
	return &verifier{key: key, skew: skew, seen: make(map[[nonceLen]byte]int64)}
}

// verify returns nil if r carries a valid MAC, a time within the skew of
// now and a nonce not seen before (which it then remembers), and an error
// wrapping ErrAuth otherwise.
func (v *verifier) verify(r *http.Request, now time.Time) error {
	ts, nonce, got := r.Header.Get(headerTime), r.Header.Get(headerNonce), r.Header.Get(headerMAC)
	if ts == "" || nonce == "" || got == "" {
		return fmt.Errorf("%w: missing authentication headers", ErrAuth)
	}
	gotMAC, err := hex.DecodeString(got)
	if err != nil || len(gotMAC) != sha256.Size {
		return fmt.Errorf("%w: malformed MAC", ErrAuth)
	}
	if !hmac.Equal(gotMAC, mac(v.key, r.Method, r.RequestURI, ts, nonce)) {
		return fmt.Errorf("%w: wrong MAC", ErrAuth)
	}
	// The fields are authentic from here on; now check they are fresh.
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed time", ErrAuth)
	}
	if d := now.Sub(time.UnixMilli(ms)); d > v.skew || d < -v.skew {
		return fmt.Errorf("%w: time %s is %v from the server's clock (max %v)", ErrAuth, ts, d, v.skew)
	}
	var n [nonceLen]byte
	if b, err := hex.DecodeString(nonce); err != nil || len(b) != nonceLen {
		return fmt.Errorf("%w: malformed nonce", ErrAuth)
	} else {
		copy(n[:], b)
	}
	return v.remember(n, now.UnixNano())
}

// remember records nonce n as used at now, or fails if it was used within
// the window (or the cache is full).
func (v *verifier) remember(n [nonceLen]byte, now int64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if now >= v.nextPrune {
		for k, exp := range v.seen {
			if exp <= now {
				delete(v.seen, k)
			}
		}
		v.nextPrune = now + int64(v.skew)
	}
	if exp, ok := v.seen[n]; ok && exp > now {
		return fmt.Errorf("%w: nonce replayed", ErrAuth)
	}
	if len(v.seen) >= maxNonces {
		return fmt.Errorf("%w: %d nonces within the window", ErrBusy, len(v.seen))
	}
	// A request is accepted within skew of its time, and its time within
	// skew of now: 2x skew covers every moment it could come back.
	v.seen[n] = now + 2*int64(v.skew)
	return nil
}
