package fleettest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// bins builds cacheagent, gcsemu and gcsproxy once per test binary
// (FLEETTEST_BIN: a directory holding them already).
func bins(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("FLEETTEST_BIN"); d != "" {
		return d
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "fleettest-bin-")
		if binErr != nil {
			return
		}
		// The test hooks let a daemon play a corrupt peer (TestCorruptPeer).
		cmd := exec.Command("go", "build", "-tags", "cacheagent_testhooks", "-o", binDir+"/", "./cmd/cacheagent",
			"./bench/cmd/gcsemu", "./bench/cmd/gcsproxy")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// need skips (or, with CI=true, fails) a test that cannot run here.
func need(t *testing.T) {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: the fleet harness must run: %v", err)
		}
		t.Skipf("skipping the fleet harness: %v (runs as root; CI=true makes this a failure)", err)
	}
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("skipping the fleet harness in -short mode")
	}
}

const (
	objects = 32
	objSize = 2 << 20
)

// fleet starts a harness for t with the test dataset (objects × objSize)
// and waits until every member is alive.
func fleet(t *testing.T, cfg Config) *Harness {
	t.Helper()
	cfg.Bin = bins(t)
	cfg.Bucket, cfg.Prefix = "bench", "data/"
	if cfg.Objects == 0 {
		cfg.Objects, cfg.Size = objects, objSize
	}
	if cfg.FirstByte == 0 {
		cfg.FirstByte = 5 * time.Millisecond
	}
	cfg.Logf = t.Logf
	ctx := context.Background()
	t0 := time.Now()
	h, err := Start(ctx, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range h.Nodes {
				t.Logf("%s log tail:\n%s", n.Name, n.LogTail(3000))
			}
		}
		if err := h.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	started := h.nodesWithKey(h.keyHex)
	started = started[:len(started)-cfg.Deferred]
	if err := h.WaitAlive(ctx, 30*time.Second, started...); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet %s: %d nodes up and joined in %v", h.ID, len(h.Nodes), time.Since(t0).Round(time.Millisecond))
	return h
}

func (h *Harness) nodesWithKey(k string) []*Node {
	var ns []*Node
	for _, n := range h.Nodes {
		if n.KeyHex == k {
			ns = append(ns, n)
		}
	}
	return ns
}

// patterns memoizes emulator.Pattern (slow under -race).
var patterns sync.Map

func pattern(seed uint64) []byte {
	if b, ok := patterns.Load(seed); ok {
		return b.([]byte)
	}
	b := emulator.Pattern(seed, objSize)
	patterns.Store(seed, b)
	return b
}

// want is object i's original content (gcsemu's pattern).
func want(i int) []byte { return pattern(uint64(i) + 1) }

// checkCopies cats every object through each node and compares it with
// accept(i) (one of the acceptable contents), and runs verify on each;
// it returns how many copies matched each acceptable content.
func checkCopies(t *testing.T, h *Harness, nodes []*Node, accept func(i int) [][]byte) map[int]int {
	t.Helper()
	ctx := context.Background()
	matched := map[int]int{}
	for _, n := range nodes {
		for i := 0; i < h.cfg.Objects; i++ {
			got, err := n.Cat(ctx, h.ObjectName(i))
			if err != nil {
				t.Errorf("%s: cat %s: %v", n.Name, h.ObjectName(i), err)
				continue
			}
			ok := false
			acc := accept(i)
			for g, w := range acc {
				if bytes.Equal(got, w) {
					ok = true
					matched[g]++
					break
				}
			}
			if !ok {
				t.Errorf("%s: %s: %d bytes equal to none of the %d acceptable generations (%d differing bytes from the first)",
					n.Name, h.ObjectName(i), len(got), len(acc), diff(got, acc[0]))
			}
		}
		rep, err := n.Verify(ctx)
		if err != nil {
			t.Errorf("%s: verify: %v", n.Name, err)
		} else if bad := rep.Bad(); bad != 0 {
			t.Errorf("%s: verify found %d bad copies: %v", n.Name, bad, rep)
		}
	}
	return matched
}

func diff(a, b []byte) int {
	d := max(len(a), len(b)) - min(len(a), len(b))
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			d++
		}
	}
	return d
}

func prefetchAll(t *testing.T, h *Harness, nodes []*Node, timeout time.Duration) ([]time.Duration, []error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	took := make([]time.Duration, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			t0 := time.Now()
			errs[i] = n.Prefetch(ctx)
			took[i] = time.Since(t0)
		})
	}
	wg.Wait()
	return took, errs
}

// prefetchEvery has every node prefetch the dataset at once, fails the
// test for each error, logs the times, GCS bytes and traffic, and returns
// the GCS bytes so far (in all and per proxy).
func prefetchEvery(t *testing.T, h *Harness, timeout time.Duration) (sum int64, per []int64) {
	t.Helper()
	took, errs := prefetchAll(t, h, h.Nodes, timeout)
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: prefetch: %v", h.Nodes[i].Name, err)
		}
	}
	sum, per, err := h.GCSBytes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("prefetch times %v; GCS bytes %d = %.3f·D (per proxy %v)", took, sum, float64(sum)/float64(h.D()), per)
	traffic(t, h)
	return sum, per
}

