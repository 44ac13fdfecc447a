package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/api/googleapi"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

func TestCheckGCSObject(t *testing.T) {
	valid := []struct{ bucket, name string }{
		{"bkt", "a"},
		{"my-bucket_1.example.com", "x"},
		{"bkt", "../../x"},
		{"bkt", "a/./b"},
		{"bkt", "a//b"},
		{"bkt", "/leading"},
		{"bkt", "trailing/"},
		{"bkt", "..."},
		{"bkt", "ü 名前 +%?#[]*"},
		{"bkt", "tab\there"},
		{"bkt", "new\nline"},
		{"bkt", "carriage\rreturn"},
		{"bkt", ".well-known/acme-challenge/token"},
		{"bkt", "nul\x00byte"},
		{"bkt", strings.Repeat("é", 512)}, // 1024 bytes
		{strings.Repeat("a", 63), "x"},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), "x"},
	}
	for _, tc := range valid {
		if err := checkGCSObject(tc.bucket, tc.name); err != nil {
			t.Errorf("checkGCSObject(%q, %q) = %v; want nil", tc.bucket, tc.name, err)
		}
	}
	invalid := []struct{ bucket, name string }{
		{"bkt", ""},
		{"bkt", "."},
		{"bkt", ".."},
		{"bkt", strings.Repeat("x", 1025)},
		{"bkt", "bad\xffutf8"},
		{"", "x"},
		{"ab", "x"},
		{"Upper", "x"},
		{"-bkt", "x"},
		{"bkt-", "x"},
		{"b/kt", "x"},
		{"bk t", "x"},
		{strings.Repeat("a", 64), "x"},
		{strings.Repeat("a", 64) + ".com", "x"},
	}
	for _, tc := range invalid {
		if err := checkGCSObject(tc.bucket, tc.name); !errors.Is(err, object.ErrInvalidName) {
			t.Errorf("checkGCSObject(%q, %.40q) = %v; want ErrInvalidName", tc.bucket, tc.name, err)
		}
	}
}

