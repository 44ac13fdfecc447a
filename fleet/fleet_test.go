package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/cacheagent/cacheagent/fleet/placement"
)

// waitLimit bounds every wait for the fleet to converge; none should come
// close (a join or a leave takes well under a second on loopback).
const waitLimit = time.Minute

// writeKey writes a key file of the given hex secret, mode 0600.
func writeKey(t *testing.T, hexKey string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(p, []byte(hexKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	keyA = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	keyB = "ffeeddccbbaa99887766554433221100"
)

// freeAddr returns a loopback address whose port is free for TCP and UDP
// at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return ""
}

// start starts a fleet member and closes it at the end of the test.
func start(t *testing.T, cfg Config, weight float64) *Fleet {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.PeerListen == "" {
		cfg.PeerListen = "127.0.0.1:7947"
	}
	f, err := Start(context.Background(), cfg, Options{Weight: weight, Version: "test"})
	if err != nil {
		t.Fatalf("Start(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		if err := f.Close(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close(%s): %v", cfg.Name, err)
		}
	})
	return f
}

// await waits until cond holds for f, re-checking on every membership
// change; it fails the test after waitLimit.
func await(t *testing.T, f *Fleet, what string, cond func() bool) {
	t.Helper()
	changes, cancel := f.Subscribe()
	defer cancel()
	deadline := time.After(waitLimit)
	for !cond() {
		select {
		case <-changes:
		case <-deadline:
			t.Fatalf("%s: %s never happened; members %+v", f.Name(), what, f.Members())
		}
	}
}

// names returns the names of members in the given state.
func names(ms []Member, s State) []string {
	var out []string
	for _, m := range ms {
		if m.State == s {
			out = append(out, m.Name)
		}
	}
	return out
}

// TestFleetJoinAndLeave starts three members on loopback, the third
// joining through a list that names itself, checks that all see the same
// three live members and the same owners, then closes one and checks that
// the others drop it.
func TestFleetJoinAndLeave(t *testing.T) {
	key := writeKey(t, keyA)
	a := start(t, Config{Name: "node-a", KeyFile: key, PeerListen: "127.0.0.1:17001"}, 100<<30)
	b := start(t, Config{Name: "node-b", KeyFile: key, PeerListen: "127.0.0.1:17002",
		Join: []string{a.Self().Addr}}, 200<<30)
	addrC := freeAddr(t)
	c := start(t, Config{Name: "node-c", KeyFile: key, Listen: addrC, PeerListen: ":17003",
		Join: []string{addrC, b.Self().Addr}}, 100<<30)
	fleets := []*Fleet{a, b, c}
	want := []string{"node-a", "node-b", "node-c"}
	for _, f := range fleets {
		await(t, f, "three alive members", func() bool { return slices.Equal(names(f.Members(), StateAlive), want) })
		select {
		case <-f.Joined():
		default:
			t.Errorf("%s: Joined not closed with three members", f.Name())
		}
	}
	if got := c.Self().Addr; got != addrC {
		t.Errorf("node-c Addr = %s; want %s", got, addrC)
	}
	wantPeer := map[string]string{"node-a": "127.0.0.1:17001", "node-b": "127.0.0.1:17002", "node-c": "127.0.0.1:17003"}
	for _, f := range fleets {
		for _, m := range f.Members() {
			if m.PeerAddr != wantPeer[m.Name] || m.Version != "test" {
				t.Errorf("%s sees %+v; want peer address %s and version test", f.Name(), m, wantPeer[m.Name])
			}
		}
		if got := f.Table().OwnedShare("node-b"); got != 0.5 {
			t.Errorf("%s: node-b's owned share = %v; want 0.5 (weight 200 of 400)", f.Name(), got)
		}
	}
	checkSameOwners(t, fleets)
	if len(a.Key()) != PeerKeySize || string(a.Key()) != string(c.Key()) {
		t.Errorf("Key() = %x and %x; want equal %d-byte keys", a.Key(), c.Key(), PeerKeySize)
	}

	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, f := range fleets[:2] {
		await(t, f, "node-c's leave", func() bool {
			return slices.Equal(names(f.Members(), StateAlive), want[:2]) && len(f.Members()) == 2
		})
		if f.Table().Len() != 2 {
			t.Errorf("%s: table of %d members after node-c left; want 2", f.Name(), f.Table().Len())
		}
	}
	checkSameOwners(t, fleets[:2])
	if err := c.Close(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v; want ErrClosed", err)
	}
}

