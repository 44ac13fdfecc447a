package emulator

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"net/url"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
)

// start runs an emulator for the test.
func start(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// newClient returns a storage client for s with fast retries.
func newClient(t testing.TB, s *Server, extra ...option.ClientOption) *storage.Client {
	t.Helper()
	opts := append([]option.ClientOption{
		option.WithEndpoint(s.Endpoint()), option.WithoutAuthentication(),
	}, extra...)
	c, err := storage.NewClient(context.Background(), opts...)
	if err != nil {
		t.Fatalf("storage.NewClient: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetRetry(storage.WithBackoff(gax.Backoff{
		Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 2,
	}))
	return c
}

// testCtx returns a context that bounds a test's requests: the storage
// client retries some errors forever without one.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// readObject reads a whole object through c.
func readObject(ctx context.Context, c *storage.Client, bucket, name string) ([]byte, error) {
	r, err := c.Bucket(bucket).Object(name).NewReader(ctx)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// mediaURL is the XML download URL of bucket/name on s.
func mediaURL(s *Server, bucket, name string) string {
	return "http://" + s.Addr() + "/" + bucket + "/" + url.PathEscape(name)
}

func TestRoundTrip(t *testing.T) {
	s := start(t, Options{Buckets: []string{"b"}})
	ctx := testCtx(t)
	xml := newClient(t, s)
	json := newClient(t, s, storage.WithJSONReads())
	names := []string{"plain", "with space", "ünïcode/ß", "a+b%c", "dir/sub/obj.npy"}
	for i, name := range names {
		data := Pattern(uint64(i), 100_000+i)
		w := xml.Bucket("b").Object(name).NewWriter(ctx)
		if _, err := w.Write(data); err != nil {
			t.Fatalf("Write %q: %v", name, err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("Close writer %q: %v", name, err)
		}
		if got, want := w.Attrs().CRC32C, crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)); got != want {
			t.Errorf("%q: CRC32C = %08x; want %08x", name, got, want)
		}
		for _, c := range []*storage.Client{xml, json} {
			got, err := readObject(ctx, c, "b", name)
			if err != nil {
				t.Fatalf("read %q: %v", name, err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("read %q: got %d bytes, differing from the %d written", name, len(got), len(data))
			}
		}
	}
	if got, want := s.MediaGETs(), int64(2*len(names)); got != want {
		t.Errorf("MediaGETs() = %d; want %d (uploads are not media GETs)", got, want)
	}
	var listed []string
	for it := xml.Bucket("b").Objects(ctx, nil); ; {
		a, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		listed = append(listed, a.Name)
	}
	if len(listed) != len(names) {
		t.Errorf("listed %q; want %d objects", listed, len(names))
	}
	if got, want := s.MediaGETs(), int64(2*len(names)); got != want {
		t.Errorf("MediaGETs() after list = %d; want %d", got, want)
	}
}

func TestResumableUpload(t *testing.T) {
	s := start(t, Options{Buckets: []string{"b"}})
	ctx := testCtx(t)
	c := newClient(t, s)
	data := Pattern(7, 1<<20)
	w := c.Bucket("b").Object("big").NewWriter(ctx)
	w.ChunkSize = 256 << 10 // several chunks: a resumable session
	if _, err := w.Write(data); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close writer: %v", err)
	}
	got, err := readObject(ctx, c, "b", "big")
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Errorf("read %d bytes, differing from the %d written", len(got), len(data))
	}
}

