package emulator

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// pacedTime is the least time a Shape can take to deliver n body bytes.
func pacedTime(sh Shape, n int64) time.Duration {
	return sh.FirstByte + time.Duration(float64(n)/float64(sh.BytesPerSec)*float64(time.Second))
}

func TestShapePacesBody(t *testing.T) {
	const size = 4 << 20
	fast := Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: 16e6}
	data := Pattern(3, size)
	s := start(t, Options{Shape: fast})
	if _, err := s.Put("b", "o", data); err != nil {
		t.Fatalf("Put: %v", err)
	}
	c := newClient(t, s)
	ctx := testCtx(t)
	tests := []struct {
		name    string
		sh      Shape
		off, n  int64
		wantLen int64
	}{
		{"whole", fast, 0, -1, size},
		{"range", fast, 1 << 20, 2 << 20, 2 << 20},
		{"slow link, small pieces", Shape{BytesPerSec: 500e3}, 0, 50_000, 50_000},
	}
	var total int64
	for _, tt := range tests {
		s.SetShape(tt.sh)
		began := time.Now()
		r, err := c.Bucket("b").Object("o").NewRangeReader(ctx, tt.off, tt.n)
		if err != nil {
			t.Fatalf("%s: NewRangeReader: %v", tt.name, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		elapsed := time.Since(began)
		if err != nil || !bytes.Equal(got, data[tt.off:tt.off+tt.wantLen]) {
			t.Fatalf("%s: read %d bytes, error %v; want %d pattern bytes", tt.name, len(got), err, tt.wantLen)
		}
		// A lower bound is a correctness property of the pacer: it must
		// never deliver faster than the link it models.
		if least := pacedTime(tt.sh, tt.wantLen); elapsed < least {
			t.Errorf("%s: %d bytes in %v; want at least %v", tt.name, tt.wantLen, elapsed, least)
		}
		total += tt.wantLen
	}
	s.Close() // waits for the handlers, so the count is final
	if got := s.BytesServed(); got != total {
		t.Errorf("BytesServed() = %d; want %d", got, total)
	}
}

func TestShapeSkipsMetadata(t *testing.T) {
	// With an hour to first byte, anything shaped would hang the test.
	s := start(t, Options{Shape: Shape{FirstByte: time.Hour, BytesPerSec: 1}})
	if _, err := s.Put("b", "o", []byte("x")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	c := newClient(t, s)
	ctx := testCtx(t)
	if _, err := c.Bucket("b").Object("o").Attrs(ctx); err != nil {
		t.Errorf("Attrs: %v", err)
	}
	w := c.Bucket("b").Object("p").NewWriter(ctx)
	if _, err := w.Write([]byte("y")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("upload: %v", err)
	}
	if got := s.MediaGETs(); got != 0 {
		t.Errorf("MediaGETs() = %d; want 0", got)
	}
}

// TestSetConcurrently swaps plans and shapes while reads run (for -race).
func TestSetConcurrently(t *testing.T) {
	s, c, data := faultServer(t)
	g, ctx := errgroup.WithContext(testCtx(t))
	for range 4 {
		g.Go(func() error {
			for range 5 {
				_, body, err := fetch(ctx, c, mediaURL(s, "b", "o"), "")
				if err != nil {
					return err
				}
				if !bytes.Equal(body, data) {
					return fmt.Errorf("read %d bytes, differing from the object", len(body))
				}
			}
			return nil
		})
	}
	g.Go(func() error {
		for i := range 50 {
			s.SetShape(Shape{BytesPerSec: int64(100e6 + i)})
			s.SetFaults(func(*http.Request, int) Fault { return Fault{} })
			s.SetFaults(nil)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := s.MediaGETs(); got != 20 {
		t.Errorf("MediaGETs() = %d; want 20", got)
	}
}

// BenchmarkShapedStreams reads through the shaper at 100 MB/s per connection
// with 20 ms to first byte, 16 MiB per stream, and reports the aggregate
// rate and its ratio to the ideal link.
func BenchmarkShapedStreams(b *testing.B) {
	const per = 16 << 20
	sh := Shape{FirstByte: 20 * time.Millisecond, BytesPerSec: 100e6}
	for _, streams := range []int{1, 8} {
		b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
			s := start(b, Options{Shape: sh})
			if _, err := s.Put("b", "o", Pattern(9, streams*per)); err != nil {
				b.Fatalf("Put: %v", err)
			}
			c := newClient(b, s)
			ctx := testCtx(b)
			b.SetBytes(int64(streams * per))
			b.ResetTimer()
			began := time.Now()
			for range b.N {
				g, ctx := errgroup.WithContext(ctx)
				for i := range streams {
					g.Go(func() error {
						r, err := c.Bucket("b").Object("o").NewRangeReader(ctx, int64(i*per), per)
						if err != nil {
							return err
						}
						defer r.Close()
						_, err = io.Copy(io.Discard, r)
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			secs := time.Since(began).Seconds()
			got := float64(b.N*streams*per) / secs / 1e6
			ideal := float64(streams*per) / pacedTime(sh, per).Seconds() / 1e6
			b.ReportMetric(got, "MB/s")
			b.ReportMetric(got/ideal, "achieved/ideal")
		})
	}
}
