package webdataset

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cacheagent/cacheagent/bench/testenv"
)

// expectation is one shard of expect.json, written by
// testdata/write_webdataset.py from what tarfile reads back.
type expectation struct {
	File    string   `json:"file"`
	Size    int64    `json:"size"`
	Members []Member `json:"members"`
	Samples []struct {
		Key    string   `json:"key"`
		Fields [][3]any `json:"fields"`
	} `json:"samples"`
	Fields []string `json:"fields"`
}

func checkDir(t *testing.T, dir string) {
	es := testenv.Expectations[expectation](t, dir)
	for _, e := range es {
		t.Run(e.File, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, e.File))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Index(b)
			if err != nil {
				t.Fatalf("Index: %v", err)
			}
			checkShard(t, e, s)
			enc, err := s.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			s2, err := UnmarshalShard(enc, int64(len(b)))
			if err != nil {
				t.Fatalf("UnmarshalShard: %v", err)
			}
			checkShard(t, e, s2)
			checkWithArchiveTar(t, b, s)
		})
	}
}

func checkShard(t *testing.T, e expectation, s *Shard) {
	t.Helper()
	if s.ObjectSize() != e.Size || !slices.Equal(s.Members(), e.Members) {
		t.Errorf("members of %d bytes = %+v\nwant %d bytes %+v", s.ObjectSize(), s.Members(), e.Size, e.Members)
	}
	if !slices.Equal(s.Fields(), e.Fields) {
		t.Errorf("Fields = %q; want %q", s.Fields(), e.Fields)
	}
	if s.NumSamples() != len(e.Samples) {
		t.Fatalf("%d samples; want %d", s.NumSamples(), len(e.Samples))
	}
	for i, want := range e.Samples {
		got := s.Sample(i)
		var fields []Field
		for _, f := range want.Fields {
			fields = append(fields, Field{Name: f[0].(string), Offset: int64(f[1].(float64)), Size: int64(f[2].(float64))})
		}
		if got.Key != want.Key || !slices.Equal(got.Fields, fields) {
			t.Errorf("sample %d = %+v; want %q %+v", i, got, want.Key, fields)
		}
	}
}

// checkWithArchiveTar reads b with archive/tar and checks that the data of
// every regular file is where s says.
func checkWithArchiveTar(t *testing.T, b []byte, s *Shard) {
	t.Helper()
	r := tar.NewReader(bytes.NewReader(b))
	var i int
	for {
		h, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("archive/tar: %v", err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(s.Members()) {
			t.Fatalf("archive/tar finds more than %d members", i)
		}
		m := s.Members()[i]
		if m.Name != h.Name || !bytes.Equal(b[m.Offset:m.Offset+m.Size], data) {
			t.Errorf("member %d = %q; archive/tar reads %q with other data", i, m.Name, h.Name)
		}
		i++
	}
	if i != len(s.Members()) {
		t.Errorf("archive/tar finds %d members; Index %d", i, len(s.Members()))
	}
}

// TestCommittedFiles reads the shards write_webdataset.py wrote into
// testdata.
func TestCommittedFiles(t *testing.T) {
	checkDir(t, "testdata")
}

// TestWrittenByPython runs write_webdataset.py now and reads what it writes.
func TestWrittenByPython(t *testing.T) {
	testenv.NeedPython(t, "tarfile")
	dir := t.TempDir()
	testenv.RunPython(t, filepath.Join("testdata", "write_webdataset.py"), dir)
	checkDir(t, dir)
}
