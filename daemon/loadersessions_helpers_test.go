package daemon

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// loaderEnv makes the test binary a loader session client (see
// holdLoader): $CACHEAGENT_TEST_LOADER is "SOCKET|REQUEST-JSON".
const loaderEnv = "CACHEAGENT_TEST_LOADER"

func TestMain(m *testing.M) {
	if arg := os.Getenv(loaderEnv); arg != "" {
		os.Exit(holdLoader(arg))
	}
	os.Exit(m.Run())
}

// holdLoader is the test binary acting as a trainer: it opens a loader
// session, takes its first batch, prints "ready" and holds everything
// until killed or its stdin closes.
func holdLoader(arg string) int {
	sock, body, ok := bytes.Cut([]byte(arg), []byte("|"))
	var req spec.Spec
	if !ok || json.Unmarshal(body, &req) != nil {
		fmt.Fprintln(os.Stderr, "bad", loaderEnv)
		return 2
	}
	ctx := context.Background()
	c, err := control.Dial(ctx, string(sock))
	if err == nil {
		var lc *control.LoaderConn
		if lc, err = c.OpenLoader(ctx, req); err == nil {
			if _, err = lc.Recv(ctx); err == nil {
				fmt.Println("ready")
				os.Stdin.Read(make([]byte, 1)) // hold until killed or stdin closes
				return 0
			}
		}
	}
	fmt.Fprintln(os.Stderr, "hold loader:", err)
	return 1
}

// testData is the synthetic dataset of the loader session tests: shards of
// uneven sizes, rows of 24 bytes.
var testData = synth.Dataset{Rows: []int{50, 30, 41, 7}, RowBytes: 24}

// loaderDaemon starts a daemon over an emulator holding testData under
// gs://bkt/train/, and a client.
func loaderDaemon(t *testing.T) (*Daemon, *control.Client) {
	t.Helper()
	var objs []fakestorage.Object
	testData.Write("train/", func(name string, data []byte) error {
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: name},
			Content: data})
		return nil
	})
	emu := startEmulator(t, objs)
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	return d, dial(t, d)
}

// baseRequest reads testData with a global shuffle across 2 ranks.
func baseRequest() spec.Spec {
	return spec.Spec{Data: "gs://bkt/train/", Pattern: synth.Pattern, BatchSize: 8, Shuffle: "global",
		Seed: 3, Epochs: 2, Rank: 1, World: 2, Prefetch: 3}
}

// wantBatches returns the batches a loader with req's settings returns.
func wantBatches(t *testing.T, d *Daemon, req spec.Spec) []loader.BatchIDs {
	t.Helper()
	ds, err := loader.FromPattern(testCtx(t), d.src, "bkt", "train/", synth.Pattern)
	if err != nil {
		t.Fatal(err)
	}
	mode, _ := sampler.ParseMode(req.Shuffle)
	cfg := loader.Config{Dataset: ds, BatchSize: req.BatchSize, Shuffle: mode, Seed: req.Seed, Epoch: req.Epoch,
		Epochs: req.Epochs, Rank: req.Rank, World: req.World, DropLast: req.DropLast}
	if r := req.Resume; r != nil {
		cfg.Resume = &loader.State{Epoch: r.Epoch, Batch: r.Batch, Fingerprint: r.Fingerprint}
	}
	if mode == sampler.Node {
		node := -1
		if req.Node != nil {
			node = *req.Node
		}
		if cfg.Nodes, cfg.Node, err = sampler.Place(req.Rank, req.World, req.RanksPerNode, req.Nodes, node); err != nil {
			t.Fatal(err)
		}
	}
	return allIDs(t, cfg)
}

// allIDs returns every batch's ids of a loader of cfg.
func allIDs(t *testing.T, cfg loader.Config) []loader.BatchIDs {
	t.Helper()
	seq, err := loader.IDs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var out []loader.BatchIDs
	for b := range seq {
		b.IDs = slices.Clone(b.IDs)
		out = append(out, b)
	}
	return out
}

// recv receives the next message of lc.
func recv(t *testing.T, lc *control.LoaderConn) any {
	t.Helper()
	m, err := lc.Recv(testCtx(t))
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	return m
}

// recvReady receives the next message, which must be a Ready.
func recvReady(t *testing.T, lc *control.LoaderConn) ring.Ready {
	t.Helper()
	m := recv(t, lc)
	r, ok := m.(ring.Ready)
	if !ok {
		t.Fatalf("got %#v; want a Ready", m)
	}
	return r
}

// checkBatch checks the batch a Ready announces against want: the header,
// the ids, and every row of x and y against the synthetic data.
func checkBatch(t *testing.T, lc *control.LoaderConn, r ring.Ready, want loader.BatchIDs) {
	t.Helper()
	if r.Epoch != int64(want.Epoch) || r.Index != int64(want.Index) || int(r.N) != len(want.IDs) {
		t.Fatalf("Ready %+v; want epoch %d batch %d of %d samples", r, want.Epoch, want.Index, len(want.IDs))
	}
	h, descs, err := lc.Batch(r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != r.Seq || h.Epoch != r.Epoch || h.Index != r.Index || h.Samples != int(r.N) || h.State != ring.StateReady {
		t.Fatalf("slot header %+v for %+v", h, r)
	}
	slot := lc.Slot(int(r.Slot))
	arrays := lc.Info.Arrays
	row := make([]byte, testData.RowBytes)
	for _, dsc := range descs {
		data := slot[dsc.Offset : dsc.Offset+dsc.NBytes]
		switch name := arrays[dsc.Name].Name; name {
		case "x":
			for i, id := range want.IDs {
				synth.FillRow(row, id)
				if got := data[i*len(row) : (i+1)*len(row)]; !bytes.Equal(got, row) {
					t.Fatalf("batch %d/%d: x row %d = %x; want sample %d's %x", want.Epoch, want.Index, i, got, id, row)
				}
			}
		case "y", "ids":
			for i, id := range want.IDs {
				if got := int64(binary.LittleEndian.Uint64(data[8*i:])); got != id {
					t.Fatalf("batch %d/%d: %s[%d] = %d; want %d", want.Epoch, want.Index, name, i, got, id)
				}
			}
		default:
			t.Fatalf("unexpected array %q", name)
		}
	}
}

// waitSessions polls the status until it counts n loader sessions,
// failing after within.
func waitSessions(t *testing.T, c *control.Client, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, err := c.Status(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if st.LoaderSessions == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d loader sessions after %v; want %d", st.LoaderSessions, within, n)
		}
		t.Log("waiting for", n, "loader sessions; have", st.LoaderSessions) // poll: nothing to wait on across processes
		<-time.After(10 * time.Millisecond)
	}
}

// eachBatch reads a session to its End, passing batch i to fn and then
// releasing it; it fails the test unless the session has exactly n
// batches.
func eachBatch(t *testing.T, lc *control.LoaderConn, n int, fn func(i int, m ring.Ready)) {
	t.Helper()
	for i := 0; ; {
		switch m := recv(t, lc).(type) {
		case ring.Ready:
			if i >= n {
				t.Fatalf("batch %d: more batches than the loader's %d", i, n)
			}
			fn(i, m)
			i++
			if err := lc.Release(m); err != nil {
				t.Fatal(err)
			}
		case ring.EpochEnd:
		case ring.End:
			if i != n {
				t.Fatalf("End after %d batches; want %d", i, n)
			}
			return
		default:
			t.Fatalf("unexpected %#v", m)
		}
	}
}
