package stats

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// distinct returns a Loader whose every field holds a different value,
// base + i for field i (in nanoseconds for durations).
func distinct(base int64) Loader {
	var s Loader
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(base + int64(i))
	}
	return s
}

// TestLoaderFieldsComplete checks that fields lists every field of Loader
// once, so that Add, Sub and Below cover a new field.
func TestLoaderFieldsComplete(t *testing.T) {
	s := distinct(1)
	fs := s.fields()
	if got, want := len(fs), reflect.TypeFor[Loader]().NumField(); got != want {
		t.Fatalf("fields() has %d fields; Loader has %d", got, want)
	}
	seen := make(map[int64]bool)
	for _, f := range fs {
		if seen[*f] {
			t.Errorf("fields() lists the field holding %d twice", *f)
		}
		seen[*f] = true
	}
}

func TestLoaderArithmetic(t *testing.T) {
	a, b := distinct(10), distinct(1)
	if got, want := a.Add(b), distinct(0).Add(distinct(11)); got != want {
		t.Errorf("Add = %+v; want %+v", got, want)
	}
	if got := a.Sub(b); got != (Loader{}).Add(distinct(9)).Sub(distinct(0)) {
		t.Errorf("Sub = %+v", got)
	}
	if got := a.Add(b).Sub(b); got != a {
		t.Errorf("Add then Sub = %+v; want %+v", got, a)
	}
	if a.Below(b) || !b.Below(a) || a.Below(a) {
		t.Errorf("Below(%+v, %+v) wrong", a, b)
	}
	if (Loader{Batches: -1}).Below(Loader{}) != true {
		t.Error("a negative field is not below zero")
	}
	one := Loader{}
	one.OpenTime = -time.Nanosecond
	if !one.Below(Loader{}) {
		t.Error("a negative duration is not below zero")
	}
}

func TestLoaderJSONRoundTrip(t *testing.T) {
	for _, s := range []Loader{{}, distinct(1), distinct(1_000_000_007), {Wait: 90 * time.Minute, WaitFetch: time.Hour}} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var got Loader
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("Unmarshal(%s): %v", b, err)
		}
		if got != s {
			t.Errorf("round trip of %+v through %s = %+v", s, b, got)
		}
	}
}

// TestLoaderWireNames checks the wire keys loaders and scripts already use.
func TestLoaderWireNames(t *testing.T) {
	s := Loader{Batches: 2, Samples: 16, Bytes: 64, Wait: 1500 * time.Millisecond, WaitFetch: time.Second,
		WaitPromote: 250 * time.Millisecond, WaitGather: 125 * time.Millisecond, WaitOther: 125 * time.Millisecond}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"batches":2`, `"samples":16`, `"bytes":64`, `"wait_seconds":1.5`,
		`"fetch_seconds":1`, `"promote_seconds":0.25`, `"gather_seconds":0.125`, `"other_seconds":0.125`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Marshal = %s; lacks %s", b, want)
		}
	}
	var got Loader
	if err := json.Unmarshal([]byte(`{"batches":3,"fetch_seconds":0.5}`), &got); err != nil {
		t.Fatal(err)
	}
	if want := (Loader{Batches: 3, WaitFetch: 500 * time.Millisecond}); got != want {
		t.Errorf("Unmarshal of an older report = %+v; want %+v", got, want)
	}
	if err := json.Unmarshal([]byte(`{"wait_seconds":1e300}`), &got); err == nil {
		t.Error("Unmarshal accepted 1e300 seconds")
	}
}

func FuzzLoaderUnmarshal(f *testing.F) {
	b, _ := json.Marshal(distinct(1))
	f.Add(b)
	f.Add([]byte(`{"wait_seconds":-1e18,"open_seconds":9.3e9}`))
	f.Add([]byte(`{"batches":1e30}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Loader
		if err := json.Unmarshal(b, &s); err != nil {
			return
		}
		// What decodes encodes, and decodes again to within a nanosecond
		// per duration (float seconds round).
		b2, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("Marshal(%+v): %v", s, err)
		}
		var s2 Loader
		if err := json.Unmarshal(b2, &s2); err != nil {
			t.Fatalf("Unmarshal(Marshal(%+v)) = %v", s, err)
		}
		d := s2.Sub(s)
		for _, f := range d.fields() {
			if *f < -1<<10 || *f > 1<<10 {
				t.Fatalf("round trip of %+v = %+v", s, s2)
			}
		}
	})
}