func TestPut(t *testing.T) {
	s := start(t, Options{Objects: []fakestorage.Object{{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "b", Name: "seeded"},
		Content:     []byte("seed"),
	}}})
	ctx := testCtx(t)
	c := newClient(t, s)
	var last int64
	for i := range 3 {
		data := Pattern(uint64(i), 1000)
		gen, err := s.Put("b", "obj", data)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		if gen <= last {
			t.Errorf("Put #%d generation = %d; want > %d", i, gen, last)
		}
		last = gen
		a, err := c.Bucket("b").Object("obj").Attrs(ctx)
		if err != nil {
			t.Fatalf("Attrs: %v", err)
		}
		if a.Generation != gen || a.Size != int64(len(data)) {
			t.Errorf("Attrs = gen %d size %d; want gen %d size %d", a.Generation, a.Size, gen, len(data))
		}
		if got, err := readObject(ctx, c, "b", "obj"); err != nil || !bytes.Equal(got, data) {
			t.Errorf("read after Put #%d: %d bytes, err %v; want the %d put", i, len(got), err, len(data))
		}
	}
	if got, err := readObject(ctx, c, "b", "seeded"); err != nil || string(got) != "seed" {
		t.Errorf("read seeded = %q, %v; want %q", got, err, "seed")
	}
	for _, bad := range [][2]string{{"", "x"}, {"b", ""}} {
		if _, err := s.Put(bad[0], bad[1], nil); !errors.Is(err, ErrInvalidObject) {
			t.Errorf("Put(%q, %q) error = %v; want ErrInvalidObject", bad[0], bad[1], err)
		}
	}
	if _, err := Start(Options{Buckets: []string{""}}); !errors.Is(err, ErrInvalidObject) {
		t.Errorf("Start with an empty bucket name: error = %v; want ErrInvalidObject", err)
	}
}

func TestVersionedKeepsOldGeneration(t *testing.T) {
	old, cur := []byte("old contents"), []byte("new contents")
	s := start(t, Options{
		Versioned: []string{"v"},
		Buckets:   []string{"v", "plain"}, // "v" stays versioned
		Objects: []fakestorage.Object{
			{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "v", Name: "o"}, Content: old},
			{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "plain", Name: "o"}, Content: old},
		},
	})
	ctx := testCtx(t)
	c := newClient(t, s)
	tests := []struct {
		bucket  string
		wantOld bool
	}{{"v", true}, {"plain", false}}
	for _, tt := range tests {
		t.Run(tt.bucket, func(t *testing.T) {
			a, err := c.Bucket(tt.bucket).Object("o").Attrs(ctx)
			if err != nil {
				t.Fatalf("Attrs: %v", err)
			}
			gen, err := s.Put(tt.bucket, "o", cur)
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			if got, err := readObject(ctx, c, tt.bucket, "o"); err != nil || !bytes.Equal(got, cur) {
				t.Errorf("latest = %q, %v; want %q (generation %d)", got, err, cur, gen)
			}
			r, err := c.Bucket(tt.bucket).Object("o").Generation(a.Generation).NewReader(ctx)
			if !tt.wantOld {
				if !errors.Is(err, storage.ErrObjectNotExist) {
					t.Errorf("old generation: error = %v; want ErrObjectNotExist", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("old generation: %v", err)
			}
			defer r.Close()
			if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, old) {
				t.Errorf("old generation = %q, %v; want %q", got, err, old)
			}
		})
	}
}

func TestPattern(t *testing.T) {
	a, b := Pattern(42, 1000), Pattern(42, 1000)
	if !bytes.Equal(a, b) {
		t.Fatal("Pattern(42, 1000) differs between calls")
	}
	if c := Pattern(43, 1000); bytes.Equal(a, c) {
		t.Error("Pattern(42, 1000) == Pattern(43, 1000); want different streams")
	}
	if p := Pattern(42, 37); !bytes.Equal(p, a[:37]) {
		t.Error("Pattern(42, 37) is not a prefix of Pattern(42, 1000)")
	}
	for _, n := range []int{0, -5} {
		if got := Pattern(1, n); len(got) != 0 {
			t.Errorf("len(Pattern(1, %d)) = %d; want 0", n, len(got))
		}
	}
	for _, r := range [][2]int{{0, 0}, {0, 8}, {3, 5}, {5, 20}, {8, 64}, {13, 1000}, {999, 1000}} {
		got := make([]byte, r[1]-r[0])
		FillPattern(got, 42, int64(r[0]))
		if want := a[r[0]:r[1]]; !bytes.Equal(got, want) {
			t.Errorf("FillPattern(off %d, len %d) = %x; want %x", r[0], len(got), got, want)
		}
	}
	if zeros := bytes.Count(Pattern(0, 1<<16), []byte{0}); zeros > 1<<9 {
		t.Errorf("Pattern(0, 64 KiB) has %d zero bytes; want about 256", zeros)
	}
}
