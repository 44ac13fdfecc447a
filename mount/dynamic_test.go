package mount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// countingLister counts the listings asked of it, by bucket.
type countingLister struct {
	Lister
	mu sync.Mutex
	n  map[string]int
}

func newCountingLister(l Lister) *countingLister {
	return &countingLister{Lister: l, n: map[string]int{}}
}

func (l *countingLister) List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error] {
	l.mu.Lock()
	l.n[bucket]++
	l.mu.Unlock()
	return l.Lister.List(ctx, bucket, prefix)
}

// count returns how many listings of bucket were asked for.
func (l *countingLister) count(bucket string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[bucket]
}

// total returns how many listings were asked for.
func (l *countingLister) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.n {
		n += c
	}
	return n
}

// TestDynamicMount mounts with no roots: buckets appear when looked up,
// hostile or missing ones do not (the hostile ones without a request), and
// the root lists the buckets found so far.
func TestDynamicMount(t *testing.T) {
	objs := dataset()
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			lister := newCountingLister(e.src)
			cfg := e.config()
			cfg.Source = lister
			m.apply(&cfg)
			srv, mp := e.mount(t, cfg, nil)

			if got := names(t, mp); len(got) != 0 {
				t.Errorf("root before any lookup = %q; want empty", got)
			}
			for _, o := range objs {
				if o.BucketName == "data" {
					checkFile(t, e, filepath.Join(mp, o.BucketName, o.Name), o)
				}
			}
			if got := names(t, mp); !slices.Equal(got, []string{"data"}) {
				t.Errorf("root after reading data = %q; want [data]", got)
			}
			if got := names(t, filepath.Join(mp, "data")); !slices.Contains(got, "dir") || !slices.Contains(got, "one.bin") {
				t.Errorf("data = %q; want the bucket's top level", got)
			}

			for range 2 {
				if _, err := os.Stat(filepath.Join(mp, "no-such-bucket")); !errors.Is(err, syscall.ENOENT) {
					t.Errorf("stat of a missing bucket: %v; want ENOENT", err)
				}
			}
			if n := lister.count("no-such-bucket"); n != 1 {
				t.Errorf("missing bucket listed %d times; want 1 (negative-cached)", n)
			}

			before := lister.total()
			for _, name := range []string{".Trash-0", "HEAD", "ab", "a b", ".hidden", strings.Repeat("x", 230), strings.Repeat("y", 300)} {
				if _, err := os.Stat(filepath.Join(mp, name)); err == nil {
					t.Errorf("stat %.40q: found; want an error", name)
				} else if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENAMETOOLONG) {
					t.Errorf("stat %.40q: %v; want ENOENT", name, err)
				}
			}
			if n := lister.total() - before; n != 0 {
				t.Errorf("invalid bucket names caused %d listings; want none", n)
			}

			if b, err := os.ReadFile(filepath.Join(mp, "other", "skip", "no")); err != nil || string(b) != "no" {
				t.Errorf("read other/skip/no: %q, %v; want the whole bucket shown", b, err)
			}
			if got := names(t, mp); !slices.Equal(got, []string{"data", "other"}) {
				t.Errorf("root = %q; want [data other]", got)
			}
			st := srv.Stats()
			if st.Buckets != 2 || st.Probes != 3 {
				t.Errorf("Buckets = %d, Probes = %d; want 2 and 3", st.Buckets, st.Probes)
			}
		})
	}
}

// bucketLister lists fixed buckets; any other is missing.
type bucketLister struct {
	buckets map[string][]object.Attrs
	fail    error // returned by every listing if set
}

func (l *bucketLister) List(_ context.Context, bucket, _ string) iter.Seq2[object.Attrs, error] {
	return func(yield func(object.Attrs, error) bool) {
		if l.fail != nil {
			yield(object.Attrs{}, l.fail)
			return
		}
		as, ok := l.buckets[bucket]
		if !ok {
			yield(object.Attrs{}, object.ErrNotFound)
			return
		}
		for _, a := range as {
			if !yield(a, nil) {
				return
			}
		}
	}
}