func traffic(t *testing.T, h *Harness) {
	t.Helper()
	for _, n := range h.Nodes {
		fs, err := n.Fleet(context.Background())
		if err != nil {
			t.Logf("%s: fleet status: %v", n.Name, err)
			continue
		}
		tr := fs.Traffic
		t.Logf("%s: origin %d B, peers %v, served %d B, peer errors %v, fallbacks %d, failovers %d (%.3fs lost, longest %.3fs)",
			n.Name, tr.OriginBytes, tr.PeerBytes, tr.ServedBytes, tr.PeerErrors, tr.Fallbacks, tr.Failovers,
			tr.FailoverSeconds, tr.FailoverMaxSeconds)
	}
}

func TestFleet(t *testing.T) {
	need(t)
	bins(t)

	// Every node prefetches the whole dataset at once: the dataset leaves
	// GCS about once (N·D without the fleet), every copy is right; then one
	// agent is SIGKILLed and restarted on its cache, and re-adopts it.
	t.Run("AllPrefetch", func(t *testing.T) {
		h := fleet(t, Config{})
		sum, _ := prefetchEvery(t, h, 60*time.Second)
		d := h.D()
		if float64(sum) > 1.05*float64(d) {
			t.Errorf("GCS bytes %d > 1.05·D (%d)", sum, d)
		}
		checkCopies(t, h, h.Nodes, func(i int) [][]byte { return [][]byte{want(i)} })

		// SIGKILLed and restarted on its cache, an agent re-adopts it: its
		// prefetch of the whole dataset downloads nothing.
		ctx := context.Background()
		victim := h.Nodes[2]
		if err := victim.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := victim.Prefetch(ctx); err != nil {
			t.Fatalf("%s: prefetch after restart: %v", victim.Name, err)
		}
		after, _, err := h.GCSBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, err := victim.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s restarted: %d objects downloaded, %d GCS bytes (metadata) since", victim.Name, st.Fetch.Objects,
			after-sum)
		if st.Fetch.Objects != 0 || float64(after-sum) > 0.01*float64(d) {
			t.Errorf("%s after a restart downloaded %d objects, %d GCS bytes; want none", victim.Name,
				st.Fetch.Objects, after-sum)
		}
	})

	// SIGKILL one agent mid-read: the others finish, nothing corrupt.
	t.Run("KillMidRead", func(t *testing.T) {
		h := fleet(t, Config{GCSMbit: 80, PeerMbit: 320})
		victim := h.Nodes[2]
		survivors := h.Nodes[:2]
		var killed sync.WaitGroup
		killed.Go(func() {
			time.Sleep(time.Second)
			if err := victim.Kill(); err != nil {
				t.Errorf("kill: %v", err)
			}
			t.Logf("SIGKILLed %s at 1s", victim.Name)
		})
		took, errs := prefetchAll(t, h, survivors, 60*time.Second)
		killed.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: prefetch: %v", survivors[i].Name, err)
			}
		}
		t.Logf("survivors' prefetch times %v (compare: bench/fleet.sh measures the undisturbed cold time on the same links)", took)
		traffic(t, h)
		sum, _, _ := h.GCSBytes(context.Background())
		t.Logf("GCS bytes %d = %.3f·D", sum, float64(sum)/float64(h.D()))
		checkCopies(t, h, survivors, func(i int) [][]byte { return [][]byte{want(i)} })
	})

	// SIGSTOP one agent (a blackhole): the survivors give up on it after
	// the first-byte timeout and read GCS.
	t.Run("StopMidRead", func(t *testing.T) {
		h := fleet(t, Config{GCSMbit: 80, PeerMbit: 320})
		victim := h.Nodes[2]
		survivors := h.Nodes[:2]
		var stopped sync.WaitGroup
		stopped.Go(func() {
			time.Sleep(time.Second)
			if err := victim.Signal(syscall.SIGSTOP); err != nil {
				t.Errorf("stop: %v", err)
			}
			t.Logf("SIGSTOPped %s at 1s", victim.Name)
		})
		took, errs := prefetchAll(t, h, survivors, 90*time.Second)
		stopped.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: prefetch: %v", survivors[i].Name, err)
			}
		}
		t.Logf("survivors' prefetch times %v", took)
		traffic(t, h)
		checkCopies(t, h, survivors, func(i int) [][]byte { return [][]byte{want(i)} })
		if err := victim.Signal(syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	})

	// A node with another key is never admitted, and a request without
	// the key's MAC is refused.
	t.Run("WrongKey", func(t *testing.T) {
		h := fleet(t, Config{Objects: 2, Size: objSize, OtherKey: 3})
		ctx := context.Background()
		time.Sleep(3 * time.Second) // the stranger keeps trying to join
		for _, n := range h.Nodes[:2] {
			fs, err := n.Fleet(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range fs.Members {
				if m.Name == "n3" {
					t.Errorf("%s lists the node with another key: %+v", n.Name, m)
				}
			}
		}
		if fs, err := h.Nodes[2].Fleet(ctx); err == nil {
			for _, m := range fs.Members {
				if m.Name != "n3" && m.State == "alive" {
					t.Errorf("the node with another key sees %s alive", m.Name)
				}
			}
		}
		// curl from the stranger's namespace to n1's peer port, which
		// speaks TLS keyed from the fleet key (peer_tls defaults on): in
		// plain HTTP the server answers 400 and nothing else; over TLS
		// without the fleet's client certificate the handshake fails.
		// (Requests without the MAC get 401 behind TLS: fleet/peer tests.)
		path := "/v1/peer/object?b=bench&o=data%2Fobj-00000&gen=1&off=0&n=16"
		for _, c := range []struct{ scheme, want string }{{"http", "400"}, {"https", "000"}} {
			argv := []string{"curl", "-s", "-k", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
				fmt.Sprintf("%s://%s:7947%s", c.scheme, h.Nodes[0].IP, path)}
			out, err := h.Exec(ctx, h.Nodes[2].NS, argv...)
			if code := strings.TrimSpace(string(out)); code != c.want || (c.want == "000") != (err != nil) {
				t.Errorf("%s GET from a stranger: status %q, err %v; want %s", c.scheme, code, err, c.want)
			}
		}
		st, _ := h.Nodes[0].Fleet(ctx)
		t.Logf("n1 served requests by outcome: %v", st.Traffic.ServedRequests)
		if st.Traffic.ServedBytes != 0 || st.Traffic.ServedRequests["ok"] != 0 {
			t.Errorf("n1 served %d bytes, %d requests ok, to a stranger", st.Traffic.ServedBytes, st.Traffic.ServedRequests["ok"])
		}
	})

	// A fourth node joins while three prefetch: they finish, nothing is
	// corrupt, and the newcomer then reads its share from the fleet.
	t.Run("JoinMidRead", func(t *testing.T) {
		h := fleet(t, Config{Nodes: 4, Deferred: 1, GCSMbit: 80, PeerMbit: 320})
		ctx := context.Background()
		first, late := h.Nodes[:3], h.Nodes[3]
		var joined sync.WaitGroup
		var joinedIn time.Duration
		joined.Go(func() {
			time.Sleep(time.Second)
			t0 := time.Now()
			if err := late.Start(ctx); err != nil {
				t.Errorf("start %s: %v", late.Name, err)
				return
			}
			if err := h.WaitAlive(ctx, 20*time.Second); err != nil {
				t.Errorf("after %s joined: %v", late.Name, err)
			}
			joinedIn = time.Since(t0)
		})
		took, errs := prefetchAll(t, h, first, 60*time.Second)
		joined.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s: prefetch: %v", first[i].Name, err)
			}
		}
		g1, _, _ := h.GCSBytes(ctx)
		t.Logf("%s started 1s into the prefetch, alive on every member %v later; the others' prefetch times %v; GCS bytes %.3f·D",
			late.Name, joinedIn.Round(time.Millisecond), took, float64(g1)/float64(h.D()))
		if _, errs := prefetchAll(t, h, []*Node{late}, 60*time.Second); errs[0] != nil {
			t.Errorf("%s: prefetch: %v", late.Name, errs[0])
		}
		g2, _, _ := h.GCSBytes(ctx)
		// A new owner reads what it misses from the member that holds it
		// (0.16·D from GCS before it did; logged, not asserted: a probe that
		// times out on a loaded machine falls back to GCS, correctly).
		t.Logf("the newcomer's own prefetch added %.3f·D of GCS bytes", float64(g2-g1)/float64(h.D()))
		traffic(t, h)
		checkCopies(t, h, h.Nodes, func(i int) [][]byte { return [][]byte{want(i)} })
	})

	// Objects overwritten in GCS during the reads: every copy is one
	// generation byte for byte.
	t.Run("OverwriteDuringReads", func(t *testing.T) {
		h := fleet(t, Config{GCSMbit: 160, PeerMbit: 640})
		ctx := context.Background()
		gen2 := func(i int) []byte { return pattern(uint64(i) + 1001) }
		done := make(chan struct{})
		var wg sync.WaitGroup
		uploads := 0
		wg.Go(func() {
			for i := 0; i < h.cfg.Objects; i += 2 {
				select {
				case <-done:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if err := h.Upload(ctx, h.ObjectName(i), gen2(i)); err != nil {
					t.Errorf("upload: %v", err)
					return
				}
				uploads++
			}
		})
		took, errs := prefetchAll(t, h, h.Nodes, 60*time.Second)
		close(done)
		wg.Wait()
		t.Logf("%d objects overwritten while the nodes prefetched (prefetch times %v)", uploads, took)
		for i, err := range errs {
			if err != nil {
				// A prefetch racing an overwrite may report the changed
				// generation; what matters is what the caches hold.
				t.Logf("%s: prefetch: %v", h.Nodes[i].Name, err)
			}
		}
		traffic(t, h)
		m := checkCopies(t, h, h.Nodes, func(i int) [][]byte { return [][]byte{want(i), gen2(i)} })
		t.Logf("cached copies read back: %d of the first generation, %d of the second, none mixed", m[0], m[1])
	})
}