// checkSameOwners checks that every fleet computes the same owners, with
// their peer addresses.
func checkSameOwners(t *testing.T, fleets []*Fleet) {
	t.Helper()
	for i := range 200 {
		key := placement.Key{Bucket: "b", Object: fmt.Sprintf("shard-%d", i), Generation: 7, Chunk: i % 5}
		first := fleets[0].Owners(key, 2)
		for _, f := range fleets[1:] {
			if got := f.Owners(key, 2); !slices.Equal(got, first) {
				t.Fatalf("%s: Owners(%v) = %+v; %s says %+v", f.Name(), key, got, fleets[0].Name(), first)
			}
		}
		if first[0].PeerAddr == "" || first[0].Name != fleets[0].Table().Owner(key).Name {
			t.Fatalf("Owners(%v)[0] = %+v; want the table's owner with a peer address", key, first[0])
		}
	}
}

// TestFleetOtherKeyNotAdmitted checks that a member with another key never
// joins: its join attempts fail and the others never list it.
func TestFleetOtherKeyNotAdmitted(t *testing.T) {
	a := start(t, Config{Name: "node-a", KeyFile: writeKey(t, keyA)}, 1)
	b := start(t, Config{Name: "node-b", KeyFile: writeKey(t, keyA), Join: []string{a.Self().Addr}}, 1)
	await(t, a, "node-b's join", func() bool { return len(a.Members()) == 2 })
	x := start(t, Config{Name: "intruder", KeyFile: writeKey(t, keyB), Join: []string{a.Self().Addr, b.Self().Addr}}, 1)
	deadline := time.Now().Add(waitLimit)
	for x.joinAttempts.Load() < 3 { // polled: a failed attempt is no membership change
		if time.Now().After(deadline) {
			t.Fatalf("intruder made %d join attempts; want 3", x.joinAttempts.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, f := range []*Fleet{a, b} {
		if got := names(f.Members(), StateAlive); !slices.Equal(got, []string{"node-a", "node-b"}) {
			t.Errorf("%s lists %v; want node-a and node-b only", f.Name(), got)
		}
	}
	if got := x.Members(); len(got) != 1 || got[0].Name != "intruder" {
		t.Errorf("intruder lists %+v; want itself only", got)
	}
	select {
	case <-x.Joined():
		t.Error("intruder's Joined is closed; want it still waiting")
	default:
	}
}

// TestStartKeyRules checks that fleet mode refuses to start without a key
// unless insecure, and starts insecure without one.
func TestStartKeyRules(t *testing.T) {
	_, err := Start(context.Background(), Config{Name: "n", Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:7947"},
		Options{Weight: 1})
	if !errors.Is(err, ErrNoKey) || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "insecure: true") {
		t.Errorf("Start without a key = %v; want ErrNoKey naming insecure: true", err)
	}
	_, err = Start(context.Background(), Config{Name: "n", Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:7947",
		KeyFile: filepath.Join(t.TempDir(), "missing")}, Options{Weight: 1})
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start with a missing key file = %v; want fs.ErrNotExist", err)
	}
	_, err = Start(context.Background(), Config{Name: "n", Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:7947",
		Insecure: true}, Options{Weight: 0})
	if !errors.Is(err, ErrBadWeight) {
		t.Errorf("Start with weight 0 = %v; want ErrBadWeight", err)
	}
	f := start(t, Config{Name: "n", Insecure: true}, 1)
	if f.Key() != nil {
		t.Errorf("insecure Key() = %x; want nil", f.Key())
	}
	if got := f.Members(); len(got) != 1 || got[0].State != StateAlive || f.Table().Len() != 1 {
		t.Errorf("a fleet of one lists %+v with a table of %d; want itself, alive", got, f.Table().Len())
	}
}

// TestSubscribeAndSetWeight checks a join through a DNS name, that a
// weight change reaches the other member's table and its subscribers, and
// that Close closes subscriptions.
func TestSubscribeAndSetWeight(t *testing.T) {
	key := writeKey(t, keyB)
	a := start(t, Config{Name: "node-a", KeyFile: key}, 1)
	_, port, _ := net.SplitHostPort(a.Self().Addr)
	b := start(t, Config{Name: "node-b", KeyFile: key, Join: []string{"localhost:" + port}}, 1) // a DNS name
	await(t, a, "node-b's join", func() bool { return a.Table().Len() == 2 })
	if err := b.SetWeight(3); err != nil {
		t.Fatal(err)
	}
	await(t, a, "node-b's new weight", func() bool { return a.Table().OwnedShare("node-b") == 0.75 })
	changes, _ := b.Subscribe()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range changes { // drains pending changes; ends when Close closes it
	}
	if err := b.SetWeight(2); !errors.Is(err, ErrClosed) {
		t.Errorf("SetWeight after Close = %v; want ErrClosed", err)
	}
}

// crash stops f's memberlist without leaving, as a killed agent would.
func crash(f *Fleet) {
	f.mu.Lock()
	f.closed = true // its cleanup's Close then does nothing
	f.mu.Unlock()
	f.stop()
	f.ml.Shutdown()
	f.loop.Wait()
}

// TestFleetFailure checks that a member that stops answering without
// leaving is declared dead: listed as dead, out of the table.
func TestFleetFailure(t *testing.T) {
	key := writeKey(t, keyA)
	a := start(t, Config{Name: "node-a", KeyFile: key}, 1)
	b := start(t, Config{Name: "node-b", KeyFile: key, Join: []string{a.Self().Addr}}, 1)
	await(t, a, "node-b's join", func() bool { return a.Table().Len() == 2 })
	crash(b)
	await(t, a, "node-b's failure", func() bool { return slices.Equal(names(a.Members(), StateDead), []string{"node-b"}) })
	if _, ok := a.Table().Index("node-b"); ok || a.Table().Len() != 1 {
		t.Errorf("dead node-b is still in the table of %d", a.Table().Len())
	}
	if _, ok := a.Member("node-b"); ok {
		t.Error("Member(node-b) found a dead member; want only the table's members")
	}
}

// TestSuspectState checks the suspect state: set by memberlist's log line
// for a failed probe, kept in the table, cleared by an answered probe.
func TestSuspectState(t *testing.T) {
	key := writeKey(t, keyB)
	a := start(t, Config{Name: "node-a", KeyFile: key}, 1)
	start(t, Config{Name: "node-b", KeyFile: key, Join: []string{a.Self().Addr}}, 1)
	await(t, a, "node-b's join", func() bool { return a.Table().Len() == 2 })
	w := &logWriter{log: a.log, suspect: func(name string) { a.setState(name, StateSuspect) }}
	w.Write([]byte("[INFO] memberlist: Suspect node-b has failed, no acks received\n"))
	if got := names(a.Members(), StateSuspect); !slices.Equal(got, []string{"node-b"}) || a.Table().Len() != 2 {
		t.Errorf("after the suspect line: suspects %v, table of %d; want node-b, still in the table", got, a.Table().Len())
	}
	if m, ok := a.Member("node-b"); !ok || m.State != StateSuspect {
		t.Errorf("Member(node-b) = %+v, %v; want it suspect", m, ok)
	}
	(&delegate{f: a}).NotifyPingComplete(&memberlist.Node{Name: "node-b"}, time.Millisecond, nil)
	if got := names(a.Members(), StateAlive); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Errorf("after an answered probe: alive %v; want both", got)
	}
}
