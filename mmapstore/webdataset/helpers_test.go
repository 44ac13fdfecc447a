package webdataset

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// entry is a tar entry for tarOf.
type entry struct {
	name string
	data string
	flag byte // 0: regular file
}

// tarOf writes entries with archive/tar in the given format.
func tarOf(t testing.TB, format tar.Format, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Size: int64(len(e.data)), Mode: 0o644, Typeflag: tar.TypeReg, Format: format}
		if e.flag != 0 {
			h.Typeflag, h.Size = e.flag, 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// header returns a ustar header block with a valid checksum.
func header(name string, size int64, flag byte) []byte {
	h := make([]byte, blockSize)
	copy(h, name)
	copy(h[100:], "0000644\x00")
	copy(h[offSize:], fmt.Sprintf("%011o\x00", size))
	h[offTypeflag] = flag
	copy(h[offMagic:], "ustar\x0000")
	return fixSum(h)
}

// fixSum writes the unsigned checksum of h into it.
func fixSum(h []byte) []byte {
	copy(h[offChecksum:offChecksum+8], "        ")
	var sum int
	for _, c := range h {
		sum += int(c)
	}
	copy(h[offChecksum:], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// pad returns data padded with zeros to a whole number of blocks.
func pad(data string) []byte {
	b := []byte(data)
	return append(b, make([]byte, -len(b)&(blockSize-1))...)
}

// cat concatenates blocks.
func cat(blocks ...[]byte) []byte {
	return bytes.Join(blocks, nil)
}

// paxRecord returns one pax record, "LEN key=value\n".
func paxRecord(key, value string) string {
	rec := " " + key + "=" + value + "\n"
	n := len(rec) + 1
	for len(fmt.Sprint(n))+len(rec) != n {
		n++
	}
	return fmt.Sprint(n) + rec
}

// zeros is an end-of-archive marker: two zero blocks.
var zeros = make([]byte, 2*blockSize)

// paxEntry returns a pax 'x' entry holding the records.
func paxEntry(records ...string) []byte {
	d := strings.Join(records, "")
	return cat(header("././@PaxHeader", int64(len(d)), 'x'), pad(d))
}
