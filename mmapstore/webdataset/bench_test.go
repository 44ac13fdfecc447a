package webdataset

import (
	"archive/tar"
	"bytes"
	"fmt"
	"testing"
)

// BenchmarkIndex indexes a 64 MiB shard of 100 KB members, two per sample,
// as archive/tar writes it. Indexing is bound by the number of headers
// (671 here, about 10,700 for a 1 GiB shard), not by the data size.
func BenchmarkIndex(b *testing.B) {
	const total, member = 64 << 20, 100_000
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	data := make([]byte, member)
	for i := 0; buf.Len()+member < total; i++ {
		name := fmt.Sprintf("shard-%04d/%09d.jpg", i/1000, i/2)
		if i%2 == 1 {
			name = fmt.Sprintf("shard-%04d/%09d.seg.png", i/1000, i/2)
		}
		if err := w.WriteHeader(&tar.Header{Name: name, Size: member, Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			b.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	shard := buf.Bytes()
	s, err := Index(shard)
	if err != nil {
		b.Fatal(err)
	}
	headers := len(s.Members())
	b.SetBytes(int64(len(shard)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := Index(shard); err != nil {
			b.Fatal(err)
		}
	}
	perHeader := b.Elapsed().Seconds() / float64(b.N) / float64(headers)
	b.ReportMetric(float64(headers), "headers")
	b.ReportMetric(perHeader*1e9, "ns/header")
	// A 1 GiB shard of 100 KB members has (1<<30)/(100_000+512) headers.
	b.ReportMetric(perHeader*float64(1<<30)/(member+512)*1e3, "ms/GiB")
}
