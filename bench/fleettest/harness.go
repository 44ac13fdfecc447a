// Package fleettest runs a fleet of cacheagent daemons on one machine, each
// in its own network namespace, for the fleet tests and the fleet benchmark
// (bench/cmd/fleet).
//
// Topology (all names carry a run id, e.g. "cas3f9a"):
//
//	cas<id>h  (hub)   bridge cas<id>br 198.18.0.254/24
//	                  gcsemu on 127.0.0.1 (hub loopback)
//	                  one gcsproxy per node on 198.18.0.254:<port>, counting bytes
//	cas<id>n<i> (node i)  veth cas<id>v<i> 198.18.0.i/24 ⇄ cas<id>p<i> in the hub
//	                  cacheagent serve: gossip 198.18.0.i:7946, peers 198.18.0.i:7947
//
// Addresses live only inside these namespaces; the control sockets are files,
// so the harness reads each daemon from the root namespace. Close kills and
// reaps every process and deletes the namespaces by name; processes die with
// the harness (Pdeathsig), and Start first removes what a killed earlier run
// left (namespaces whose owner pid is gone).
//
// It needs root, ip(8) and tc(8) from iproute2 and curl (requests inside the
// hub and node namespaces).
package fleettest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Prefix starts the name of every namespace and interface the harness makes.
const Prefix = "cas"

// stateDir holds one file per live run: its run id and owner pid.
const stateDir = "/run/cacheagent-fleettest"

// Config describes one fleet.
type Config struct {
	// Nodes is the number of agents (default 3).
	Nodes int
	// Bin is the directory holding cacheagent, gcsemu and gcsproxy.
	Bin string
	// Bucket and Prefix name the synthetic dataset gcsemu serves:
	// Objects objects of Size bytes, Prefix+"obj-%05d".
	Bucket, Prefix string
	Objects        int
	Size           int64
	// FirstByte and Rate shape each node's proxy (gcsproxy -first-byte,
	// -rate per connection; "0": unshaped).
	FirstByte time.Duration
	Rate      string
	// UploadRate paces each upload request's body at each node's proxy
	// (gcsproxy -upload-rate; "": unshaped).
	UploadRate string
	// GCSMbit caps each node's GCS link (htb on the hub's port, traffic
	// from the GCS address); PeerMbit caps its peer traffic in each
	// direction (htb on the hub port for other sources, htb on the node's
	// veth). 0: uncapped.
	GCSMbit, PeerMbit int
	// DiskMax is each node's disk tier budget, e.g. "256MiB".
	DiskMax string
	// Connections is each daemon's fetch.connections (default 16).
	Connections int
	// NoFleet starts the daemons without a fleet section.
	NoFleet bool
	// NoPeerBatch sets fleet.peer_batch false: every object in a peer
	// request of its own.
	NoPeerBatch bool
	// CorruptServing, if positive, is the number (from 1) of the node
	// whose daemon flips a byte of every buffer it serves to peers; it
	// needs a cacheagent built with -tags cacheagent_testhooks.
	CorruptServing int
	// Deferred is the number of last nodes Start prepares (namespace,
	// proxy, config) but does not start: Node.Start starts one later (a
	// node joining mid-read).
	Deferred int
	// OtherKey, when not 0, is the index of a node started with a key of
	// its own (a stranger that must never be admitted).
	OtherKey int
	// EmuFiles keeps gcsemu's objects in files under the harness's
	// directory (gcsemu -dir): a request then costs O(1), not O(objects),
	// which decides the pace with thousands of small objects on a small
	// machine. Overwritten objects keep one generation either way.
	EmuFiles bool
	// Logf receives progress lines (nil: none).
	Logf func(format string, args ...any)
}

// Node is one agent.
type Node struct {
	Index  int    // 1-based
	Name   string // fleet name, "n<i>"
	NS     string // its network namespace
	IP     string // 198.18.0.<i>
	Dir    string // its directory: config, key, disk tier, log
	Socket string // its control socket
	Proxy  string // its GCS proxy's base URL (inside the hub)
	KeyHex string // its fleet key

	h   *Harness
	mu  sync.Mutex
	cmd *exec.Cmd
	res chan error // the daemon's exit, once
}

// Harness is a running fleet.
type Harness struct {
	cfg   Config
	ID    string // run id, 4 hex digits
	Hub   string // hub namespace
	Dir   string // working directory
	Nodes []*Node
	// EmuBase is gcsemu's base URL inside the hub (http://127.0.0.1:P).
	EmuBase string

	mu      sync.Mutex
	procs   []*proc
	nsMade  []string
	closed  bool
	keyHex  string
	cleanMu sync.Mutex
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func (h *Harness) logf(format string, args ...any) {
	if h.cfg.Logf != nil {
		h.cfg.Logf(format, args...)
	}
}

// Check reports why the harness cannot run here (nil: it can).
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("fleettest: needs root (network namespaces)")
	}
	for _, b := range []string{"ip", "tc", "curl"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("fleettest: needs %s: %w", b, err)
		}
	}
	return nil
}