// TestDynamicBucketLookup checks the rules of a dynamic mount's bucket
// lookups without mounting: validation, the existence check, the negative
// cache and its expiry, and failures that are not cached.
func TestDynamicBucketLookup(t *testing.T) {
	ctx := context.Background()
	src := &bucketLister{buckets: map[string][]object.Attrs{
		"full":  {{Object: object.Object{Bucket: "full", Name: "a", Generation: 1}}},
		"empty": nil,
	}}
	lister := newCountingLister(src)
	f, err := New(Config{Cache: fakeCache{}, Source: lister, ListTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1e9, 0)}
	f.now = clk.now

	for _, name := range []string{"", ".", "..", "a/b", "a\x00bc", strings.Repeat("x", 300), ".Trash-0", "UPPER"} {
		if _, en := f.bucket(ctx, name); en != syscall.ENOENT {
			t.Errorf("bucket(%.40q) = %v; want ENOENT", name, en)
		}
	}
	if n := lister.total(); n != 0 {
		t.Errorf("invalid names caused %d listings; want none", n)
	}
	for _, name := range []string{"full", "empty", "full"} {
		if b, en := f.bucket(ctx, name); en != 0 || b.name != name || !slices.Equal(b.prefixes, []string{""}) {
			t.Errorf("bucket(%q) = %+v, %v; want the whole bucket", name, b, en)
		}
	}
	if lister.count("full") != 1 || lister.count("empty") != 1 {
		t.Errorf("listings: full %d, empty %d; want 1 each", lister.count("full"), lister.count("empty"))
	}
	if got := f.bucketNames(); !slices.Equal(got, []string{"empty", "full"}) {
		t.Errorf("bucketNames() = %q", got)
	}

	for range 2 {
		if _, en := f.bucket(ctx, "gone"); en != syscall.ENOENT {
			t.Errorf("bucket(gone) = %v; want ENOENT", en)
		}
	}
	if n := lister.count("gone"); n != 1 {
		t.Errorf("missing bucket listed %d times; want 1", n)
	}
	src.buckets["gone"] = nil // created meanwhile
	clk.advance(time.Minute)
	if _, en := f.bucket(ctx, "gone"); en != 0 || lister.count("gone") != 2 {
		t.Errorf("bucket(gone) after the negative TTL = %v after %d listings; want found after 2", en, lister.count("gone"))
	}

	src.fail = errors.New("network down")
	for range 2 {
		if _, en := f.bucket(ctx, "flaky"); en != syscall.EIO {
			t.Errorf("bucket(flaky) while listing fails = %v; want EIO", en)
		}
	}
	if n := lister.count("flaky"); n != 2 {
		t.Errorf("failing bucket listed %d times; want 2 (failures are not cached)", n)
	}
	src.fail, src.buckets["flaky"] = nil, nil
	if _, en := f.bucket(ctx, "flaky"); en != 0 {
		t.Errorf("bucket(flaky) once listing works = %v", en)
	}
	if st := f.Stats(); st.Buckets != 4 || st.Probes != 7 {
		t.Errorf("Buckets = %d, Probes = %d; want 4 and 7", st.Buckets, st.Probes)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestMissingBucketsBounded fills the negative cache past its bound.
func TestMissingBucketsBounded(t *testing.T) {
	f, err := New(Config{Cache: fakeCache{}, Source: &bucketLister{}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxMissing + 10 {
		name := fmt.Sprintf("missing-%d", i)
		if _, en := f.bucket(context.Background(), name); en != syscall.ENOENT {
			t.Fatalf("bucket(%q) = %v", name, en)
		}
	}
	f.mu.Lock()
	n := len(f.missing)
	f.mu.Unlock()
	if n > maxMissing {
		t.Errorf("%d missing buckets remembered; want at most %d", n, maxMissing)
	}
}

// TestNewGenerationAfterTTL overwrites an object under a mount whose
// kernel caches entries for the listing TTL and attributes for ever: once
// the TTL has passed, the path reads the new generation, a new inode, in
// every read mode (in a dynamic mount and under a configured root).
func TestNewGenerationAfterTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	for _, dynamic := range []bool{false, true} {
		for _, m := range modes {
			name := m.name + "/root"
			if dynamic {
				name = m.name + "/dynamic"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "x", []byte("old"))}}, fetch.Config{})
				cfg := e.config(Root{Bucket: "data"})
				if dynamic {
					cfg = e.config()
				}
				cfg.ListTTL = ttl
				m.apply(&cfg)
				srv, mp := e.mount(t, cfg, nil)
				path := filepath.Join(mp, "data", "x")
				for range 2 { // the second read is served from the kernel's caches
					if got, err := os.ReadFile(path); err != nil || string(got) != "old" {
						t.Fatalf("read: %q, %v; want old", got, err)
					}
				}
				gen, err := e.emu.Put("data", "x", []byte("new!"))
				if err != nil {
					t.Fatal(err)
				}
				// The behaviour under test: entries expire after the TTL.
				// The kernel counts it in jiffies, rounding up: allow for it.
				<-time.After(ttl + ttl/2)
				got, err := os.ReadFile(path)
				if err != nil || !bytes.Equal(got, []byte("new!")) {
					t.Fatalf("read after the TTL: %q, %v; want the new generation (%+v)", got, err, srv.Stats())
				}
				if ino := inode(t, path); ino != fileIno("data", "x", gen) {
					t.Errorf("inode %d; want the new generation's %d", ino, fileIno("data", "x", gen))
				}
			})
		}
	}
}

// TestNegativeEntryTimeout checks how long the kernel keeps a failed
// lookup: for the listing TTL (for ever if that is negative), except that
// in a dynamic mount a missing bucket name must be looked up again once
// it is no longer believed missing (after the TTL, or DefaultListTTL if
// the TTL is for ever). The kernel's timeout cannot be waited out here (a
// minute), so this checks what the mount tells it.
func TestNegativeEntryTimeout(t *testing.T) {
	for _, tc := range []struct {
		ttl     time.Duration
		dynamic bool
		want    time.Duration
	}{
		{-1, false, forever},
		{time.Hour, false, time.Hour},
		{-1, true, DefaultListTTL},
		{0, true, DefaultListTTL},
		{time.Second, true, time.Second},
		{time.Hour, true, time.Hour},
	} {
		cfg := Config{Cache: fakeCache{}, Source: &bucketLister{}, ListTTL: tc.ttl}
		if !tc.dynamic {
			cfg.Roots = []Root{{Bucket: "b"}}
		}
		f, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := *f.options().NegativeTimeout; got != tc.want {
			t.Errorf("ListTTL %v, dynamic %v: negative timeout %v; want %v", tc.ttl, tc.dynamic, got, tc.want)
		}
	}
}
