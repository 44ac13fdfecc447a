package fetch

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
)

// TestGCSWrites writes through the emulator: a multipart create, a
// resumable one, a compose of both, preconditions, metadata, a wrong CRC32C
// refused, a generation-pinned delete, and a missing bucket.
func TestGCSWrites(t *testing.T) {
	ctx := context.Background()
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	g := newTestGCS(t, s.Endpoint())
	crc := func(b []byte) uint32 { return crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) }
	small, big := bytes.Repeat([]byte("ab"), 1000), emulator.Pattern(7, 3<<20+5)
	meta := map[string]string{"cacheagent-save": "s1"}
	a1, err := g.Create(ctx, object.Object{Bucket: "bkt", Name: "p/a"}, bytes.NewReader(small), int64(len(small)),
		WriteOptions{CRC32C: crc(small), Metadata: meta})
	if err != nil || a1.Generation == 0 || a1.Size != int64(len(small)) {
		t.Fatalf("Create multipart: %+v, %v", a1, err)
	}
	a2, err := g.Create(ctx, object.Object{Bucket: "bkt", Name: "p/b"}, bytes.NewReader(big), int64(len(big)),
		WriteOptions{CRC32C: crc(big), ChunkSize: 1 << 20})
	if err != nil || a2.CRC32C != crc(big) {
		t.Fatalf("Create resumable: %+v, %v", a2, err)
	}
	// Nothing existing is replaced.
	if _, err := g.Create(ctx, a1.Object, bytes.NewReader(small), int64(len(small)), WriteOptions{CRC32C: crc(small)}); !errors.Is(err, object.ErrExists) {
		t.Errorf("Create over an object = %v; want ErrExists", err)
	}
	// A body that does not match its CRC32C is refused.
	if _, err := g.Create(ctx, object.Object{Bucket: "bkt", Name: "p/bad"}, bytes.NewReader(small), int64(len(small)),
		WriteOptions{CRC32C: crc(small) + 1}); err == nil {
		t.Error("Create with a wrong CRC32C succeeded")
	}
	whole := append(bytes.Clone(small), big...)
	c, err := g.Compose(ctx, object.Object{Bucket: "bkt", Name: "p/c"}, []object.Object{a1.Object, a2.Object},
		int64(len(whole)), WriteOptions{CRC32C: crc(whole), Metadata: meta})
	if err != nil {
		t.Fatalf("Compose: %v", err)
	}
	if _, err := g.Compose(ctx, c.Object, []object.Object{a1.Object}, int64(len(small)), WriteOptions{CRC32C: crc(small)}); !errors.Is(err, object.ErrExists) {
		t.Errorf("Compose over an object = %v; want ErrExists", err)
	}
	got, md, err := g.Metadata(ctx, object.Object{Bucket: "bkt", Name: "p/c"})
	if err != nil || got.Generation != c.Generation || md["cacheagent-save"] != "s1" {
		t.Errorf("Metadata = %+v, %v, %v", got, md, err)
	}
	// A pinned delete of an old generation leaves the live one alone.
	if err := g.Delete(ctx, object.Object{Bucket: "bkt", Name: "p/a", Generation: a1.Generation + 12345}); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Delete of another generation = %v; want ErrNotFound", err)
	}
	if err := g.Delete(ctx, a1.Object); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := g.Stat(ctx, object.Object{Bucket: "bkt", Name: "p/a"}); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Stat after Delete = %v; want ErrNotFound", err)
	}
	if err := g.BucketExists(ctx, "bkt"); err != nil {
		t.Errorf("BucketExists(bkt) = %v", err)
	}
	if err := g.BucketExists(ctx, "nosuchbucket"); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("BucketExists(nosuchbucket) = %v; want ErrNotFound", err)
	}
	if _, err := g.Create(ctx, object.Object{Bucket: "nosuchbucket", Name: "x"}, bytes.NewReader(small), int64(len(small)),
		WriteOptions{CRC32C: crc(small)}); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Create in a missing bucket = %v; want ErrNotFound", err)
	}
}
