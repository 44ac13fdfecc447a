package webdataset

import (
	"archive/tar"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
)

// rawMember is a member as the saved index encodes it.
type rawMember struct {
	name      string
	gap, size uint64
}

// encodeRaw encodes a saved index with a valid checksum, whatever the
// fields say.
func encodeRaw(size, count uint64, ms []rawMember, extra ...byte) []byte {
	b := []byte(indexMagic)
	b = binary.AppendUvarint(b, size)
	b = binary.AppendUvarint(b, count)
	for _, m := range ms {
		b = binary.AppendUvarint(b, uint64(len(m.name)))
		b = append(b, m.name...)
		b = binary.AppendUvarint(b, m.gap)
		b = binary.AppendUvarint(b, m.size)
	}
	b = append(b, extra...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func TestMarshalRoundTrip(t *testing.T) {
	b := tarOf(t, tar.FormatPAX,
		entry{name: "x.jpg", data: strings.Repeat("j", 1000)},
		entry{name: "x.cls", data: ""},
		entry{name: strings.Repeat("d/", 80) + "y.jpg", data: "y"},
		entry{name: "z.jpg", data: strings.Repeat("z", 512)},
	)
	s, err := Index(b)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := UnmarshalShard(enc, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Members(), s2.Members()) || !slices.Equal(s.Fields(), s2.Fields()) || s2.NumSamples() != 3 {
		t.Fatalf("decoded %+v; want %+v", s2, s)
	}
	if _, err := UnmarshalShard(enc, int64(len(b))-1); !errors.Is(err, ErrIndex) {
		t.Errorf("UnmarshalShard for another size: %v", err)
	}
	for i := range enc {
		c := slices.Clone(enc)
		c[i] ^= 0x10
		if _, err := UnmarshalShard(c, int64(len(b))); !errors.Is(err, ErrIndex) {
			t.Fatalf("flipping byte %d: %v", i, err)
		}
	}
	empty, _ := (&Shard{}).MarshalBinary()
	if s, err := UnmarshalShard(empty, 0); err != nil || len(s.Members()) != 0 {
		t.Errorf("empty index: %v, %v", s, err)
	}
}

func TestUnmarshalShardErrors(t *testing.T) {
	good := []rawMember{{"a.jpg", 0, 10}, {"b.jpg", 0, 600}}
	tests := []struct {
		name string
		b    []byte
		size int64
		want error
		text string
	}{
		{"empty", nil, 0, ErrIndex, "too short"},
		{"bad magic", append([]byte("WDSIDX\x00\x02"), 0, 0, 0, 0, 0, 0), 0, ErrIndex, "bad magic"},
		{"bad checksum", append(encodeRaw(0, 0, nil)[:10], 1, 2, 3, 4), 0, ErrIndex, "checksum"},
		{"other size", encodeRaw(4096, 2, good), 4095, ErrIndex, "made for an object of 4096 bytes, not 4095"},
		{"negative size", encodeRaw(0, 0, nil), -1, ErrIndex, "not -1"},
		{"absurd count", encodeRaw(4096, 1<<40, good), 4096, ErrIndex, "1099511627776 members cannot fit"},
		{"missing member", encodeRaw(4096, 3, good, 0, 0, 0), 4096, ErrIndex, "member 2 has name"},
		{"truncated member", encodeRaw(4096, 2, good[:1], 5, 'a'), 4096, ErrIndex, "5-byte name"},
		{"bad varint", encodeRaw(4096, 1, nil, 0xff, 0xff, 0xff), 4096, ErrIndex, "bad number"},
		{"trailing bytes", encodeRaw(4096, 2, good, 0), 4096, ErrIndex, "1 bytes after the last member"},
		{"NUL in a name", encodeRaw(4096, 1, []rawMember{{"a\x00b", 0, 1}}), 4096, ErrIndex, "member 0 has name"},
		{"past the end", encodeRaw(1024, 1, []rawMember{{"a", 0, 513}}), 1024, ErrIndex, "member 0 (\"a\", 513 bytes) does not fit the 1024-byte object after byte 512"},
		{"gap past the end", encodeRaw(4096, 2, []rawMember{{"a", 0, 1}, {"b", 5, 1}}), 4096, ErrIndex, "member 1"},
		{"huge gap", encodeRaw(4096, 1, []rawMember{{"a", 1 << 62, 0}}), 4096, ErrIndex, "member 0"},
		{"huge size", encodeRaw(4096, 1, []rawMember{{"a", 0, 1<<63 - 1}}), 4096, ErrIndex, "member 0"},
		{"absurd object size", encodeRaw(1<<63-1, 0, nil), 1<<63 - 1, ErrIndex, "made for"},
		{"duplicate field", encodeRaw(4096, 2, []rawMember{{"a.jpg", 0, 1}, {"a.jpg", 0, 1}}), 4096, ErrSample, "two \"jpg\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := UnmarshalShard(tt.b, tt.size)
			if !errors.Is(err, tt.want) || s != nil {
				t.Fatalf("UnmarshalShard = %v, %v; want %v", s, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not say %q", err, tt.text)
			}
		})
	}
	s, err := UnmarshalShard(encodeRaw(4096, 2, good), 4096)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Member{{"a.jpg", 512, 10}, {"b.jpg", 1536, 600}}; !slices.Equal(s.Members(), want) {
		t.Errorf("members = %+v; want %+v", s.Members(), want)
	}
}
