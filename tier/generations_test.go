package tier

import (
	"bytes"
	"context"
	"io"
	"iter"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// verSource is a versioned in-memory source: every generation stays readable
// by exact generation (as in a GCS bucket with versioning, or a peer still
// holding an older one), and a Stat of generation 0 answers the newest.
type verSource struct {
	mu   sync.Mutex
	gens map[string]map[int64][]byte
	live map[string]int64
	gen  int64
}

// newVerSource returns an empty verSource.
func newVerSource() *verSource {
	return &verSource{gens: map[string]map[int64][]byte{}, live: map[string]int64{}}
}

// put adds a generation of bucket/name, the live one from now on.
func (m *verSource) put(bucket, name string, data []byte) object.Attrs {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	k := indexKey(bucket, name)
	if m.gens[k] == nil {
		m.gens[k] = map[int64][]byte{}
	}
	m.gens[k][m.gen] = data
	m.live[k] = m.gen
	return object.Attrs{Object: object.Object{Bucket: bucket, Name: name, Generation: m.gen}, Size: int64(len(data))}
}

func (m *verSource) Stat(_ context.Context, o object.Object) (object.Attrs, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := indexKey(o.Bucket, o.Name)
	g := o.Generation
	if g == 0 {
		g = m.live[k]
	}
	d, ok := m.gens[k][g]
	if !ok {
		return object.Attrs{}, object.ErrNotFound
	}
	return object.Attrs{Object: object.Object{Bucket: o.Bucket, Name: o.Name, Generation: g}, Size: int64(len(d))}, nil
}

func (m *verSource) List(context.Context, string, string) iter.Seq2[object.Attrs, error] {
	return func(func(object.Attrs, error) bool) {}
}

func (m *verSource) NewRangeReader(_ context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.gens[indexKey(o.Bucket, o.Name)][o.Generation]
	if !ok {
		return nil, object.ErrNotFound
	}
	end := min(off+n, int64(len(d)))
	return io.NopCloser(bytes.NewReader(d[off:end])), nil
}

// TestOlderGenerationNeverReplacesNewer: an Open of an older generation
// by number, while a newer one is cached, is served a copy outside the
// cache (deleted at its last Close); the newer one stays cached, and an
// Open of the live generation gets it.
func TestOlderGenerationNeverReplacesNewer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		packBelow int64
	}{{"file", -1}, {"packed", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			src := newVerSource()
			old := src.put("b", "x", pattern(1, 4096))
			_ = src.put("b", "x", pattern(2, 4096)) // the live generation
			dl := newDownloader(t, src)
			c := openCache(t, Config{Dir: t.TempDir(), MaxBytes: 1 << 20, Source: src, Downloader: dl,
				Revalidate: time.Hour, PackBelow: tc.packBelow})
			openRead(t, c, obj("b", "x"), pattern(2, 4096))
			openRead(t, c, old.Object, pattern(1, 4096)) // an exact, older generation
			if _, err := os.Stat(c.base.path(idOf("b", "x", old.Generation))); !os.IsNotExist(err) {
				t.Errorf("the older generation's copy outlived its handle: %v", err)
			}
			h, err := c.Open(context.Background(), obj("b", "x"))
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			if h.Attrs().Generation != src.live[indexKey("b", "x")] {
				t.Errorf("Open of the live generation served generation %d; the source's live one is %d",
					h.Attrs().Generation, src.live[indexKey("b", "x")])
			}
			if err := flushAll(c); err != nil {
				t.Fatal(err)
			}
			if st := c.Stats().Base(); st.Entries != 1 || st.UsedBytes != roundUp(4096, c.base.bsize) {
				t.Errorf("Stats = %+v; want the live generation's copy alone", st)
			}
			checkInvariants(t, c)
		})
	}
}

// TestSlowOldFillNeverOverwritesNewer: an Open stats generation 1 and
// starts a slow fill; the object is rewritten, and a second Open stats
// generation 2 and caches it first. The slow fill ends as a copy for its
// own Open only: later Opens of the live generation get generation 2.
func TestSlowOldFillNeverOverwritesNewer(t *testing.T) {
	src := newVerSource()
	g1 := src.put("b", "x", pattern(1, 4096))
	dl := newDownloader(t, src)
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	dl.before = func(ctx context.Context, a object.Attrs, _ *object.Urgency) error {
		if a.Generation == g1.Generation {
			started <- struct{}{}
			<-gate
		}
		return nil
	}
	c := openCache(t, Config{Dir: t.TempDir(), MaxBytes: 1 << 20, Source: src, Downloader: dl,
		Revalidate: time.Hour, PackBelow: -1})
	errc := make(chan error, 1)
	go func() {
		h, err := c.Open(context.Background(), obj("b", "x"))
		if err == nil {
			h.Close()
		}
		errc <- err
	}()
	<-started
	g2 := src.put("b", "x", pattern(2, 4096))
	openRead(t, c, obj("b", "x"), pattern(2, 4096))
	close(gate)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	h, err := c.Open(context.Background(), obj("b", "x"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Attrs().Generation != g2.Generation {
		t.Errorf("live Open served generation %d after generation %d had been cached", h.Attrs().Generation, g2.Generation)
	}
	checkInvariants(t, c)
}
