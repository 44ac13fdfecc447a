package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
)

// copyBuffer is the size of each download stream's copy buffer.
const copyBuffer = 1 << 20

// localPath returns where object o lives under root: root/BUCKET/NAME. Names
// that would leave root are errors.
func localPath(root string, o object.Object) (string, error) {
	rel := filepath.Join(o.Bucket, filepath.FromSlash(o.Name))
	if o.Bucket == "" || o.Name == "" || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("object %s has no safe local path", o)
	}
	return filepath.Join(root, rel), nil
}

// copyAll downloads every object whole into the writer dst opens for it,
// conns at a time, one stream each: what `gcloud storage cp -r` does with
// objects below its sliced-download threshold.
func copyAll(ctx context.Context, src object.Source, objs []object.Attrs, conns int,
	dst func(object.Attrs) (io.WriteCloser, error)) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(conns)
	for _, a := range objs {
		g.Go(func() error { return copyOne(ctx, src, a, dst) })
	}
	return g.Wait()
}

// copyOne downloads one object into the writer dst opens for it.
func copyOne(ctx context.Context, src object.Source, a object.Attrs, dst func(object.Attrs) (io.WriteCloser, error)) (err error) {
	r, err := src.NewRangeReader(ctx, a.Object, 0, a.Size)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := dst(a)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}()
	n, err := io.CopyBuffer(struct{ io.Writer }{w}, r, make([]byte, copyBuffer))
	if err != nil {
		return fmt.Errorf("copy %s: %w", a.Object, err)
	}
	if n != a.Size {
		return fmt.Errorf("copy %s: %d of %d bytes", a.Object, n, a.Size)
	}
	return nil
}

// toFiles opens each object's local file under root for copyAll.
func toFiles(root string) func(object.Attrs) (io.WriteCloser, error) {
	return func(a object.Attrs) (io.WriteCloser, error) {
		p, err := localPath(root, a.Object)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		return os.Create(p)
	}
}

// discard drops every object's bytes, for copyAll.
func discard(object.Attrs) (io.WriteCloser, error) { return nopCloser{io.Discard}, nil }

// nopCloser adds a no-op Close to a Writer.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// localFiles is an mmapstore.Opener over plain files laid out as
// root/BUCKET/NAME, so download-then-read maps its files exactly as the
// agent maps its cached copies. Generations are ignored.
type localFiles struct{ root string }

var _ mmapstore.Opener[mmapstore.File] = localFiles{}

// Open implements mmapstore.Opener.
func (lf localFiles) Open(_ context.Context, o object.Object) (mmapstore.File, error) {
	p, err := localPath(lf.root, o)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	return localFile{path: p, attrs: object.Attrs{Object: o, Size: fi.Size()}}, nil
}

// localFile is an mmapstore.File on a plain file that never goes stale.
type localFile struct {
	path  string
	attrs object.Attrs
}

func (f localFile) Path() string        { return f.path }
func (f localFile) Offset() int64       { return 0 }
func (f localFile) Size() int64         { return f.attrs.Size }
func (f localFile) Attrs() object.Attrs { return f.attrs }
func (f localFile) Stale() bool         { return false }
func (f localFile) Close() error        { return nil }
