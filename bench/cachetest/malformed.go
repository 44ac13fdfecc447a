package cachetest

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"testing"
)

// Malformed is a token or record dataset of one shard in two versions: Good,
// which reads, and the same files with Bad's replacing some of them, which
// must fail with an error naming the object Object (a key of Bad). Format,
// Pattern, TokenDType and SeqLen are the dataset's loader flags (as
// `cacheagent loader` takes them).
type Malformed struct {
	Name       string
	Format     string
	Pattern    string
	TokenDType string
	SeqLen     int
	Good, Bad  map[string][]byte
	Object     string
}

// Files returns the bad dataset's files: Good with Bad's replacements.
func (m Malformed) Files() map[string][]byte {
	files := make(map[string][]byte, len(m.Good))
	for n, b := range m.Good {
		files[n] = b
	}
	for n, b := range m.Bad {
		files[n] = b
	}
	return files
}

// MalformedDatasets returns one Malformed per way a shard can lie about
// its size: a Megatron .bin shorter than its .idx says, a pointer past the
// end of the .bin, absurd sequence and document-index counts, an llm.c
// header counting more tokens than the file holds, a raw token file that
// is not a whole number of tokens, a tar header with a bad checksum and a
// tar member running past the end of the object.
func MalformedDatasets(t testing.TB) []Malformed {
	t.Helper()
	bin := tokenBytes(10)
	idx := MegatronIndex([]int32{6, 4}, []int64{0, 12})
	withCounts := func(s, d uint64) []byte {
		b := bytes.Clone(idx)
		binary.LittleEndian.PutUint64(b[18:], s)
		binary.LittleEndian.PutUint64(b[26:], d)
		return b
	}
	mt := func(name string, bad map[string][]byte, obj string) Malformed {
		return Malformed{Name: name, Format: "megatron", Pattern: "*.{bin,idx}", SeqLen: 4,
			Good: map[string][]byte{"a.bin": bin, "a.idx": idx}, Bad: bad, Object: obj}
	}
	raw := tokenBytes(20)
	llmc := append(llmcHeader(20), raw...)
	tok := func(name string, good, bad []byte) Malformed {
		return Malformed{Name: name, Format: "tokens", Pattern: "*.bin", TokenDType: "uint16", SeqLen: 4,
			Good: map[string][]byte{"a.bin": good}, Bad: map[string][]byte{"a.bin": bad}, Object: "a.bin"}
	}
	good := goodTar(t)
	badSum := bytes.Clone(good)
	badSum[0] ^= 1 // the first member's name: its header's sum changes
	wds := func(name string, bad []byte) Malformed {
		return Malformed{Name: name, Format: "webdataset", Pattern: "*.tar",
			Good: map[string][]byte{"a.tar": good}, Bad: map[string][]byte{"a.tar": bad}, Object: "a.tar"}
	}
	return []Malformed{
		mt("megatron-truncated-bin", map[string][]byte{"a.bin": bin[:12]}, "a.bin"),
		mt("megatron-pointer-past-end", map[string][]byte{"a.idx": MegatronIndex([]int32{6, 4}, []int64{0, 1 << 20})}, "a.idx"),
		mt("megatron-huge-sequence-count", map[string][]byte{"a.idx": withCounts(1<<60, 3)}, "a.idx"),
		mt("megatron-huge-document-count", map[string][]byte{"a.idx": withCounts(2, 1<<61)}, "a.idx"),
		tok("llmc-count-past-end", llmc, append(llmcHeader(1000), raw...)),
		tok("raw-odd-size", raw, raw[:len(raw)-1]),
		wds("tar-bad-checksum", badSum),
		wds("tar-member-past-end", good[:512+1000]),
	}
}

// tokenBytes returns n little-endian uint16 tokens 1, 2, ….
func tokenBytes(n int) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i+1))
	}
	return b
}

// llmcHeader returns an llm.c header for n uint16 tokens.
func llmcHeader(n int32) []byte {
	h := make([]byte, 1024)
	binary.LittleEndian.PutUint32(h, 20240520)
	binary.LittleEndian.PutUint32(h[4:], 1)
	binary.LittleEndian.PutUint32(h[8:], uint32(n))
	return h
}

// MegatronIndex encodes a uint16 Megatron index of one document per
// sequence, as Megatron's builder lays it out.
func MegatronIndex(lengths []int32, pointers []int64) []byte {
	b := []byte("MMIDIDX\x00\x00")
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = append(b, 8)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(lengths)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(lengths)+1))
	for _, n := range lengths {
		b = binary.LittleEndian.AppendUint32(b, uint32(n))
	}
	for _, p := range pointers {
		b = binary.LittleEndian.AppendUint64(b, uint64(p))
	}
	for i := range len(lengths) + 1 {
		b = binary.LittleEndian.AppendUint64(b, uint64(i))
	}
	return b
}

// goodTar returns a WebDataset tar of two samples whose first member is
// 3000 bytes.
func goodTar(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, m := range []struct {
		name string
		size int
	}{{"s0.bin", 3000}, {"s0.cls", 1}, {"s1.bin", 10}, {"s1.cls", 1}} {
		if err := w.WriteHeader(&tar.Header{Name: m.name, Mode: 0o644, Size: int64(m.size), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(bytes.Repeat([]byte{byte(m.size)}, m.size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
