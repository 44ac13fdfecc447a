package fleettest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/control"
)

// Start starts (or restarts) node n's daemon and waits until it answers
// on its socket.
func (n *Node) Start(ctx context.Context) error {
	cfgPath, err := n.writeConfig()
	if err != nil {
		return err
	}
	os.Remove(n.Socket)
	var env []string
	if n.h.cfg.CorruptServing > 0 && n.h.Nodes[n.h.cfg.CorruptServing-1] == n {
		env = []string{"CACHEAGENT_TESTHOOK_CORRUPT_SERVED=1"} // daemon.TestHookCorruptServed
	}
	p, _, err := n.h.start("cacheagent-"+n.Name, n.NS, filepath.Join(n.Dir, "daemon.log"), nil, env,
		filepath.Join(n.h.cfg.Bin, "cacheagent"), "serve", "--config", cfgPath, "--log-level", "info")
	if err != nil {
		return err
	}
	res := make(chan error, 1)
	go func() { err := p.cmd.Wait(); close(p.done); res <- err }()
	n.mu.Lock()
	n.cmd, n.res = p.cmd, res
	n.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("fleettest: %s exited at start: %s", n.Name, n.LogTail(2000))
		default:
		}
		if c, err := control.Dial(ctx, n.Socket); err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleettest: %s did not answer in 60s: %s", n.Name, n.LogTail(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PID is the daemon's pid (0 before Start).
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Signal sends sig to the daemon.
func (n *Node) Signal(sig syscall.Signal) error {
	pid := n.PID()
	if pid == 0 {
		return errors.New("fleettest: not started")
	}
	return syscall.Kill(pid, sig)
}

// Kill SIGKILLs the daemon and waits until it is reaped.
func (n *Node) Kill() error {
	if err := n.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	n.mu.Lock()
	res := n.res
	n.mu.Unlock()
	select {
	case <-res:
	case <-time.After(10 * time.Second):
		return errors.New("fleettest: killed daemon not reaped in 10s")
	}
	return nil
}

// LogTail is the last max bytes of the daemon's log.
func (n *Node) LogTail(max int) string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "daemon.log"))
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// CLI runs `cacheagent args… --socket <n's socket>` from the root
// namespace and returns its stdout. --cache-dir is the daemon's, so the
// CLI uses the daemon; its standalone fallback (no daemon answering) is
// pointed at a closed loopback port, so it can never send traffic
// anywhere.
func (n *Node) CLI(ctx context.Context, args ...string) ([]byte, error) {
	args = append(args, "--socket", n.Socket, "--endpoint", "http://127.0.0.1:1", "--cache-dir",
		filepath.Join(n.Dir, "disk"), "--shm-dir", "none")
	ctx, cancel := bound(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.h.cfg.Bin, "cacheagent"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("cacheagent %s (%s): %v: %s", strings.Join(args[:len(args)-8], " "), n.Name, err,
			bytes.TrimSpace(errb.Bytes()))
	}
	return out.Bytes(), nil
}

// bound gives ctx a deadline d from now unless it has one: a stopped
// daemon accepts on its socket and never answers.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// Prefetch runs `cacheagent prefetch --wait` of the dataset on n.
func (n *Node) Prefetch(ctx context.Context) error {
	_, err := n.CLI(ctx, "prefetch", "--wait", n.h.URI())
	return err
}

// Cat reads one object through n (`cacheagent cat`).
func (n *Node) Cat(ctx context.Context, name string) ([]byte, error) {
	return n.CLI(ctx, "cat", "gs://"+n.h.cfg.Bucket+"/"+name)
}

// VerifyReport is the part of `cacheagent verify --json` the tests read.
type VerifyReport map[string]any

// Verify runs `cacheagent verify --json` of the dataset on n.
func (n *Node) Verify(ctx context.Context) (VerifyReport, error) {
	out, err := n.CLI(ctx, "verify", "--json", n.h.URI())
	if err != nil {
		return nil, err
	}
	var r VerifyReport
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		r = nil
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("verify --json: %w: %s", err, out)
		}
	}
	return r, nil
}

// KeyHex is the fleet's shared key (nodes but Config.OtherKey's).
func (h *Harness) KeyHex() string { return h.keyHex }

// Fleet reads n's fleet status through its socket.
func (n *Node) Fleet(ctx context.Context) (control.FleetStatus, error) {
	ctx, cancel := bound(ctx, 5*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, n.Socket)
	if err != nil {
		return control.FleetStatus{}, err
	}
	defer c.Close()
	return c.Fleet(ctx)
}

// Status reads n's status through its socket.
func (n *Node) Status(ctx context.Context) (control.Status, error) {
	ctx, cancel := bound(ctx, 5*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, n.Socket)
	if err != nil {
		return control.Status{}, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// DiskUsed is n's disk tier's used bytes.
func (n *Node) DiskUsed(ctx context.Context) (int64, error) {
	s, err := n.Status(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range s.Tiers {
		if t.Name == "disk" {
			return t.UsedBytes, nil
		}
	}
	return 0, errors.New("fleettest: no disk tier in status")
}

// Alive lists the members n sees alive.
func (n *Node) Alive(ctx context.Context) ([]string, error) {
	fs, err := n.Fleet(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range fs.Members {
		if m.State == "alive" {
			names = append(names, m.Name)
		}
	}
	return names, nil
}

// WaitAlive waits until every node of nodes sees exactly the names of
// nodes alive.
func (h *Harness) WaitAlive(ctx context.Context, timeout time.Duration, nodes ...*Node) error {
	if len(nodes) == 0 {
		nodes = h.Nodes
	}
	want := make([]string, len(nodes))
	for i, n := range nodes {
		want[i] = n.Name
	}
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok := true
		for _, n := range nodes {
			names, err := n.Alive(ctx)
			if err != nil || !sameSet(names, want) {
				ok, last = false, fmt.Sprintf("%s sees %v (err %v)", n.Name, names, err)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleettest: members not all alive after %v: %s", timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]bool{}
	for _, x := range a {
		m[x] = true
	}
	for _, x := range b {
		if !m[x] {
			return false
		}
	}
	return true
}

// Cached lists the dataset's objects n's cache holds (`cacheagent ls
// --json`: a tier other than "none").
func (n *Node) Cached(ctx context.Context) ([]string, error) {
	out, err := n.CLI(ctx, "ls", "--json", n.h.URI())
	if err != nil {
		return nil, err
	}
	var rows []control.Object
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("ls --json: %w: %s", err, out)
	}
	var names []string
	for _, r := range rows {
		if r.Tier != "" && r.Tier != "none" {
			names = append(names, r.Name)
		}
	}
	return names, nil
}

// Bad returns the number of mismatching copies the report counts: corrupt,
// damaged and dropped.
func (r VerifyReport) Bad() int {
	n := 0
	for _, k := range []string{"corrupt", "damaged"} {
		if v, ok := r[k].(float64); ok {
			n += int(v)
		}
	}
	if d, ok := r["dropped"].([]any); ok {
		n += len(d)
	}
	return n
}