// Start builds the topology, starts gcsemu, the proxies and the daemons,
// and returns once every daemon answers on its socket. The caller must
// Close the harness, also when Start fails.
func Start(ctx context.Context, cfg Config) (*Harness, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Nodes > 200 {
		return nil, errors.New("fleettest: too many nodes")
	}
	if cfg.Connections == 0 {
		cfg.Connections = 16
	}
	if cfg.Rate == "" {
		cfg.Rate = "0"
	}
	if cfg.DiskMax == "" {
		cfg.DiskMax = "1GiB"
	}
	id := make([]byte, 2)
	rand.Read(id)
	h := &Harness{cfg: cfg, ID: hex.EncodeToString(id)}
	h.Hub = Prefix + h.ID + "h"
	track(h)
	RemoveLeftovers(h.logf)
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return h, err
	}
	if err := os.WriteFile(filepath.Join(stateDir, h.ID), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return h, err
	}
	dir, err := os.MkdirTemp("", Prefix+h.ID+"-")
	if err != nil {
		return h, err
	}
	h.Dir = dir
	key := make([]byte, 16)
	rand.Read(key)
	h.keyHex = hex.EncodeToString(key)
	if err := h.network(); err != nil {
		return h, err
	}
	if err := h.startGCS(ctx); err != nil {
		return h, err
	}
	for i := 1; i <= cfg.Nodes; i++ {
		n := &Node{Index: i, Name: fmt.Sprintf("n%d", i), NS: fmt.Sprintf("%s%sn%d", Prefix, h.ID, i),
			IP: fmt.Sprintf("198.18.0.%d", i), Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), h: h, KeyHex: h.keyHex}
		n.Socket = filepath.Join(n.Dir, "control.sock")
		if i == cfg.OtherKey {
			k := make([]byte, 16)
			rand.Read(k)
			n.KeyHex = hex.EncodeToString(k)
		}
		h.Nodes = append(h.Nodes, n)
		url, err := h.startProxy(ctx, n)
		if err != nil {
			return h, err
		}
		n.Proxy = url
	}
	for _, n := range h.Nodes[:len(h.Nodes)-min(cfg.Deferred, len(h.Nodes))] {
		if err := n.Start(ctx); err != nil {
			return h, err
		}
	}
	return h, nil
}

// D is the dataset's size in bytes.
func (h *Harness) D() int64 { return int64(h.cfg.Objects) * h.cfg.Size }

// Config returns the harness's configuration (defaults applied).
func (h *Harness) Config() Config { return h.cfg }

// URI is the dataset's gs:// prefix.
func (h *Harness) URI() string { return "gs://" + h.cfg.Bucket + "/" + h.cfg.Prefix }

// ObjectName is object i's name.
func (h *Harness) ObjectName(i int) string { return fmt.Sprintf("%sobj-%05d", h.cfg.Prefix, i) }

// start runs bin in namespace ns with its output to logPath; it dies with
// this process.
func (h *Harness) start(name, ns, logPath string, stdout *bytes.Buffer, env []string, bin string, args ...string) (*proc, *bufio.Reader, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer lf.Close()
	cmd.Stderr = lf
	var r *bufio.Reader
	if stdout != nil {
		pr, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, err
		}
		r = bufio.NewReader(pr)
	} else {
		cmd.Stdout = lf
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, errors.New("fleettest: closed")
	}
	if err := cmd.Start(); err != nil {
		h.mu.Unlock()
		return nil, nil, err
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	return p, r, nil
}

