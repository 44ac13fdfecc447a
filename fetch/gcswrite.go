package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/cacheagent/cacheagent/object"
)

// Writes, for checkpoints. Every write is conditional on the object not
// existing (ifGenerationMatch=0), so nothing already in the bucket is ever
// replaced: a write that finds the object fails with object.ErrExists. The
// client retries writes only because of that precondition (the storage
// client retries conditional writes on 429, 5xx and resets; unconditional
// ones never).

// WriteOptions are the object's properties a write sets and checks.
type WriteOptions struct {
	// CRC32C is the bytes' Castagnoli CRC: sent with the upload, so GCS
	// refuses a body that does not match it, and checked against the
	// object written (a composite's CRC is its parts' combined).
	CRC32C uint32
	// Metadata is the object's custom metadata (x-goog-meta-*).
	Metadata map[string]string
	// ChunkSize is the resumable upload's chunk: 0 sends the object in one
	// multipart request (small objects); otherwise a resumable upload in
	// chunks of this many bytes, each retried alone.
	ChunkSize int
}

// Create writes the object o (its generation ignored) from r, which must
// yield exactly size bytes, if o does not exist yet. It returns the
// attributes of the generation written.
func (g *GCS) Create(ctx context.Context, o object.Object, r io.Reader, size int64, opt WriteOptions) (object.Attrs, error) {
	if err := checkGCSObject(o.Bucket, o.Name); err != nil {
		return object.Attrs{}, fmt.Errorf("create %s: %w", o, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := g.client.Bucket(o.Bucket).Object(o.Name).If(storage.Conditions{DoesNotExist: true}).NewWriter(wctx)
	w.ChunkSize = opt.ChunkSize
	w.CRC32C, w.SendCRC32C = opt.CRC32C, true
	w.Metadata = opt.Metadata
	w.ContentType = "application/octet-stream"
	n, err := io.Copy(w, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%d of %d bytes: %w", n, size, object.ErrShortRead)
	}
	if err != nil {
		cancel() // abandons the upload: nothing is written
		w.Close()
		return object.Attrs{}, fmt.Errorf("create %s: %w", o, mapWriteErr(err))
	}
	if err := w.Close(); err != nil {
		return object.Attrs{}, fmt.Errorf("create %s: %w", o, mapWriteErr(err))
	}
	return checkWritten(o, gcsAttrs(w.Attrs()), size, opt.CRC32C)
}

// Compose writes o (its generation ignored), if it does not exist yet, as
// the concatenation of parts (at most 32, each pinned to its generation
// when it has one), and returns the attributes of the generation written.
// size and opt.CRC32C are the whole's, checked against the result.
func (g *GCS) Compose(ctx context.Context, o object.Object, parts []object.Object, size int64, opt WriteOptions) (object.Attrs, error) {
	if err := checkGCSObject(o.Bucket, o.Name); err != nil {
		return object.Attrs{}, fmt.Errorf("compose %s: %w", o, err)
	}
	srcs := make([]*storage.ObjectHandle, len(parts))
	for i, p := range parts {
		if p.Bucket != o.Bucket {
			return object.Attrs{}, fmt.Errorf("compose %s: part %s is in another bucket: %w", o, p, object.ErrInvalidName)
		}
		srcs[i] = g.handle(p)
	}
	c := g.client.Bucket(o.Bucket).Object(o.Name).If(storage.Conditions{DoesNotExist: true}).ComposerFrom(srcs...)
	c.Metadata = opt.Metadata
	c.ContentType = "application/octet-stream"
	oa, err := c.Run(ctx)
	if err != nil {
		return object.Attrs{}, fmt.Errorf("compose %s: %w", o, mapWriteErr(err))
	}
	return checkWritten(o, gcsAttrs(oa), size, opt.CRC32C)
}

// checkWritten checks the attributes of a written object against what was
// meant to be written.
func checkWritten(o object.Object, a object.Attrs, size int64, crc uint32) (object.Attrs, error) {
	switch {
	case a.Size != size:
		return a, fmt.Errorf("write %s: the object written has %d bytes, want %d: %w", o, a.Size, size, object.ErrShortRead)
	case a.CRC32C != crc:
		return a, fmt.Errorf("write %s: the object written has CRC32C %08x, want %08x: %w", o, a.CRC32C, crc, object.ErrChecksum)
	}
	return a, nil
}

// Delete deletes o: its generation o.Generation when set (so a newer
// generation written since is left alone), else the live one. A missing
// object is object.ErrNotFound.
func (g *GCS) Delete(ctx context.Context, o object.Object) error {
	if err := checkGCSObject(o.Bucket, o.Name); err != nil {
		return fmt.Errorf("delete %s: %w", o, err)
	}
	if err := g.handle(o).Delete(ctx); err != nil {
		return fmt.Errorf("delete %s: %w", o, mapNotFound(err))
	}
	return nil
}

// Metadata returns o's attributes (as Stat) and its custom metadata.
func (g *GCS) Metadata(ctx context.Context, o object.Object) (object.Attrs, map[string]string, error) {
	if err := checkGCSObject(o.Bucket, o.Name); err != nil {
		return object.Attrs{}, nil, fmt.Errorf("stat %s: %w", o, err)
	}
	oa, err := g.handle(o).Attrs(ctx)
	if err != nil {
		return object.Attrs{}, nil, fmt.Errorf("stat %s: %w", o, mapNotFound(err))
	}
	return gcsAttrs(oa), oa.Metadata, nil
}

// BucketExists reports object.ErrNotFound if bucket does not exist, or the
// error (permission, network) that kept it from finding out.
func (g *GCS) BucketExists(ctx context.Context, bucket string) error {
	if err := checkGCSBucket(bucket); err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, err)
	}
	if _, err := g.client.Bucket(bucket).Attrs(ctx); err != nil {
		return fmt.Errorf("bucket %s: %w", bucket, mapNotFound(err))
	}
	return nil
}

// mapWriteErr adds object.ErrExists to a failed DoesNotExist precondition
// (412), and object.ErrNotFound to a missing bucket or part.
func mapWriteErr(err error) error {
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch ge.Code {
		case http.StatusPreconditionFailed:
			return fmt.Errorf("%w: %w", object.ErrExists, err)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %w", object.ErrNotFound, err)
		}
	}
	return mapNotFound(err)
}
