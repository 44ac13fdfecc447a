package fetch

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// laneEnv is a gated directory source holding an object above the small
// size and one below it, and a one-connection Downloader over it.
type laneEnv struct {
	src        *gatedSource
	d          *Downloader
	big, small object.Attrs
	bigData    []byte
	smallData  []byte
}

func newLaneEnv(t *testing.T, cfg Config) *laneEnv {
	t.Helper()
	dir, root := newTestDir(t)
	e := &laneEnv{bigData: emulator.Pattern(1, 3<<20), smallData: emulator.Pattern(2, 16<<10)}
	writeFile(t, root, "b/big", e.bigData, t0)
	writeFile(t, root, "b/small", e.smallData, t0)
	stat := func(name string, data []byte) object.Attrs {
		a, err := dir.Stat(context.Background(), object.Object{Bucket: "b", Name: name})
		if err != nil {
			t.Fatal(err)
		}
		return withCRC(a, data)
	}
	e.big, e.small = stat("big", e.bigData), stat("small", e.smallData)
	e.src = newGatedSource(dir)
	cfg.SliceSize = 64 << 20 // each object one range
	cfg.SmallObjectSize = cmp.Or(cfg.SmallObjectSize, 1<<20)
	e.d = newDownloader(t, e.src, cfg)
	return e
}

// fetchAsync starts a Fetch of a and returns its contents and error.
func (e *laneEnv) fetchAsync(t *testing.T, a object.Attrs) (<-chan []byte, <-chan error) {
	got := make(chan []byte, 1)
	errc := async(t, func() error {
		b, err := fetchFile(t, e.d, a, nil)
		got <- b
		return err
	})
	return got, errc
}

// waitStats polls the Downloader's gauges until ok accepts them.
func (e *laneEnv) waitStats(t *testing.T, what string, ok func(stats.Fetch) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(e.d.Stats()); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: stats %+v", what, e.d.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// A small object's read starts while the only connection is held by a
// large object's, on the lane beside it, and both complete intact.
func TestSmallLaneBesideBusyConnections(t *testing.T) {
	cfg := fastConfig()
	cfg.Connections = 1
	e := newLaneEnv(t, cfg)
	bigGot, bigErr := e.fetchAsync(t, e.big)
	if o := <-e.src.opened; o.Name != "big" {
		t.Fatalf("first read of %q; want big", o.Name)
	}
	smallGot, smallErr := e.fetchAsync(t, e.small)
	select {
	case o := <-e.src.opened:
		if o.Name != "small" {
			t.Fatalf("second read of %q; want small", o.Name)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the small object's read did not start beside the held connection: stats %+v", e.d.Stats())
	}
	if st := e.d.Stats(); st.ConnsInUse != 1 || st.SmallConnsInUse != 1 || st.WaitingSlices != 0 {
		t.Errorf("both reads open: stats %+v; want 1 conn, 1 small conn, none waiting", st)
	}
	e.src.gate <- struct{}{}
	e.src.gate <- struct{}{}
	if err := <-smallErr; err != nil {
		t.Fatalf("small: %v", err)
	}
	checkBytes(t, "small", <-smallGot, e.smallData)
	if err := <-bigErr; err != nil {
		t.Fatalf("big: %v", err)
	}
	checkBytes(t, "big", <-bigGot, e.bigData)
	checkNoFetchGoroutines(t)
	if st := e.d.Stats(); st.ConnsInUse != 0 || st.SmallConnsInUse != 0 || st.Splits != 0 {
		t.Errorf("after both: stats %+v; want no conns, no splits", st)
	}
}

// With the lane off, the small object waits for the connection the large
// one holds.
func TestNoSmallLaneWaits(t *testing.T) {
	cfg := fastConfig()
	cfg.Connections = 1
	cfg.SmallObjectSize = NoSmallLane
	e := newLaneEnv(t, cfg)
	bigGot, bigErr := e.fetchAsync(t, e.big)
	<-e.src.opened
	smallGot, smallErr := e.fetchAsync(t, e.small)
	e.waitStats(t, "small object queued", func(s stats.Fetch) bool { return s.WaitingSlices == 1 })
	if st := e.d.Stats(); st.SmallConnsInUse != 0 || st.SmallWaiting != 0 {
		t.Errorf("lane off: stats %+v; want no small-lane use", st)
	}
	e.src.gate <- struct{}{}
	if o := <-e.src.opened; o.Name != "small" {
		t.Fatalf("second read of %q; want small", o.Name)
	}
	e.src.gate <- struct{}{}
	for _, r := range []struct {
		errc <-chan error
		got  <-chan []byte
		want []byte
	}{{bigErr, bigGot, e.bigData}, {smallErr, smallGot, e.smallData}} {
		if err := <-r.errc; err != nil {
			t.Fatal(err)
		}
		checkBytes(t, "object", <-r.got, r.want)
	}
}

// The lane has a budget of its own: a second small object waits for the
// first, whatever the main budget; it follows SetConnections unless set.
func TestSmallLaneBudget(t *testing.T) {
	for _, tc := range []struct {
		name      string
		small     int // Config.SmallConnections
		setConns  int // SetConnections before the fetches (0: none)
		wantLimit int
	}{
		{"default follows connections", 0, 0, 1},
		{"default follows SetConnections", 0, 2, 2},
		{"explicit", 1, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.Connections, cfg.SmallConnections = 1, tc.small
			e := newLaneEnv(t, cfg)
			if tc.setConns > 0 {
				if err := e.d.SetConnections(tc.setConns); err != nil {
					t.Fatal(err)
				}
			}
			// Small objects fill their lane, then borrow the idle main
			// lane's slots; the next one waits for its lane.
			mainLimit := cmp.Or(tc.setConns, cfg.Connections)
			n := tc.wantLimit + mainLimit + 1
			var errs []<-chan error
			for range n {
				_, errc := e.fetchAsync(t, e.small)
				errs = append(errs, errc)
			}
			for range n - 1 {
				<-e.src.opened
			}
			e.waitStats(t, "one small object queued", func(s stats.Fetch) bool {
				return s.SmallConnsInUse == tc.wantLimit && s.ConnsInUse == mainLimit && s.SmallWaiting == 1
			})
			for range n {
				e.src.gate <- struct{}{}
			}
			for _, errc := range errs {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