func firstLine(r *bufio.Reader, what string, timeout time.Duration) (string, error) {
	ch := make(chan string, 1)
	go func() {
		l, _ := r.ReadString('\n')
		ch <- strings.TrimSpace(l)
	}()
	select {
	case l := <-ch:
		if l == "" {
			return "", fmt.Errorf("fleettest: %s printed no address", what)
		}
		go func() { _, _ = r.WriteTo(discard{}) }()
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("fleettest: %s did not start in %v", what, timeout)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func (h *Harness) startGCS(ctx context.Context) error {
	args := []string{"-bucket", h.cfg.Bucket, "-prefix", h.cfg.Prefix,
		"-objects", strconv.Itoa(h.cfg.Objects), "-size", strconv.FormatInt(h.cfg.Size, 10),
		"-first-byte", "0", "-rate", "0"}
	if h.cfg.EmuFiles {
		dir := filepath.Join(h.Dir, "gcs")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		args = append(args, "-dir", dir)
	}
	p, r, err := h.start("gcsemu", h.Hub, filepath.Join(h.Dir, "gcsemu.log"), &bytes.Buffer{}, nil,
		filepath.Join(h.cfg.Bin, "gcsemu"), args...)
	if err != nil {
		return err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	ep, err := firstLine(r, "gcsemu", 60*time.Second)
	if err != nil {
		return err
	}
	h.EmuBase = strings.Split(ep, "/storage/v1/")[0]
	return nil
}

func (h *Harness) startProxy(ctx context.Context, n *Node) (string, error) {
	p, r, err := h.start("gcsproxy-"+n.Name, h.Hub, filepath.Join(h.Dir, "gcsproxy-"+n.Name+".log"), &bytes.Buffer{}, nil,
		filepath.Join(h.cfg.Bin, "gcsproxy"), "-listen", "198.18.0.254:0", "-upstream", h.EmuBase,
		"-first-byte", h.cfg.FirstByte.String(), "-rate", h.cfg.Rate,
		"-upload-rate", cmp.Or(h.cfg.UploadRate, "0"))
	if err != nil {
		return "", err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	url, err := firstLine(r, "gcsproxy", 30*time.Second)
	return strings.TrimSuffix(url, "/"), err
}

// writeConfig writes node n's config and key file.
func (n *Node) writeConfig() (string, error) {
	if err := os.MkdirAll(filepath.Join(n.Dir, "disk"), 0o755); err != nil {
		return "", err
	}
	keyFile := filepath.Join(n.Dir, "fleet.key")
	if err := os.WriteFile(keyFile, []byte(n.KeyHex+"\n"), 0o600); err != nil {
		return "", err
	}
	c := n.h.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "sources:\n  - uri: %s\n", n.h.URI())
	fmt.Fprintf(&b, "tiers:\n  disk: {dir: %s, max: %s}\n  shm: {dir: none}\n", filepath.Join(n.Dir, "disk"), c.DiskMax)
	fmt.Fprintf(&b, "fetch: {endpoint: %q, connections: %d}\n", n.Proxy+"/storage/v1/", c.Connections)
	fmt.Fprintf(&b, "control: {socket: %s}\nmetrics: {listen: none}\ngpu: none\n", n.Socket)
	if !c.NoFleet {
		fmt.Fprintf(&b, "fleet:\n  name: %s\n  listen: %s:7946\n  peer_listen: %s:7947\n  join: [198.18.0.1:7946]\n  key_file: %s\n",
			n.Name, n.IP, n.IP, keyFile)
		if c.NoPeerBatch {
			b.WriteString("  peer_batch: false\n")
		}
	}
	path := filepath.Join(n.Dir, "cacheagent.yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// ProxyBytes is the body bytes n's GCS proxy has served
// (/_linkshape/status).
func (n *Node) ProxyBytes(ctx context.Context) (int64, error) {
	out, err := n.h.Exec(ctx, n.h.Hub, "curl", "-sS", "--max-time", "5", n.Proxy+"/_linkshape/status")
	if err != nil {
		return 0, err
	}
	var st struct {
		Stats struct {
			BytesServed int64 `json:"bytes_served"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return 0, fmt.Errorf("proxy status: %w: %s", err, out)
	}
	return st.Stats.BytesServed, nil
}

// GCSBytes sums the bytes every node's proxy has served.
func (h *Harness) GCSBytes(ctx context.Context) (int64, []int64, error) {
	var sum int64
	per := make([]int64, len(h.Nodes))
	for i, n := range h.Nodes {
		b, err := n.ProxyBytes(ctx)
		if err != nil {
			return 0, nil, err
		}
		per[i], sum = b, sum+b
	}
	return sum, per, nil
}

// Upload writes body as object name through the emulator (a new
// generation), from inside the hub.
func (h *Harness) Upload(ctx context.Context, name string, body []byte) error {
	f := filepath.Join(h.Dir, "upload-"+strings.ReplaceAll(name, "/", "_"))
	if err := os.WriteFile(f, body, 0o644); err != nil {
		return err
	}
	defer os.Remove(f)
	url := fmt.Sprintf("%s/upload/storage/v1/b/%s/o?uploadType=media&name=%s", h.EmuBase, h.cfg.Bucket,
		strings.ReplaceAll(name, "/", "%2F"))
	_, err := h.Exec(ctx, h.Hub, "curl", "-sS", "--fail", "--max-time", "30", "-X", "POST",
		"-H", "Content-Type: application/octet-stream", "--data-binary", "@"+f, url)
	return err
}

// Close kills and reaps every process and deletes the namespaces. It is
// safe to call more than once and from a signal handler's goroutine.
func (h *Harness) Close() error {
	h.cleanMu.Lock()
	defer h.cleanMu.Unlock()
	h.mu.Lock()
	h.closed = true
	procs := h.procs
	h.procs = nil
	ns := h.nsMade
	h.nsMade = nil
	h.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if p.cmd.Process != nil {
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGCONT) // a stopped one must see the KILL
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			h.logf("fleettest %s: %s not reaped after SIGKILL", h.ID, p.name)
		}
	}
	var errs []error
	for i := len(ns) - 1; i >= 0; i-- {
		killNSPids(ns[i])
		if err := run("ip", "netns", "del", ns[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if h.ID != "" {
		os.Remove(filepath.Join(stateDir, h.ID))
	}
	untrack(h)
	if h.Dir != "" && os.Getenv("FLEETTEST_KEEP") == "" {
		os.RemoveAll(h.Dir)
	}
	return errors.Join(errs...)
}

var leftoverRE = regexp.MustCompile(`^` + Prefix + `([0-9a-f]{4})(h|n[0-9]+)$`)
