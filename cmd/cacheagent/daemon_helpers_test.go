package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/object"
)

// waitLimit bounds every wait on the daemon; none should come close.
const waitLimit = time.Minute

// daemonProc is `cacheagent serve` running as a subprocess with its own
// config file, control socket, cache dir and NOTIFY_SOCKET.
type daemonProc struct {
	t        *testing.T
	cmd      *exec.Cmd
	dir      string // config, socket and cache live here
	config   string
	socket   string
	cacheDir string
	notes    chan string // notify lines (READY=1, STATUS=…, STOPPING=1, WATCHDOG=1)
	logs     *logSink
	wrap     []string // a command that runs the daemon (setpriv …), if any

	readers sync.WaitGroup // stderr and notify readers
	waiter  sync.WaitGroup // the goroutine waiting for the process
	exited  chan struct{}  // closed when the process has exited; err is then set
	err     error
}

// daemonConfig returns a config for a daemon in dir against endpoint; extra
// YAML is appended.
func daemonConfig(dir, endpoint, extra string) string {
	return fmt.Sprintf("tiers:\n  disk: {dir: %q}\nfetch: {endpoint: %q, connections: 4, slice: 256KiB}\n"+
		"control: {socket: %q}\nmetrics: {listen: \"127.0.0.1:0\"}\n%s",
		filepath.Join(dir, "cache"), endpoint, filepath.Join(dir, "c.sock"), extra)
}

// startServe writes cfg to dir/cacheagent.yaml (dir "" = a new temp dir),
// starts the daemon on it with env added, and waits for READY=1.
func startServe(t *testing.T, dir, cfg string, env ...string) *daemonProc {
	t.Helper()
	p := newDaemonProc(t, dir, cfg)
	p.start(env...)
	p.awaitNote(t, "READY=1")
	return p
}

// newDaemonProc prepares a daemon without starting it.
func newDaemonProc(t *testing.T, dir, cfg string) *daemonProc {
	if dir == "" {
		dir = t.TempDir()
	}
	p := &daemonProc{t: t, dir: dir, config: filepath.Join(dir, "cacheagent.yaml"),
		socket: filepath.Join(dir, "c.sock"), cacheDir: filepath.Join(dir, "cache")}
	if err := os.WriteFile(p.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// start starts the process and its readers; cleanup kills it if it runs.
func (p *daemonProc) start(env ...string) {
	t := p.t
	notifyPath := filepath.Join(p.dir, "notify.sock")
	os.Remove(notifyPath)
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	args := append(append([]string(nil), p.wrap...), binPath, "serve", "--config", p.config, "--log-level", "debug")
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(append(os.Environ(), "NOTIFY_SOCKET="+notifyPath), env...)
	p.cmd.Stderr = pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p.notes, p.logs, p.exited = make(chan string, 1024), newLogSink(), make(chan struct{})
	p.readers.Go(func() { readNotes(nl, p.notes) })
	p.readers.Go(func() { p.logs.read(pr) })
	p.waiter.Go(func() {
		p.err = p.cmd.Wait()
		// Queued after everything the daemon sent: awaitNote stops there.
		// Sent before exited closes, so it can never reach the notify
		// socket of a daemon started at the same path after this one.
		if c, err := net.Dial("unixgram", notifyPath); err == nil {
			c.Write([]byte(exitedNote))
			c.Close()
		}
		close(p.exited)
	})
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.waiter.Wait()
		nl.Close()
		p.readers.Wait()
		if t.Failed() {
			t.Logf("daemon log:\n%s", p.logs.text())
		}
	})
}

// readNotes forwards notify datagrams, line by line, until conn is closed.
func readNotes(conn *net.UnixConn, out chan<- string) {
	buf := make([]byte, 64<<10)
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return
		}
		for _, l := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
			select {
			case out <- l:
			default: // nobody reads WATCHDOG pings: drop
			}
		}
	}
}

// exitedNote is the notify line the test itself sends when the daemon has
// exited.
const exitedNote = "TEST_EXITED=1"

// awaitNote waits for a notify line with the given prefix and returns it.
func (p *daemonProc) awaitNote(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(waitLimit)
	for {
		select {
		case l := <-p.notes:
			if strings.HasPrefix(l, prefix) {
				return l
			}
			if l == exitedNote {
				t.Fatalf("daemon exited (%v) before notifying %s", p.err, prefix)
			}
		case <-deadline:
			t.Fatalf("no %s from the daemon", prefix)
		}
	}
}

// terminate sends SIGTERM and waits for the process; it returns its exit
// error (nil for status 0).
func (p *daemonProc) terminate(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(waitLimit):
		t.Fatal("daemon did not exit after SIGTERM")
	}
	return p.err
}

// cli runs a subcommand against the daemon's socket and returns stdout.
func (p *daemonProc) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--socket", p.socket}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("cacheagent %s: %w\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// status returns the daemon's status through the CLI.
func (p *daemonProc) status(t *testing.T) control.Status {
	t.Helper()
	out, err := p.cli(t, "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st
}

// logSink collects the daemon's JSON log records.
type logSink struct {
	mu      sync.Mutex // protects the fields below
	lines   []string
	recs    []map[string]any
	changed chan struct{} // closed and replaced when a line arrives
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

// read collects lines from r until EOF.
func (s *logSink) read(r *os.File) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		json.Unmarshal(sc.Bytes(), &rec) // non-JSON lines keep a nil record
		s.mu.Lock()
		s.lines, s.recs = append(s.lines, sc.Text()), append(s.recs, rec)
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// text returns every line read so far.
func (s *logSink) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// mark returns the number of records so far, to await later ones.
func (s *logSink) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// await waits for a record after the from'th whose msg is msg, and returns
// it.
func (s *logSink) await(t *testing.T, from int, msg string) map[string]any {
	t.Helper()
	deadline := time.After(waitLimit)
	for i := from; ; {
		s.mu.Lock()
		for ; i < len(s.recs); i++ {
			if s.recs[i] != nil && s.recs[i]["msg"] == msg {
				rec := s.recs[i]
				s.mu.Unlock()
				return rec
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no log record %q", msg)
		}
	}
}

// holdEnv makes the test binary a lease holder (see holdLease).
const holdEnv = "CACHEAGENT_TEST_HOLD"

// holdLease is the test binary acting as a trainer: it acquires a lease on
// the object named by $CACHEAGENT_TEST_HOLD ("socket|bucket|name"), prints
// the lease's path and holds it until killed or its stdin closes.
func holdLease(spec string) int {
	parts := strings.SplitN(spec, "|", 3)
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad", holdEnv)
		return 2
	}
	ctx := context.Background()
	c, err := control.Dial(ctx, parts[0])
	if err == nil {
		var l *control.Lease
		if l, err = c.Acquire(ctx, object.Object{Bucket: parts[1], Name: parts[2]}); err == nil {
			fmt.Println(l.Path())
			io.Copy(io.Discard, os.Stdin) // hold until killed or stdin closes
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "hold:", err)
	return 1
}

// exitCode returns a process's exit status from its Wait error.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
