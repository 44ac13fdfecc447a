package object

import (
	"strings"
	"testing"
)

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want URI
		ok   bool
	}{
		{"gs://b/p/q", URI{"b", "p/q", 0}, true},
		{"gs://b", URI{"b", "", 0}, true},
		{"gs://b/", URI{"b", "", 0}, true},
		{"gs://b/../x", URI{"b", "../x", 0}, true},
		{"gs://b/x.npy#1712", URI{"b", "x.npy", 1712}, true},
		{"gs://b/a#b", URI{"b", "a#b", 0}, true},     // '#' in a name
		{"gs://b/a#1#b", URI{"b", "a#1#b", 0}, true}, // only a trailing #digits pins
		{"gs://b/x#0", URI{}, false},
		{"gs://b/x#01", URI{}, false}, // not how a generation is written: no round trip
		{"gs://b/x#99999999999999999999", URI{}, false},
		{"gs:///x", URI{}, false},
		{"gs://", URI{}, false},
		{"s3://b/x", URI{}, false},
		{"", URI{}, false},
	} {
		got, err := ParseURI(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseURI(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestURIObject(t *testing.T) {
	u, _ := ParseURI("gs://b/x.npy#7")
	o, err := u.Object()
	if err != nil || o != (Object{Bucket: "b", Name: "x.npy", Generation: 7}) {
		t.Fatalf("Object() = %+v, %v", o, err)
	}
	if _, err := (URI{Bucket: "b"}).Object(); err == nil {
		t.Fatal("Object() of a bucket: no error")
	}
}

// FuzzParseURI checks that ParseURI never panics and that what it accepts
// round-trips through String.
func FuzzParseURI(f *testing.F) {
	for _, s := range []string{"gs://b/p", "gs://b", "gs://", "gs:///x", "gs://b/../x", "gs://b/\x00",
		"s3://b/x", "", "gs://b/x#12", "gs://b/x#", "gs://b/#1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseURI(s)
		if err != nil {
			return
		}
		if u.Bucket == "" || strings.Contains(u.Bucket, "/") || u.Generation < 0 {
			t.Fatalf("ParseURI(%q) = %+v: bad bucket or generation", s, u)
		}
		if got := u.String(); got != s && got != s+"/" {
			t.Fatalf("ParseURI(%q) = %+v; does not round-trip (%q)", s, u, got)
		}
		if v, err := ParseURI(u.String()); err != nil || v != u {
			t.Fatalf("ParseURI(%q) = %+v, %v; want %+v", u.String(), v, err, u)
		}
	})
}

func TestParsePrefix(t *testing.T) {
	if u, err := ParsePrefix("gs://b/train/"); err != nil || u != (URI{Bucket: "b", Path: "train/"}) {
		t.Errorf("ParsePrefix = %+v, %v", u, err)
	}
	if _, err := ParsePrefix("gs://b/x#3"); err == nil {
		t.Error("ParsePrefix of a pinned object: no error")
	}
}
