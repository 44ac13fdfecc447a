package mount

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// TestOpenAuto mounts, in the default mode, a dataset of small files and
// one where a large file holds most bytes: the first opens (concurrent)
// settle how the mount opens files once, as the rule says, every file
// reads back whole either way, and the mode sticks for later opens.
func TestOpenAuto(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int // the last one is opened last
		want  OpenMode
	}{
		// 16 × 64 KiB and a 1 MiB file: every byte is in small files.
		{"small", append(repeat(16, 64<<10), SmallFileSize), OpenSkip},
		// 16 × 64 KiB and a 3 MiB file: 25 % of the bytes are small.
		{"large", append(repeat(16, 64<<10), 3<<20), OpenAsk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []fakestorage.Object
			for i, size := range tc.sizes {
				objs = append(objs, obj("dset", fmt.Sprintf("f/%02d.bin", i), emulator.Pattern(uint64(i+1), size)))
			}
			e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
			cfg := e.config(Root{Bucket: "dset"})
			cfg.Open = OpenAuto
			srv, mp := e.mount(t, cfg, nil)
			if got := srv.Opening(); got != OpenAuto {
				t.Fatalf("Opening() before any open = %v; want auto", got)
			}
			var wg sync.WaitGroup
			for _, o := range objs[:len(objs)-1] {
				wg.Go(func() { // checkFile may t.Fatal: not from here
					if got, err := os.ReadFile(filepath.Join(mp, "dset", o.Name)); err != nil || !bytes.Equal(got, o.Content) {
						t.Errorf("read %s: %d bytes, %v; want the object's %d", o.Name, len(got), err, len(o.Content))
					}
				})
			}
			wg.Wait()
			if got := srv.Opening(); got != tc.want {
				t.Fatalf("Opening() = %v; want %v", got, tc.want)
			}
			last := objs[len(objs)-1]
			checkFile(t, e, filepath.Join(mp, "dset", last.Name), last)
			if got := srv.Opening(); got != tc.want {
				t.Errorf("Opening() after the last file = %v; want %v still", got, tc.want)
			}
			if n := e.logs.count("decided at the first open", "open", tc.want.String()); n != 1 {
				t.Errorf("%d log records of the decision; want 1", n)
			}
			waitFor(t, "the last RELEASE", func() bool { return srv.Stats().OpenFiles == 0 })
			st := srv.Stats()
			switch tc.want {
			case OpenSkip:
				if st.Opens != 0 || st.Reads == 0 || srv.Passthrough() {
					t.Errorf("skipping opens: %d opens served, %d reads, passthrough %v; want 0, > 0, false",
						st.Opens, st.Reads, srv.Passthrough())
				}
			case OpenAsk:
				if st.Opens != int64(len(objs)) {
					t.Errorf("asking: %d opens served; want %d", st.Opens, len(objs))
				}
			}
		})
	}
}

func repeat(n, size int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = size
	}
	return s
}

func TestOpenModeNames(t *testing.T) {
	for _, m := range []OpenMode{OpenAuto, OpenAsk, OpenSkip} {
		got, err := ParseOpenMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseOpenMode(%q) = %v, %v; want %v", m.String(), got, err, m)
		}
	}
	if got, err := ParseOpenMode(""); err != nil || got != OpenAuto {
		t.Errorf(`ParseOpenMode("") = %v, %v; want auto`, got, err)
	}
	for _, bad := range []string{"Skip", "no", "passthrough", "skip "} {
		if _, err := ParseOpenMode(bad); err == nil {
			t.Errorf("ParseOpenMode(%q): no error", bad)
		}
	}
}

// TestListingBytes checks the byte counts OpenAuto's rule reads.
func TestListingBytes(t *testing.T) {
	b := newBuilder(func(string, string) {})
	for _, a := range []struct {
		name string
		size int64
	}{{"a", 10}, {"d/b", SmallFileSize}, {"d/c", SmallFileSize + 1}, {"d/", 0}, {"a", 99}} {
		b.add(object.Attrs{Object: object.Object{Bucket: "b", Name: a.name}, Size: a.size})
	}
	l := b.build()
	if want := int64(10 + 2*SmallFileSize + 1); l.bytes != want || l.smallBytes != 10+SmallFileSize {
		t.Errorf("bytes %d, small %d; want %d, %d", l.bytes, l.smallBytes, want, 10+SmallFileSize)
	}
}

// TestUnopenedReadAtEOF answers a read without an open file at and past
// the end of a file (with the real cache): the answer is empty and holds
// nothing open, as go-fuse never calls Done on an empty answer. The
// kernel itself sends no such read (it stops reads at the size it was
// given, O_DIRECT ones too), so this calls the handler directly.
func TestUnopenedReadAtEOF(t *testing.T) {
	o := obj("data", "f", []byte("0123456789"))
	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{o}}, fetch.Config{})
	cfg := e.config(Root{Bucket: "data"})
	cfg.Open = OpenSkip
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	a, err := e.src.Stat(ctx, object.Object{Bucket: "data", Name: "f"})
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{a.Size, a.Size + 4096} {
		r, en := f.readUnopened(ctx, f.buckets["data"], a, make([]byte, 4096), off)
		if en != 0 || r.Size() != 0 {
			t.Fatalf("read at %d of %d bytes: %v, %d bytes; want none", off, a.Size, en, r.Size())
		}
		if n := f.Stats().OpenFiles; n != 0 {
			t.Errorf("after an empty read at %d: %d files open; want 0", off, n)
		}
	}
}
