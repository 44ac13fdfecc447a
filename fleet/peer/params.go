package peer

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cacheagent/cacheagent/fleet/placement"
	"github.com/cacheagent/cacheagent/object"
)

// Path is the URL path of the object endpoint.
const Path = "/v1/peer/object"

// Request limits.
const (
	// maxQuery bounds the raw query string, in bytes.
	maxQuery = 4096
	// maxName is the longest object name, in bytes (GCS's limit).
	maxName = 1024
	// maxBucket is the longest bucket name, in bytes (GCS's limit).
	maxBucket = 222
	// maxRange bounds off and off+n: 1 TiB, past any object GCS stores (5 TiB
	// is GCS's limit, but not for objects an agent caches whole).
	maxRange = 1 << 40
)

// request is one range request's parameters.
type request struct {
	obj    object.Object
	off, n int64
	// cached asks for a copy the server holds already ("cached=1"): it
	// answers 404 rather than filling a miss. Candidates after the owner
	// are asked this way, so a requester whose owner failed never waits on
	// another node's download (it reads the origin itself).
	cached bool
	// chunked asks for bytes of chunk chunk of an object placed chunk by
	// chunk ("chunk=I"): the range lies within that chunk, and the server
	// serves it from a whole copy it holds or from its copy of the chunk,
	// never filling the whole object.
	chunked bool
	chunk   int
}

// ObjectKey returns the placement key of object o as a whole: chunk 0, the
// key of every object of at most one chunk.
func ObjectKey(o object.Object) placement.Key {
	return placement.Key{Bucket: o.Bucket, Object: o.Name, Generation: o.Generation}
}

// key returns the placement key r is routed by.
func (r request) key() placement.Key {
	k := ObjectKey(r.obj)
	if r.chunked {
		k.Chunk = r.chunk
	}
	return k
}

// query encodes r as the endpoint's query string.
func (r request) query() string {
	v := url.Values{}
	v.Set("b", r.obj.Bucket)
	v.Set("o", r.obj.Name)
	v.Set("gen", strconv.FormatInt(r.obj.Generation, 10))
	v.Set("off", strconv.FormatInt(r.off, 10))
	v.Set("n", strconv.FormatInt(r.n, 10))
	if r.cached {
		v.Set("cached", "1")
	}
	if r.chunked {
		v.Set("chunk", strconv.Itoa(r.chunk))
	}
	return v.Encode()
}

// parseRequest decodes and checks a raw query string. Every parameter must
// appear exactly once and no other may; errors wrap ErrBadRequest.
func parseRequest(raw string) (request, error) {
	if len(raw) > maxQuery {
		return request{}, fmt.Errorf("%w: query of %d bytes", ErrBadRequest, len(raw))
	}
	v, err := url.ParseQuery(raw)
	if err != nil {
		return request{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	get := func(k string) (string, error) {
		switch vs := v[k]; len(vs) {
		case 0:
			return "", fmt.Errorf("%w: missing %q", ErrBadRequest, k)
		case 1:
			return vs[0], nil
		}
		return "", fmt.Errorf("%w: repeated %q", ErrBadRequest, k)
	}
	var r request
	var ints [3]int64
	for i, k := range []string{"gen", "off", "n"} {
		s, err := get(k)
		if err != nil {
			return request{}, err
		}
		if ints[i], err = parseUint(s); err != nil {
			return request{}, fmt.Errorf("%w: %s: %w", ErrBadRequest, k, err)
		}
	}
	r.obj.Generation, r.off, r.n = ints[0], ints[1], ints[2]
	if r.obj.Bucket, err = get("b"); err != nil {
		return request{}, err
	}
	if r.obj.Name, err = get("o"); err != nil {
		return request{}, err
	}
	want := 5 // b, o, gen, off, n
	if _, ok := v["cached"]; ok {
		c, err := get("cached")
		if err != nil {
			return request{}, err
		}
		if c != "1" {
			return request{}, fmt.Errorf("%w: cached=%.8q, want 1", ErrBadRequest, c)
		}
		r.cached = true
		want++
	}
	if _, ok := v["chunk"]; ok {
		c, err := get("chunk")
		if err != nil {
			return request{}, err
		}
		i, err := parseUint(c)
		if err != nil || i > maxRange {
			return request{}, fmt.Errorf("%w: chunk %.24q", ErrBadRequest, c)
		}
		r.chunked, r.chunk = true, int(i)
		want++
	}
	if len(v) != want {
		return request{}, fmt.Errorf("%w: %d parameters, want b, o, gen, off, n and optionally cached and chunk",
			ErrBadRequest, len(v))
	}
	if err := r.check(); err != nil {
		return request{}, err
	}
	return r, nil
}

// parseUint parses a canonical non-negative decimal int64.
func parseUint(s string) (int64, error) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("not a canonical decimal: %.24q", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

// check reports whether r may be served at all, wrapping ErrBadRequest.
func (r request) check() error {
	if err := checkObject(r.obj); err != nil {
		return err
	}
	switch {
	case r.obj.Generation <= 0:
		return fmt.Errorf("%w: generation %d", ErrBadRequest, r.obj.Generation)
	case r.n <= 0:
		return fmt.Errorf("%w: length %d", ErrBadRequest, r.n)
	case r.off > maxRange || r.n > maxRange-r.off:
		return fmt.Errorf("%w: range %d+%d past %d", ErrBadRequest, r.off, r.n, int64(maxRange))
	}
	return nil
}

// checkObject returns an error wrapping ErrBadRequest unless o's bucket
// and name are ones the data plane carries: a GCS-shaped bucket, and a name
// of valid UTF-8 without control characters and without "." or ".."
// segments. The cache stores objects by hash, so such names are harmless
// there; they are refused here because no dataset needs them and a peer
// port should take no more than it needs. A Source sends objects failing
// this check straight to the origin.
func checkObject(o object.Object) error {
	b, name := o.Bucket, o.Name
	if len(b) < 3 || len(b) > maxBucket {
		return fmt.Errorf("%w: bucket of %d bytes", ErrBadRequest, len(b))
	}
	for i := range len(b) {
		if c := b[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: bucket %.64q: character %q", ErrBadRequest, b, c)
		}
	}
	switch {
	case name == "" || len(name) > maxName:
		return fmt.Errorf("%w: object name of %d bytes", ErrBadRequest, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: object name %.64q: not UTF-8", ErrBadRequest, name)
	case strings.ContainsFunc(name, func(c rune) bool { return c < 0x20 || c == 0x7f }):
		return fmt.Errorf("%w: object name %.64q: control character", ErrBadRequest, name)
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: object name %.64q: %q segment", ErrBadRequest, name, seg)
		}
	}
	return nil
}
