package formats_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	wds "github.com/cacheagent/cacheagent/mmapstore/webdataset"
	"github.com/cacheagent/cacheagent/object"
)

// mmapSource is a Source that maps files of a fetch.Dir root read-only,
// as a cache's tier file is mapped, and counts its Acquires: each is one
// scan of a tar's headers when the webdataset format indexes it.
type mmapSource struct {
	root     string
	acquires atomic.Int64
}

func (m *mmapSource) Acquire(_ context.Context, o object.Object) (loader.Lease, error) {
	m.acquires.Add(1)
	f, err := os.Open(filepath.Join(m.root, o.Bucket, filepath.FromSlash(o.Name)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	return mmapLease(b), nil
}

// mmapLease is a mapping lent by mmapSource.
type mmapLease []byte

func (m mmapLease) Array() (array.Array, error) { return array.Array{}, errors.New("not a .npy file") }
func (m mmapLease) Bytes() []byte               { return m }
func (m mmapLease) Release() error              { return unix.Munmap(m) }

// writeSparseTar writes a tar of size bytes (rounded down to whole
// members) of member-byte members, two per sample, at p: the headers as
// archive/tar writes them, the data left as holes, so the file takes
// about 512 bytes of disk per member. It returns the member count.
func writeSparseTar(b *testing.B, p string, size int64, member int) int {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	step := int64(512 + (member+511)/512*512)
	var off int64
	n := 0
	for ; off+step+1024 <= size; off += step {
		name := fmt.Sprintf("%09d.jpg", n/2)
		if n%2 == 1 {
			name = fmt.Sprintf("%09d.seg.png", n/2)
		}
		var h bytes.Buffer
		if err := tar.NewWriter(&h).WriteHeader(&tar.Header{Name: name, Size: int64(member), Mode: 0o644,
			Typeflag: tar.TypeReg}); err != nil {
			b.Fatal(err)
		}
		if _, err := f.WriteAt(h.Bytes(), off); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := f.Truncate(off + 1024); err != nil { // two zero blocks end the archive
		b.Fatal(err)
	}
	return n
}

// BenchmarkTarIndex builds a WebDataset dataset of one 1 GiB tar of 100 KB
// members (sparse: headers on disk, data as holes; the tar mapped from the
// page cache as a cached object would be) from a Dir listing. cold: no
// saved index, so the build maps the tar, scans its ~10,700 headers
// and saves the index (DirIndex, a fresh directory per iteration).
// restart: the index saved by a first build is read and validated instead;
// scans/op counts the tar's Acquires, the only way to read its headers, and
// must be 0.
func BenchmarkTarIndex(b *testing.B) {
	const size, member = 1 << 30, 100_000
	root := b.TempDir()
	members := writeSparseTar(b, filepath.Join(root, "bkt", "wds", "shard-0.tar"), size, member)
	src, err := fetch.NewDir(root)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	ctx := context.Background()
	build := func(b *testing.B, idx loader.IndexCache, records *mmapSource) {
		ds, err := loader.ResolveDataset(ctx, spec.Spec{Data: "gs://bkt/wds/", Pattern: "shard-*.tar"},
			loader.Env{Source: src, Records: records, Index: idx, Formats: formats.All})
		if err != nil {
			b.Fatal(err)
		}
		if got := len(ds.Groups[0].Index.(*wds.Shard).Members()); got != members {
			b.Fatalf("%d members indexed; wrote %d", got, members)
		}
	}
	saved := filepath.Join(b.TempDir(), "wds-index")
	build(b, loader.DirIndex(saved), &mmapSource{root: root}) // the first run: what restart finds
	b.Run("cold", func(b *testing.B) {
		records := &mmapSource{root: root}
		dirs := b.TempDir()
		i := 0
		for b.Loop() {
			build(b, loader.DirIndex(filepath.Join(dirs, strconv.Itoa(i))), records)
			i++
		}
		b.ReportMetric(float64(members), "headers")
		b.ReportMetric(float64(records.acquires.Load())/float64(b.N), "scans/op")
	})
	b.Run("restart", func(b *testing.B) {
		records := &mmapSource{root: root}
		for b.Loop() {
			build(b, loader.DirIndex(saved), records)
		}
		files, _ := filepath.Glob(filepath.Join(saved, "*.wdsidx"))
		if len(files) != 1 {
			b.Fatalf("%d saved indexes", len(files))
		}
		fi, err := os.Stat(files[0])
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size()), "index-bytes")
		b.ReportMetric(float64(records.acquires.Load())/float64(b.N), "scans/op")
		if n := records.acquires.Load(); n != 0 {
			b.Fatalf("the tar was acquired %d times on restart; want 0 (no rescan)", n)
		}
	})
}
