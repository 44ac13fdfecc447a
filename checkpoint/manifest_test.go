package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

func validManifest() *Manifest {
	return &Manifest{Format: manifestFormat, URI: "gs://b/run/step-1/", Save: "s", Node: "n",
		Created: time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC),
		Files:   []File{{Name: "model.pt", Size: 3, CRC32C: 7, Generation: 1}, {Name: "a/b", Size: 0, Generation: 2}}}
}

func TestManifestRoundTrip(t *testing.T) {
	m := validManifest()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseManifest(b)
	if err != nil || got.URI != m.URI || len(got.Files) != 2 || got.Files[0] != m.Files[0] || !got.Created.Equal(m.Created) {
		t.Fatalf("ParseManifest(Encode) = %+v, %v", got, err)
	}
}

func TestManifestErrors(t *testing.T) {
	for what, mutate := range map[string]func(*Manifest){
		"format":       func(m *Manifest) { m.Format = "other/1" },
		"uri":          func(m *Manifest) { m.URI = "s3://b/p/" },
		"no slash":     func(m *Manifest) { m.URI = "gs://b/p" },
		"generation":   func(m *Manifest) { m.Files[0].Generation = 0 },
		"size":         func(m *Manifest) { m.Files[0].Size = -1 },
		"dup":          func(m *Manifest) { m.Files[1].Name = m.Files[0].Name },
		"dotdot":       func(m *Manifest) { m.Files[0].Name = "../x" },
		"absolute":     func(m *Manifest) { m.Files[0].Name = "/x" },
		"unclean":      func(m *Manifest) { m.Files[0].Name = "a//b" },
		"reserved":     func(m *Manifest) { m.Files[0].Name = ".cacheagent/claim" },
		"manifest":     func(m *Manifest) { m.Files[0].Name = ManifestName },
		"control":      func(m *Manifest) { m.Files[0].Name = "a\nb" },
		"too long":     func(m *Manifest) { m.Files[0].Name = strings.Repeat("x", 1100) },
		"empty name":   func(m *Manifest) { m.Files[0].Name = "" },
		"with gen":     func(m *Manifest) { m.URI = "gs://b/p/#12" },
		"whole bucket": func(m *Manifest) { m.URI = "gs://b" },
	} {
		m := validManifest()
		mutate(m)
		b, _ := m.Encode()
		if _, err := ParseManifest(b); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: ParseManifest = %v; want ErrManifest", what, err)
		}
	}
	for _, b := range []string{"", "{", "[]", `{"format":"cacheagent-checkpoint/1"} {}`, "null"} {
		if _, err := ParseManifest([]byte(b)); !errors.Is(err, ErrManifest) {
			t.Errorf("ParseManifest(%q) = %v; want ErrManifest", b, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	b, _ := validManifest().Encode()
	f.Add(b)
	f.Add([]byte(`{"format":"cacheagent-checkpoint/1","uri":"gs://b/","files":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrManifest) {
				t.Fatalf("error %v is not ErrManifest", err)
			}
			return
		}
		u, err := object.ParsePrefix(m.URI)
		if err != nil {
			t.Fatalf("accepted uri %q: %v", m.URI, err)
		}
		seen := map[string]bool{}
		for _, f := range m.Files {
			if CheckName(u, f.Name) != nil || seen[f.Name] || f.Size < 0 || f.Generation <= 0 {
				t.Fatalf("accepted file %+v", f)
			}
			seen[f.Name] = true
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseManifest(again); err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
	})
}
