package fleettest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func runAll(cmds [][]string) error {
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func (h *Harness) addNS(ns string) error {
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	h.mu.Lock()
	h.nsMade = append(h.nsMade, ns)
	h.mu.Unlock()
	return run("ip", "-n", ns, "link", "set", "lo", "up")
}

// network makes the hub, the bridge, the node namespaces and their links,
// and the tc caps.
func (h *Harness) network() error {
	br := Prefix + h.ID + "br"
	if err := h.addNS(h.Hub); err != nil {
		return err
	}
	if err := runAll([][]string{
		{"ip", "-n", h.Hub, "link", "add", br, "type", "bridge"},
		{"ip", "-n", h.Hub, "link", "set", br, "up"},
		{"ip", "-n", h.Hub, "addr", "add", "198.18.0.254/24", "dev", br},
	}); err != nil {
		return err
	}
	for i := 1; i <= h.cfg.Nodes; i++ {
		ns := fmt.Sprintf("%s%sn%d", Prefix, h.ID, i)
		v, p := fmt.Sprintf("%s%sv%d", Prefix, h.ID, i), fmt.Sprintf("%s%sp%d", Prefix, h.ID, i)
		if err := h.addNS(ns); err != nil {
			return err
		}
		cmds := [][]string{
			{"ip", "link", "add", v, "netns", ns, "type", "veth", "peer", "name", p, "netns", h.Hub},
			{"ip", "-n", h.Hub, "link", "set", p, "master", br},
			{"ip", "-n", h.Hub, "link", "set", p, "up"},
			{"ip", "-n", ns, "addr", "add", fmt.Sprintf("198.18.0.%d/24", i), "dev", v},
			{"ip", "-n", ns, "link", "set", v, "up"},
		}
		if g, pr := h.cfg.GCSMbit, h.cfg.PeerMbit; g > 0 || pr > 0 {
			// Downlink to node i (the hub port's egress): GCS traffic in
			// class 1:1, peers' in the default class 1:99.
			gr, prr := "20gbit", "20gbit"
			if g > 0 {
				gr = fmt.Sprintf("%dmbit", g)
			}
			if pr > 0 {
				prr = fmt.Sprintf("%dmbit", pr)
			}
			tcn := func(ns string, args ...string) []string {
				return append([]string{"ip", "netns", "exec", ns, "tc"}, args...)
			}
			cmds = append(cmds,
				tcn(h.Hub, "qdisc", "add", "dev", p, "root", "handle", "1:", "htb", "default", "99", "r2q", "1000"),
				tcn(h.Hub, "class", "add", "dev", p, "parent", "1:", "classid", "1:1", "htb", "rate", gr),
				tcn(h.Hub, "class", "add", "dev", p, "parent", "1:", "classid", "1:99", "htb", "rate", prr),
				tcn(h.Hub, "filter", "add", "dev", p, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
					"match", "ip", "src", "198.18.0.254/32", "flowid", "1:1"),
				// Uplink from node i: everything at the peer rate.
				tcn(ns, "qdisc", "add", "dev", v, "root", "handle", "1:", "htb", "default", "1", "r2q", "1000"),
				tcn(ns, "class", "add", "dev", v, "parent", "1:", "classid", "1:1", "htb", "rate", prr),
			)
		}
		if err := runAll(cmds); err != nil {
			return err
		}
	}
	h.logf("fleettest %s: hub %s and %d nodes up", h.ID, h.Hub, h.cfg.Nodes)
	return nil
}

// Exec runs argv in namespace ns and returns its combined output.
func (h *Harness) Exec(ctx context.Context, ns string, argv ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, argv...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s in %s: %v: %s", strings.Join(argv, " "), ns, err, bytes.TrimSpace(out))
	}
	return out, nil
}

// killNSPids SIGKILLs every process left in namespace ns.
func killNSPids(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// RemoveLeftovers deletes the namespaces (and kills the processes in
// them) and the working directories of earlier runs whose owner process
// is gone. Runs whose owner is
// alive (another test running now) are left alone.
func RemoveLeftovers(logf func(string, ...any)) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		m := leftoverRE.FindStringSubmatch(f[0])
		if m == nil || ownerAlive(m[1]) {
			continue
		}
		killNSPids(f[0])
		if err := run("ip", "netns", "del", f[0]); err == nil && logf != nil {
			logf("fleettest: removed leftover namespace %s", f[0])
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), Prefix+"[0-9a-f][0-9a-f][0-9a-f][0-9a-f]-*"))
	for _, d := range dirs {
		if id := strings.TrimPrefix(filepath.Base(d), Prefix)[:4]; !ownerAlive(id) {
			os.RemoveAll(d)
		}
	}
	ents, _ := os.ReadDir(stateDir)
	for _, e := range ents {
		if !ownerAlive(e.Name()) {
			os.Remove(filepath.Join(stateDir, e.Name()))
		}
	}
}

// ownerAlive says whether run id's owner process still runs.
func ownerAlive(id string) bool {
	b, err := os.ReadFile(filepath.Join(stateDir, id))
	if err != nil {
		return false // no owner on record: a leftover
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}
