package tier

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// heldReads is a source whose range reads each announce their object and
// then wait for open to close: fills stay in progress until the test lets
// them go.
type heldReads struct {
	object.Source
	open   chan struct{}
	starts chan string
}

func (s *heldReads) NewRangeReader(ctx context.Context, o object.Object, off, n int64) (io.ReadCloser, error) {
	select {
	case s.starts <- o.Name:
	default:
	}
	select {
	case <-s.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Source.NewRangeReader(ctx, o, off, n)
}

// listedEnv is a planned directory of objects whose fills are held:
// names[i] holds want[i] (the live bytes), and src counts Stat calls.
type listedEnv struct {
	c     *Cache
	src   *listingSource
	reads *heldReads
	objs  []object.Object
	want  [][]byte
}

// newListedEnv puts 3*planListMin objects in one directory (stale, if
// true, makes the listing yield a generation replaced since), plans them
// and returns once the planner's first fill is held in its range read.
func newListedEnv(t *testing.T, stale bool) *listedEnv {
	e := newDirEnv(t)
	env := &listedEnv{}
	var old []object.Attrs
	for i := range 3 * planListMin {
		name := fmt.Sprintf("d/%02d", i)
		data := pattern(i+1, objSize)
		a := e.put(t, "bkt", name, data)
		if stale {
			old = append(old, a)
			data = pattern(100+i, objSize)
			e.put(t, "bkt", name, data)
		}
		env.objs, env.want = append(env.objs, obj("bkt", name)), append(env.want, data)
	}
	env.src = &listingSource{Source: e.src, stale: old}
	env.reads = &heldReads{Source: e.src, open: make(chan struct{}), starts: make(chan string, 1)}
	cfg := e.packConfig(t.TempDir(), 0)
	cfg.Source, cfg.Downloader = env.src, newDownloader(t, env.reads)
	env.c = openCache(t, cfg)
	if err := env.c.Plan(context.Background(), "p", env.objs); err != nil {
		t.Fatal(err)
	}
	<-env.reads.starts // the directory is listed and its fills started
	return env
}

// openAll opens every object on its own goroutine, lets the held fills go
// once every Open has started, and checks that each read its live bytes.
func (env *listedEnv) openAll(t *testing.T) {
	var started, wg sync.WaitGroup
	for i, o := range env.objs {
		started.Add(1)
		wg.Go(func() {
			started.Done()
			h, err := env.c.Open(context.Background(), o)
			if err != nil {
				t.Errorf("Open(%s): %v", o.Name, err)
				return
			}
			defer h.Close()
			if got := readAll(t, h); !bytes.Equal(got, env.want[i]) {
				t.Errorf("%s: read %d bytes, not the live generation's", o.Name, len(got))
			}
		})
	}
	started.Wait()
	close(env.reads.open)
	wg.Wait()
}

// TestOpenJoinsListedFill: Opens of planned objects that reach them before
// their fills end take their attributes from the directory's listing and
// join the planner's fills, with no Stat of their own.
func TestOpenJoinsListedFill(t *testing.T) {
	env := newListedEnv(t, false)
	env.openAll(t)
	if stats, lists := env.src.counts(); stats != 0 || lists != 1 {
		t.Errorf("%d Stat calls and %d listings; want none and one", stats, lists)
	}
	checkInvariants(t, env.c)
}

// TestOpenListedGenerationGone: an Open whose listed generation was
// replaced since the listing stats the object and serves the live bytes.
func TestOpenListedGenerationGone(t *testing.T) {
	env := newListedEnv(t, true)
	env.openAll(t)
	if stats, _ := env.src.counts(); stats == 0 {
		t.Error("no Stat call; want the Opens whose listed generation was gone to stat their object")
	}
	checkInvariants(t, env.c)
}