func TestNormalizeEndpoint(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://127.0.0.1:9000", "http://127.0.0.1:9000/storage/v1/"},
		{"http://127.0.0.1:9000/", "http://127.0.0.1:9000/storage/v1/"},
		{"http://127.0.0.1:9000/storage/v1/", "http://127.0.0.1:9000/storage/v1/"},
		{"https://example.com/storage/v1", "https://example.com/storage/v1/"},
	}
	for _, tc := range cases {
		if got, err := normalizeEndpoint(tc.in); err != nil || got != tc.want {
			t.Errorf("normalizeEndpoint(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"127.0.0.1:9000", "ftp://x", "http://", "::"} {
		if _, err := normalizeEndpoint(in); err == nil {
			t.Errorf("normalizeEndpoint(%q) = nil error; want an error", in)
		}
	}
}

func TestGCSStatListRead(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	g := newTestGCS(t, "http://"+s.Addr()) // bare endpoint
	ctx := context.Background()
	names := []string{"../../x", "a/./b", "a//b", "/lead", "dir/", "ü 名前 +%?#[]*", "a\\b", "tab\tx", "z"}
	data := map[string][]byte{}
	for i, n := range names {
		data[n] = emulator.Pattern(uint64(i), 1000+i)
		a := putObject(t, s, g, "bkt", n, data[n])
		want := withCRC(object.Attrs{Object: object.Object{Bucket: "bkt", Name: n, Generation: a.Generation}, Size: int64(len(data[n]))}, data[n])
		if a.Object != want.Object || a.Size != want.Size || a.CRC32C != want.CRC32C || !a.HasCRC32C || a.Updated.IsZero() {
			t.Errorf("Stat(%q) = %+v; want %+v", n, a, want)
		}
		if got := readAll(t, g, a.Object, 10, 100); !bytes.Equal(got, data[n][10:110]) {
			t.Errorf("range read of %q: wrong bytes", n)
		}
	}

	var listed []string
	for a, err := range g.List(ctx, "bkt", "") {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if !a.HasCRC32C || a.Size != int64(len(data[a.Name])) || a.Generation == 0 {
			t.Errorf("List item %+v incomplete", a)
		}
		listed = append(listed, a.Name)
	}
	want := append([]string(nil), names...)
	sortStrings(want)
	if !equalStrings(listed, want) {
		t.Errorf("List = %q; want %q", listed, want)
	}
	var prefixed []string
	for a, err := range g.List(ctx, "bkt", "a") {
		if err != nil {
			t.Fatalf("List(a): %v", err)
		}
		prefixed = append(prefixed, a.Name)
	}
	if want := []string{"a/./b", "a//b", "a\\b"}; !equalStrings(prefixed, want) {
		t.Errorf("List(prefix a) = %q; want %q", prefixed, want)
	}
	for _, err := range g.List(ctx, "nobucket", "") {
		if !errors.Is(err, object.ErrNotFound) {
			t.Errorf("List(missing bucket) error = %v; want ErrNotFound", err)
		}
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestGCSNotFoundAndInvalid(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	g := newTestGCS(t, s.Endpoint())
	ctx := context.Background()
	for _, o := range []object.Object{{Bucket: "bkt", Name: "missing"}, {Bucket: "nobucket", Name: "x"}} {
		if _, err := g.Stat(ctx, o); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("Stat(%v) error = %v; want ErrNotFound", o, err)
		}
	}
	before := s.MediaGETs()
	for _, o := range []object.Object{{Bucket: "bkt", Name: "."}, {Bucket: "bkt", Name: ".."}, {Bucket: "BKT", Name: "x"}} {
		if _, err := g.Stat(ctx, o); !errors.Is(err, object.ErrInvalidName) {
			t.Errorf("Stat(%q) error = %v; want ErrInvalidName", o.Name, err)
		}
		if _, err := g.NewRangeReader(ctx, o, 0, 1); !errors.Is(err, object.ErrInvalidName) {
			t.Errorf("NewRangeReader(%q) error = %v; want ErrInvalidName", o.Name, err)
		}
	}
	if n := s.MediaGETs() - before; n != 0 {
		t.Errorf("invalid names sent %d requests; want 0", n)
	}
}

func TestGCSGenerationPinning(t *testing.T) {
	s := startEmulator(t, emulator.Options{Versioned: []string{"ver"}, Buckets: []string{"plain"}})
	g := newTestGCS(t, s.Endpoint())
	ctx := context.Background()
	v1, v2 := emulator.Pattern(1, 5000), emulator.Pattern(2, 5000)
	for _, bucket := range []string{"ver", "plain"} {
		a1 := putObject(t, s, g, bucket, "obj", v1)
		a2 := putObject(t, s, g, bucket, "obj", v2)
		if a1.Generation == a2.Generation {
			t.Fatalf("%s: overwrite kept generation %d", bucket, a1.Generation)
		}
		if got := readAll(t, g, a2.Object, 0, 5000); !bytes.Equal(got, v2) {
			t.Errorf("%s: read of the live generation returned other bytes", bucket)
		}
		r, err := g.NewRangeReader(ctx, a1.Object, 0, 5000)
		if bucket == "ver" {
			if err != nil {
				t.Fatalf("versioned: read of the old generation: %v", err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil {
				t.Fatalf("versioned: read of the old generation: %v", err)
			}
			if !bytes.Equal(got, v1) {
				t.Errorf("versioned: old generation returned other bytes")
			}
			if st, err := g.Stat(ctx, a1.Object); err != nil || st.CRC32C != a1.CRC32C {
				t.Errorf("versioned: Stat(old generation) = %+v, %v; want %+v", st, err, a1)
			}
			continue
		}
		if !errors.Is(err, object.ErrGenerationChanged) || !errors.Is(err, object.ErrNotFound) {
			t.Errorf("plain: read of a replaced generation error = %v; want object.ErrGenerationChanged and ErrNotFound", err)
		}
		if _, err := g.Stat(ctx, a1.Object); !errors.Is(err, object.ErrNotFound) {
			t.Errorf("plain: Stat(replaced generation) error = %v; want ErrNotFound", err)
		}
	}
}

func TestGCSHTTPErrorsReachable(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	g := newTestGCS(t, s.Endpoint())
	a := putObject(t, s, g, "bkt", "obj", []byte("hello"))
	s.SetFaults(func(*http.Request, int) emulator.Fault { return emulator.Fault{Status: 403} })
	before := s.MediaGETs()
	_, err := g.NewRangeReader(context.Background(), a.Object, 0, 5)
	var apiErr *googleapi.Error
	if !errors.As(err, &apiErr) || apiErr.Code != 403 {
		t.Errorf("NewRangeReader under 403 error = %v; want a *googleapi.Error with Code 403", err)
	}
	if n := s.MediaGETs() - before; n != 1 {
		t.Errorf("403 was requested %d times; want 1 (the client must not retry)", n)
	}
	s.SetFaults(func(*http.Request, int) emulator.Fault { return emulator.Fault{Status: 503} })
	before = s.MediaGETs()
	if _, err := g.NewRangeReader(context.Background(), a.Object, 0, 5); !errors.As(err, &apiErr) || apiErr.Code != 503 {
		t.Errorf("NewRangeReader under 503 error = %v; want a *googleapi.Error with Code 503", err)
	}
	if n := s.MediaGETs() - before; n != 1 {
		t.Errorf("503 was requested %d times; want 1 (retries are the Downloader's)", n)
	}
}

func TestGCSEmulatorHostEnv(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	t.Setenv("STORAGE_EMULATOR_HOST", s.Addr())
	g, err := NewGCS(context.Background(), GCSConfig{UserAgent: "fetch-test"})
	if err != nil {
		t.Fatalf("NewGCS with STORAGE_EMULATOR_HOST: %v", err)
	}
	defer g.Close()
	a := putObject(t, s, g, "bkt", "obj", []byte("hello"))
	if got := readAll(t, g, a.Object, 1, 3); string(got) != "ell" {
		t.Errorf("read = %q; want %q", got, "ell")
	}
}

// TestGCSDefaultCredentials: without an endpoint or emulator, NewGCS uses
// Application Default Credentials (here a syntactically valid user
// credential file; nothing is sent).
func TestGCSDefaultCredentials(t *testing.T) {
	t.Setenv("STORAGE_EMULATOR_HOST", "")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", bad)
	if g, err := NewGCS(context.Background(), GCSConfig{}); err == nil {
		g.Close()
		t.Error("NewGCS with unreadable credentials = nil error; want an error")
	}
	good := filepath.Join(dir, "user.json")
	cred := `{"type":"authorized_user","client_id":"id","client_secret":"secret","refresh_token":"token"}`
	if err := os.WriteFile(good, []byte(cred), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", good)
	g, err := NewGCS(context.Background(), GCSConfig{})
	if err != nil {
		t.Fatalf("NewGCS with user credentials: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
