package webdataset

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzIndex checks that Index never panics, that what it returns is
// consistent, and that its saved form decodes to the same index. A tar
// input is at least a kilobyte, and go test's minimizer is quadratic in the
// input size: minimizing each new input can take the whole 60 s default
// -fuzzminimizetime, during which the progress lines show 0 execs/sec.
// Runs should pass -fuzzminimizetime=200x (200 tries per input).
func FuzzIndex(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.tar"))
	if len(files) == 0 {
		f.Fatal("no test files")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		if b := trimEnd(b); len(b) <= 4<<10 {
			f.Add(b)
		}
	}
	f.Add(trimEnd(tarOf(f, tar.FormatGNU, entry{name: "a/x.jpg", data: "1"}, entry{name: "a/x.cls", data: "22"})))
	f.Add(cat(paxEntry(paxRecord("path", "p.x"), paxRecord("size", "2")), header("q", 0, '0'), pad("ab")))
	f.Add(cat(header("L", 6, 'L'), pad("a.jpg\x00"), header("a", 1, '0'), pad("1")))
	f.Add(cat(header("a.jpg", 1, '0'), pad("1"), zeros))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Index(b)
		if err != nil {
			for _, e := range []error{ErrHeader, ErrChecksum, ErrTruncated, ErrUnsupported, ErrSample} {
				if errors.Is(err, e) {
					return
				}
			}
			t.Fatalf("error %v wraps no sentinel", err)
		}
		checkMembers(t, s, int64(len(b)))
		enc, err := s.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := UnmarshalShard(enc, int64(len(b)))
		if err != nil {
			t.Fatalf("UnmarshalShard of MarshalBinary: %v", err)
		}
		if !slices.Equal(s.Members(), s2.Members()) || !slices.Equal(s.Fields(), s2.Fields()) || s.NumSamples() != s2.NumSamples() {
			t.Fatal("the decoded index differs")
		}
	})
}

// FuzzUnmarshalShard checks that UnmarshalShard never panics and that what
// it accepts is consistent. Like FuzzIndex, it should run with
// -fuzzminimizetime=200x.
func FuzzUnmarshalShard(f *testing.F) {
	f.Add(encodeRaw(4096, 2, []rawMember{{"a.jpg", 0, 10}, {"b.jpg", 0, 600}}), int64(4096))
	f.Add(encodeRaw(4096, 2, []rawMember{{"a.jpg", 0, 10}, {"a.cls", 1, 3}}), int64(4096))
	f.Add(encodeRaw(0, 0, nil), int64(0))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		s, err := UnmarshalShard(b, size)
		if err != nil {
			if !errors.Is(err, ErrIndex) && !errors.Is(err, ErrSample) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		checkMembers(t, s, size)
	})
}

// checkMembers checks that the members are aligned, in order, with room for
// a header before each, and within the object, and that the samples use
// them all.
func checkMembers(t *testing.T, s *Shard, size int64) {
	t.Helper()
	next := int64(blockSize)
	for i, m := range s.Members() {
		if m.Name == "" || m.Offset%blockSize != 0 || m.Offset < next || m.Size < 0 || m.Size > size-m.Offset {
			t.Fatalf("member %d = %+v after byte %d of %d", i, m, next, size)
		}
		next = padded(m.Offset+m.Size) + blockSize
	}
	n := 0
	for i := range s.NumSamples() {
		x := s.Sample(i)
		if x.Key == "" || len(x.Fields) == 0 {
			t.Fatalf("sample %d = %+v", i, x)
		}
		n += len(x.Fields)
	}
	if n > len(s.Members()) {
		t.Fatalf("%d fields for %d members", n, len(s.Members()))
	}
}

// trimEnd cuts a tar after its last non-zero block: without its
// end-of-archive blocks and record padding, it is still a valid tar.
func trimEnd(b []byte) []byte {
	return b[:min(len(b), int(padded(int64(len(bytes.TrimRight(b, "\x00"))))))]
}
