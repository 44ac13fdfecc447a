package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/api/googleapi"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// TestTruncatedFileFailsSave: a file truncated after the save (through a
// descriptor its writer kept), one uploaded whole or one composed of
// parts, fails the save as changed, naming the file, instead of being
// retried for as long as the store runs.
func TestTruncatedFileFailsSave(t *testing.T) {
	for name, size := range map[string]int{"whole.pt": 100 << 10, "parts.pt": 3 << 20} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t, Config{}, 0)
			g := e.gated()
			dir := e.writeTree(map[string][]byte{name: bytes.Repeat([]byte("w"), size)})
			w, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			u := uri(t, "run/trunc/")
			if _, err := e.store.Save(ctx, dir, u, SaveOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := w.Truncate(10); err != nil {
				t.Fatal(err)
			}
			close(g.gate)
			err = e.waitFor(u, GCS)
			if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), name) {
				t.Fatalf("Wait(gcs) = %v; want ErrFailed naming %s", err, name)
			}
			if st := e.store.Status(u); len(st) != 1 || !strings.Contains(st[0].Error, "changed") {
				t.Errorf("status %+v; want the save failed as changed", st)
			}
		})
	}
}

// lostCommitBucket is the emulator's bucket whose manifest write succeeds
// but answers 403, as if the commit had failed; the next failStats stats
// of the manifest then fail (503).
type lostCommitBucket struct {
	*fetch.GCS
	mu        sync.Mutex
	failStats int
}

func (b *lostCommitBucket) Create(ctx context.Context, o object.Object, r io.Reader, size int64, opt fetch.WriteOptions) (object.Attrs, error) {
	a, err := b.GCS.Create(ctx, o, r, size, opt)
	if err == nil && strings.HasSuffix(o.Name, "/"+ManifestName) {
		b.mu.Lock()
		b.failStats = 2
		b.mu.Unlock()
		return object.Attrs{}, &googleapi.Error{Code: http.StatusForbidden, Message: "injected: the answer is lost"}
	}
	return a, err
}

func (b *lostCommitBucket) Stat(ctx context.Context, o object.Object) (object.Attrs, error) {
	b.mu.Lock()
	fail := strings.HasSuffix(o.Name, "/"+ManifestName) && b.failStats > 0
	if fail {
		b.failStats--
	}
	b.mu.Unlock()
	if fail {
		return object.Attrs{}, &googleapi.Error{Code: http.StatusServiceUnavailable, Message: "injected"}
	}
	return b.GCS.Stat(ctx, o)
}

// TestFailureKeepsCommittedCheckpoint: a save whose commit seems to fail
// although its manifest was written, and whose first looks for the
// manifest fail too, finds it committed (the looks are retried) and
// adopts it; nothing of the committed checkpoint is deleted.
func TestFailureKeepsCommittedCheckpoint(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, Config{}, 0)
	b := &lostCommitBucket{GCS: e.gcs}
	e.store.Close()
	e.cfg.Bucket = b
	e.open()
	files := dcpFiles()
	u := uri(t, "run/lost/")
	if _, err := e.store.Save(ctx, e.writeTree(files), u, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.waitFor(u, GCS); err != nil {
		t.Fatalf("Wait(gcs) = %v; want the save committed", err)
	}
	m, err := ReadManifest(ctx, e.gcs, u)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(ctx, e.gcs, m, nil); err != nil {
		t.Errorf("the committed checkpoint: %v", err)
	}
}
