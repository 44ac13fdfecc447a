package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
	"github.com/cacheagent/cacheagent/object"
)

// TestLoaderSession reads two epochs through a session: every batch's ids
// are the loader's for the same settings and its arrays the samples'
// rows; releases let the daemon go on; closing frees the session.
func TestLoaderSession(t *testing.T) {
	d, c := loaderDaemon(t)
	ctx := testCtx(t)
	req := baseRequest()
	want := wantBatches(t, d, req)
	lc, err := c.OpenLoader(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if n := lc.Info.BatchesPerEpoch; n*2 != len(want) || lc.Info.Slots != 3 || lc.Info.Protocol != ring.Protocol {
		t.Fatalf("first line %+v; want %d batches per epoch, 3 slots", lc.Info, len(want)/2)
	}
	if st, _ := c.Status(ctx); st.LoaderSessions != 1 {
		t.Errorf("status counts %d loader sessions; want 1", st.LoaderSessions)
	}
	maps, _ := os.ReadFile("/proc/self/maps")
	if !strings.Contains(string(maps), "/memfd:cacheagent-loader-"+lc.Info.Session) {
		t.Error("the ring is not mapped from a memfd")
	}
	epochEnds := 0
	for i := 0; ; {
		switch m := recv(t, lc).(type) {
		case ring.Ready:
			if i >= len(want) {
				t.Fatalf("batch %d: more batches than the loader's %d", i, len(want))
			}
			checkBatch(t, lc, m, want[i])
			i++
			if err := lc.Release(m); err != nil {
				t.Fatal(err)
			}
		case ring.EpochEnd:
			epochEnds++
			if m.Batches != int64(lc.Info.BatchesPerEpoch) || i != epochEnds*lc.Info.BatchesPerEpoch {
				t.Fatalf("EpochEnd %+v after %d batches", m, i)
			}
		case ring.End:
			if i != len(want) || epochEnds != 2 || m.Epoch != 2 || m.Batch != 0 {
				t.Fatalf("End %+v after %d batches and %d epoch ends; want %d and 2", m, i, epochEnds, len(want))
			}
			if err := lc.Close(); err != nil {
				t.Fatal(err)
			}
			waitSessions(t, c, 0, time.Second)
			if n := d.plans.count(); n != 0 {
				t.Errorf("%d plans after the session; want 0", n)
			}
			return
		default:
			t.Fatalf("unexpected %#v", m)
		}
	}
}

// TestLoaderSessionHold checks that the daemon hands out no more batches
// than slots while the client holds them, and goes on after a release.
func TestLoaderSessionHold(t *testing.T) {
	d, c := loaderDaemon(t)
	ctx := testCtx(t)
	req := baseRequest()
	want := wantBatches(t, d, req)
	lc, err := c.OpenLoader(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	var held []ring.Ready
	for i := range 3 {
		held = append(held, recvReady(t, lc))
		checkBatch(t, lc, held[i], want[i])
	}
	// The loop serves messages in order: with every slot held, the
	// answer to State comes before any other batch.
	lc.Send(ring.StateRequest{})
	if m := recv(t, lc); m != (ring.StateIs{Epoch: 0, Batch: 0, Fingerprint: lc.Info.Start.Fingerprint}) {
		t.Fatalf("with 3 slots held got %#v; want StateIs at batch 0", m)
	}
	lc.Release(held[1]) // out of order: the state stays at the first held
	r := recvReady(t, lc)
	checkBatch(t, lc, r, want[3])
	if r.Slot != held[1].Slot {
		t.Errorf("batch 3 in slot %d; want the released slot %d", r.Slot, held[1].Slot)
	}
	lc.Send(ring.StateRequest{})
	if m := recv(t, lc).(ring.StateIs); m.Batch != 0 {
		t.Errorf("state %+v with batch 0 held; want batch 0", m)
	}
	lc.Release(held[0])
	lc.Release(held[2])
	checkBatch(t, lc, recvReady(t, lc), want[4])
	checkBatch(t, lc, recvReady(t, lc), want[5])
	lc.Send(ring.StateRequest{})
	if m := recv(t, lc).(ring.StateIs); m.Batch != 3 {
		t.Errorf("state %+v holding batches 3-5; want batch 3", m)
	}
}

// TestLoaderSessionResume resumes from a session's state in a new session
// and by Seek, and checks that the ids continue the exact sequence.
func TestLoaderSessionResume(t *testing.T) {
	d, c := loaderDaemon(t)
	ctx := testCtx(t)
	req := baseRequest()
	want := wantBatches(t, d, req)
	lc, err := c.OpenLoader(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	per := lc.Info.BatchesPerEpoch
	k := per + 2 // into the second epoch
	for range k {
		m := recv(t, lc)
		if _, ok := m.(ring.EpochEnd); ok {
			m = recv(t, lc)
		}
		lc.Release(m.(ring.Ready))
	}
	lc.Send(ring.StateRequest{})
	var st ring.StateIs
	for {
		if m, ok := recv(t, lc).(ring.StateIs); ok {
			st = m
			break
		}
	}
	if st.Epoch != 1 || st.Batch != 2 {
		t.Fatalf("state after %d released batches = %+v; want epoch 1 batch 2", k, st)
	}
	lc.Close()

	req.Resume = &spec.State{Epoch: int(st.Epoch), Batch: int(st.Batch), Fingerprint: st.Fingerprint}
	lc2, err := c.OpenLoader(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer lc2.Close()
	for i := k; i < len(want); i++ {
		r := recvReady(t, lc2)
		checkBatch(t, lc2, r, want[i])
		if i == k {
			// Seek back to batch 1 of epoch 0 while holding a slot: no
			// batch comes after the Seek but those already sent, and
			// StateIs answers once every slot is back.
			lc2.Send(ring.Seek{Epoch: 0, Batch: 1000})
			held := []ring.Ready{r}
			for {
				m := recv(t, lc2)
				if e, ok := m.(*ring.Error); ok {
					if e.Code != ring.CodeRefused {
						t.Fatalf("Seek out of range: got %#v; want a refusal", e)
					}
					break
				}
				held = append(held, m.(ring.Ready))
			}
			lc2.Send(ring.Seek{Epoch: 0, Batch: 1})
			for _, r := range held {
				lc2.Release(r)
			}
			for {
				m := recv(t, lc2)
				if s, ok := m.(ring.StateIs); ok {
					if s.Epoch != 0 || s.Batch != 1 {
						t.Fatalf("Seek answered %+v", s)
					}
					break
				}
				lc2.Release(m.(ring.Ready)) // sent before the Seek came
			}
			for j := 1; j < 4; j++ {
				r := recvReady(t, lc2)
				checkBatch(t, lc2, r, want[j])
				lc2.Release(r)
			}
			return
		}
		lc2.Release(r)
	}
}

// TestLoaderSessionKilled kills a process holding a session: the daemon
// frees it within a second.
func TestLoaderSessionKilled(t *testing.T) {
	d, c := loaderDaemon(t)
	body, _ := json.Marshal(baseRequest())
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), loaderEnv+"="+d.Config().Control.Socket+"|"+string(body))
	stdin, _ := holder.StdinPipe()
	defer stdin.Close()
	stdout, _ := holder.StdoutPipe()
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		holder.Process.Kill()
		holder.Wait()
		t.Fatalf("holder said %q, %v", line, err)
	}
	waitSessions(t, c, 1, time.Second)
	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	waitSessions(t, c, 0, time.Second)
	if n := d.plans.count(); n != 0 {
		t.Errorf("%d plans after the holder died; want 0", n)
	}
}

// TestLoaderSessionBadRequests checks that malformed requests are refused
// with clear errors and the daemon goes on.
func TestLoaderSessionBadRequests(t *testing.T) {
	_, c := loaderDaemon(t)
	ctx := testCtx(t)
	for name, tc := range map[string]struct {
		mutate func(*spec.Spec)
		want   error
	}{
		"no dataset":      {func(r *spec.Spec) { r.Data = "" }, control.ErrInvalid},
		"both":            {func(r *spec.Spec) { r.Manifest = json.RawMessage(`{}`) }, control.ErrInvalid},
		"no pattern":      {func(r *spec.Spec) { r.Pattern = "" }, control.ErrInvalid},
		"bad data":        {func(r *spec.Spec) { r.Data = "s3://x" }, control.ErrInvalid},
		"batch 0":         {func(r *spec.Spec) { r.BatchSize = 0 }, control.ErrInvalid},
		"huge batch":      {func(r *spec.Spec) { r.BatchSize = 1 << 30 }, control.ErrInvalid},
		"prefetch":        {func(r *spec.Spec) { r.Prefetch = 1000 }, control.ErrInvalid},
		"shuffle":         {func(r *spec.Spec) { r.Shuffle = "random" }, control.ErrInvalid},
		"tail":            {func(r *spec.Spec) { r.Tail = "pad" }, control.ErrInvalid},
		"rank":            {func(r *spec.Spec) { r.Rank = 2 }, control.ErrInvalid},
		"negative epochs": {func(r *spec.Spec) { r.Epochs = -1 }, control.ErrInvalid},
		"resume range":    {func(r *spec.Spec) { r.Resume = &spec.State{Epoch: 9} }, control.ErrInvalid},
		"resume other":    {func(r *spec.Spec) { r.Resume = &spec.State{Fingerprint: 2} }, control.ErrInvalid},
		"pattern nothing": {func(r *spec.Spec) { r.Pattern = "none-*.{x}.npy" }, control.ErrInvalid},
		"manifest": {func(r *spec.Spec) {
			r.Data, r.Pattern, r.Manifest = "", "", json.RawMessage(`{"arrays":1}`)
		}, control.ErrInvalid},
		"missing object":   {func(r *spec.Spec) { r.Data, r.Pattern, r.Manifest = "", "", manifest("gs://bkt/nope.npy") }, object.ErrNotFound},
		"unknown bucket":   {func(r *spec.Spec) { r.Data = "gs://nosuchbucket/train/" }, object.ErrNotFound},
		"too many batches": {func(r *spec.Spec) { r.BatchSize = 100; r.DropLast = true }, control.ErrInvalid},
		"node ranks":       {func(r *spec.Spec) { r.Shuffle, r.RanksPerNode = "node", 3 }, control.ErrInvalid},
		"node index": {func(r *spec.Spec) {
			r.Shuffle, r.Nodes, r.Node = "node", 2, new(int)
			*r.Node = -1
		}, control.ErrInvalid},
	} {
		req := baseRequest()
		tc.mutate(&req)
		lc, err := c.OpenLoader(ctx, req)
		if err == nil {
			lc.Close()
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: OpenLoader = %v; want %v", name, err, tc.want)
		}
	}
	if st, err := c.Status(ctx); err != nil || st.LoaderSessions != 0 {
		t.Errorf("after bad requests: status %d sessions, %v", st.LoaderSessions, err)
	}
}

// manifest returns a one-shard manifest of array x at uri.
func manifest(uri string) json.RawMessage {
	return json.RawMessage(`{"arrays":["x"],"shards":[{"x":"` + uri + `"}]}`)
}

// TestLoaderSessionBadMessages sends malformed data-socket messages: the
// daemon refuses them, ends the session when it must, and goes on.
func TestLoaderSessionBadMessages(t *testing.T) {
	d, c := loaderDaemon(t)
	ctx := testCtx(t)
	lc, err := c.OpenLoader(ctx, baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	path := lc.Info.DataSocket
	raw := func(b []byte) any {
		nc, err := net.Dial(ring.Network, path)
		if err != nil {
			t.Fatal(err)
		}
		conn := ring.NewConn(nc.(*net.UnixConn))
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(testTimeout))
		nc.Write(b)
		m, _ := conn.Recv()
		return m
	}
	hello := func(session, token string) []byte {
		return ring.Append(nil, ring.Hello{Protocol: ring.Protocol, Session: session, Token: token})
	}
	for name, tc := range map[string]struct {
		b    []byte
		code uint32
	}{
		"garbage":        {[]byte("GET / HTTP/1.1\r\n\r\n"), ring.CodeProtocol},
		"short":          {[]byte{1, 0}, ring.CodeProtocol},
		"not hello":      {ring.Append(nil, ring.StateRequest{}), ring.CodeProtocol},
		"wrong token":    {hello(lc.Info.Session, strings.Repeat("0", 32)), ring.CodeRefused},
		"wrong session":  {hello("nope", lc.Info.Token), ring.CodeRefused},
		"joined already": {hello(lc.Info.Session, lc.Info.Token), ring.CodeRefused},
		"protocol":       {ring.Append(nil, ring.Hello{Protocol: 9, Session: lc.Info.Session, Token: lc.Info.Token}), ring.CodeProtocol},
	} {
		if m, ok := raw(tc.b).(*ring.Error); !ok || m.Code != tc.code {
			t.Errorf("%s: got %#v; want an Error with code %d", name, m, tc.code)
		}
	}
	// A joined client that sends garbage, or releases a slot it does not
	// hold, loses its session.
	for _, bad := range []any{ring.Release{Slot: 99, Seq: 1}, ring.Welcome{}} {
		lc2, err := c.OpenLoader(ctx, baseRequest())
		if err != nil {
			t.Fatal(err)
		}
		waitSessions(t, c, 2, time.Second)
		lc2.Send(bad)
		for {
			m, err := lc2.Recv(ctx)
			if err != nil {
				break // the daemon closed the connection
			}
			if e, ok := m.(*ring.Error); ok && e.Code != ring.CodeProtocol {
				t.Errorf("%T: error code %d; want %d", bad, e.Code, ring.CodeProtocol)
			}
		}
		waitSessions(t, c, 1, time.Second)
		lc2.Close()
	}
	if !d.Ready() {
		t.Error("the daemon stopped")
	}
	recvReady(t, lc) // the first session goes on
}

// TestLoaderSessionDaemonClose closes the daemon under an open session:
// the session ends, the client sees the data connection close, and no
// goroutine of the sessions is left.
func TestLoaderSessionDaemonClose(t *testing.T) {
	d, c := loaderDaemon(t)
	ctx := testCtx(t)
	lc, err := c.OpenLoader(ctx, baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	recvReady(t, lc)
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := lc.Recv(ctx); err != nil {
			break // the daemon closed the data connection
		}
	}
	cachetest.Goroutines(t, "daemon.(*loaderSessions)", "daemon.(*producer)", "daemon.read(", "daemon.(*loaderSession)", "loader.(*Loader)")
}

// TestLoaderSessionNodeShuffle reads a session in the node shuffle mode:
// the batches are the loader's for the same placement (2 nodes of 2
// ranks, rank 3 on node 1) and only of node 1's shards.
func TestLoaderSessionNodeShuffle(t *testing.T) {
	d, c := loaderDaemon(t)
	ctx := testCtx(t)
	req := baseRequest()
	req.Shuffle, req.World, req.Rank, req.RanksPerNode, req.Epochs = "node", 4, 3, 2, 1
	want := wantBatches(t, d, req)
	parts, err := sampler.Partition(testData.Rows, 2, req.Seed)
	if err != nil {
		t.Fatal(err)
	}
	off, _ := sampler.Offsets(testData.Rows)
	lc, err := c.OpenLoader(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	if lc.Info.BatchesPerEpoch != len(want) {
		t.Fatalf("%d batches per epoch; want %d", lc.Info.BatchesPerEpoch, len(want))
	}
	eachBatch(t, lc, len(want), func(i int, m ring.Ready) {
		checkBatch(t, lc, m, want[i])
		for _, id := range want[i].IDs {
			if !slices.ContainsFunc(parts[1], func(g int) bool { return id >= off[g] && id < off[g+1] }) {
				t.Errorf("sample %d is not of node 1's shards %v", id, parts[1])
			}
		}
	})
}
