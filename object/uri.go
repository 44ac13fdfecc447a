package object

import (
	"fmt"
	"strconv"
	"strings"
)

// URI is a parsed gs://BUCKET[/PATH][#GENERATION]: a bucket, an object name
// or a prefix, and optionally the generation an object name is pinned to.
// It is the one form in which users name objects and prefixes (the CLI's
// arguments, the config's sources, the loader's --data and manifests).
type URI struct {
	Bucket string
	// Path is an object name or a prefix, kept verbatim: it may contain
	// anything GCS allows, "../" included, and is never used as a local
	// path. It may be empty (the whole bucket).
	Path string
	// Generation is the generation a trailing #N pins; 0 if none.
	Generation int64
}

// ParseURI parses gs://BUCKET[/PATH][#GENERATION]. A trailing '#' followed
// only by decimal digits pins a generation (which must be positive, written
// without leading zeros); any other '#' is part of the path, as GCS allows
// in names.
func ParseURI(s string) (URI, error) {
	rest, ok := strings.CutPrefix(s, "gs://")
	if !ok {
		return URI{}, fmt.Errorf("%.200q is not a gs://BUCKET/PATH URI", s)
	}
	var u URI
	if i := strings.LastIndexByte(rest, '#'); i >= 0 && isDigits(rest[i+1:]) {
		g, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil || g <= 0 || rest[i+1] == '0' { // a generation is written without leading zeros
			return URI{}, fmt.Errorf("%.200q: bad generation %.40q", s, rest[i+1:])
		}
		rest, u.Generation = rest[:i], g
	}
	u.Bucket, u.Path, _ = strings.Cut(rest, "/")
	switch {
	case u.Bucket == "":
		return URI{}, fmt.Errorf("%.200q has no bucket", s)
	case u.Generation != 0 && u.Path == "":
		return URI{}, fmt.Errorf("%.200q pins a generation but names no object", s)
	}
	return u, nil
}

// Object returns the object u names: its path must not be empty.
func (u URI) Object() (Object, error) {
	if u.Path == "" {
		return Object{}, fmt.Errorf("%.200q has no object name", u.String())
	}
	return Object{Bucket: u.Bucket, Name: u.Path, Generation: u.Generation}, nil
}

// String returns u as gs://BUCKET/PATH[#GENERATION].
func (u URI) String() string {
	s := "gs://" + u.Bucket + "/" + u.Path
	if u.Generation != 0 {
		s += "#" + strconv.FormatInt(u.Generation, 10)
	}
	return s
}

// isDigits reports whether s is a non-empty run of ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ParsePrefix is ParseURI for a bucket or prefix, which cannot pin a
// generation.
func ParsePrefix(s string) (URI, error) {
	u, err := ParseURI(s)
	if err == nil && u.Generation != 0 {
		return URI{}, fmt.Errorf("%.200q: a prefix cannot pin a generation", s)
	}
	return u, err
}

// ParseObject is ParseURI for an object: the path must name one.
func ParseObject(s string) (Object, error) {
	u, err := ParseURI(s)
	if err != nil {
		return Object{}, err
	}
	return u.Object()
}
