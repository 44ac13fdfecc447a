package peer

import (
	"errors"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// TestRequestRoundTrip: a request encodes to a query that parses back to
// it.
func TestRequestRoundTrip(t *testing.T) {
	for _, r := range []request{
		{obj: object.Object{Bucket: "data", Name: "a b/c+d&e=f?#%", Generation: 1}, off: 0, n: 1},
		{obj: object.Object{Bucket: "my.bucket-1_x", Name: "ünïcode/名前", Generation: 1 << 60}, off: 1 << 39, n: 1 << 39},
		{obj: object.Object{Bucket: "data", Name: "x", Generation: 7}, off: 3, n: 4, cached: true},
		{obj: object.Object{Bucket: "data", Name: "x", Generation: 7}, off: 3 << 23, n: 4, chunked: true, chunk: 3},
		{obj: object.Object{Bucket: "data", Name: "x", Generation: 7}, off: 0, n: 4, cached: true, chunked: true},
	} {
		got, err := parseRequest(r.query())
		if err != nil || got != r {
			t.Errorf("parseRequest(%q) = %+v, %v; want %+v", r.query(), got, err, r)
		}
	}
}

// FuzzParseRequest: whatever the query, parseRequest either fails with
// ErrBadRequest or returns a request that passes check, has no control
// characters or dot segments in its name, and encodes back to itself.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		"b=data&o=x&gen=1&off=0&n=1",
		"b=data&o=a%2Fb&gen=123456&off=10&n=20",
		"b=data&o=a%00b&gen=1&off=0&n=1",
		"b=data&o=..&gen=1&off=0&n=1",
		"b=data&o=x&gen=01&off=0&n=1",
		"b=data&o=x&gen=1&off=1099511627775&n=1",
		"b=data&b=data&o=x&gen=1&off=0&n=1",
		"b=data&o=x&gen=1&off=0&n=1&cached=1",
		"b=data&o=x&gen=1&off=0&n=1&cached=0",
		"b=data&o=x&gen=1&off=0&n=1&cached=1&cached=1",
		"b=data&o=x&gen=1&off=0&n=1&chunk=0",
		"b=data&o=x&gen=1&off=8388608&n=1&chunk=1&cached=1",
		"b=data&o=x&gen=1&off=0&n=1&chunk=01",
		"b=data&o=x&gen=1&off=0&n=1&chunk=-1",
		"b=data&o=x&gen=1&off=0&n=1&chunk=1&chunk=1",
		"b=data;o=x",
		"o=%ff&b=data&gen=1&off=0&n=1",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r, err := parseRequest(raw)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("parseRequest(%q) error = %v; want ErrBadRequest", raw, err)
			}
			return
		}
		if err := r.check(); err != nil {
			t.Fatalf("parseRequest(%q) = %+v, which fails check: %v", raw, r, err)
		}
		if strings.ContainsRune(r.obj.Name, 0) || r.obj.Name == ".." || strings.Contains("/"+r.obj.Name+"/", "/../") {
			t.Fatalf("parseRequest(%q) accepted name %q", raw, r.obj.Name)
		}
		if back, err := parseRequest(r.query()); err != nil || back != r {
			t.Fatalf("parseRequest(%q) = %+v; its query %q parses to %+v, %v", raw, r, r.query(), back, err)
		}
	})
}
