package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

// TestServeCLI runs the CLI through the daemon's socket: status, prefetch
// --wait, ls, cat, pin, evict, unpin, prefetch without --wait and jobs;
// then a standalone command on the daemon's cache dir without its socket;
// then SIGTERM.
func TestServeCLI(t *testing.T) {
	names := []string{"d/plain.bin", "d/../../x", "d/a/./b", "d/new\nline", "d/" + strings.Repeat("n", 1000)}
	objs := dataset("bkt", names, 100_000)
	s := startEmulator(t, emulator.Options{Objects: objs})
	dir := t.TempDir()
	p := startServe(t, dir, daemonConfig(dir, s.Endpoint(), ""))

	fi, err := os.Stat(p.socket)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket: %v, %v; want a socket of mode 0660", fi.Mode(), err)
	}
	if st := p.status(t); st.PID != p.cmd.Process.Pid || st.CacheDir != p.cacheDir || st.Tiers[0].Entries != 0 {
		t.Errorf("status = %+v; want the daemon's pid %d and an empty cache in %s", st, p.cmd.Process.Pid, p.cacheDir)
	}
	if _, err := p.cli(t, "prefetch", "--wait", "gs://bkt/d/"); err != nil {
		t.Fatal(err)
	}
	checkTiers(t, p, "gs://bkt/d/", map[string]string{})
	gets := s.MediaGETs()
	for _, o := range objs {
		got, err := p.cli(t, "cat", "gs://bkt/"+o.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(got), o.Content) {
			t.Errorf("cat %q: %d bytes differ from the object's %d", o.Name, len(got), len(o.Content))
		}
	}
	if d := s.MediaGETs() - gets; d != 0 {
		t.Errorf("cat of cached objects made %d media GETs; want 0", d)
	}
	if out, err := p.cli(t, "pin", "gs://bkt/d/a"); err != nil || !strings.Contains(out, "pinned 1 ") {
		t.Errorf("pin: %q, %v; want 1 pinned", out, err)
	}
	if out, err := p.cli(t, "evict", "gs://bkt/d/"); err != nil || !strings.Contains(out, "evicted 4 ") {
		t.Errorf("evict: %q, %v; want 4 evicted", out, err)
	}
	checkTiers(t, p, "gs://bkt/d/", map[string]string{"d/plain.bin": "none", "d/../../x": "none",
		"d/new\nline": "none", "d/" + strings.Repeat("n", 1000): "none"})
	if out, err := p.cli(t, "unpin", "gs://bkt/d/"); err != nil || !strings.Contains(out, "unpinned 1 ") {
		t.Errorf("unpin: %q, %v; want 1 unpinned", out, err)
	}
	out, err := p.cli(t, "prefetch", "gs://bkt/d/")
	if err != nil || !strings.HasPrefix(out, "job ") {
		t.Fatalf("prefetch without --wait: %q, %v; want a job id", out, err)
	}
	id := strings.Fields(out)[1]
	id = strings.TrimSuffix(id, ":")
	if out, err := p.cli(t, "jobs", id, "--wait", "--json"); err != nil || !strings.Contains(out, `"state": "done"`) {
		t.Errorf("jobs %s --wait: %q, %v; want it done", id, out, err)
	}
	// A job that fails: --wait exits non-zero, so `jobs ID --wait && train` does not train on a cold cache.
	if out, err = p.cli(t, "prefetch", "gs://no-such-bucket/d/"); err != nil || !strings.HasPrefix(out, "job ") {
		t.Fatalf("prefetch of a missing bucket without --wait: %q, %v; want a job id", out, err)
	}
	id = strings.TrimSuffix(strings.Fields(out)[1], ":")
	if out, err := p.cli(t, "jobs", id, "--wait"); err == nil || !strings.Contains(out, "failed") {
		t.Errorf("jobs %s --wait on a failing job: %q, %v; want it failed and an error", id, out, err)
	}

	// Standalone on the daemon's cache dir, with no daemon on its socket.
	_, err = run(t, s.Endpoint(), p.cacheDir, "--socket", filepath.Join(t.TempDir(), "none.sock"), "status")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprint(p.cmd.Process.Pid)) || !strings.Contains(err.Error(), "none.sock") {
		t.Errorf("standalone status on a daemon's cache dir: %v; want an error naming pid %d and the socket", err, p.cmd.Process.Pid)
	}
	if err := p.terminate(t); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v; want status 0", err)
	}
	p.awaitNote(t, "STOPPING=1")
}

// checkTiers lists u through the daemon and checks each object's tier:
// want[name], or "disk" for names not in want.
func checkTiers(t *testing.T, p *daemonProc, u string, want map[string]string) {
	t.Helper()
	out, err := p.cli(t, "ls", "--json", u)
	if err != nil {
		t.Fatal(err)
	}
	var rows []lsEntry
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	for _, r := range rows {
		w, ok := want[r.Name]
		if !ok {
			w = "disk"
		}
		if r.Tier != w || r.Generation == 0 {
			t.Errorf("ls %q: tier %q generation %d; want %q and a generation", r.Name, r.Tier, r.Generation, w)
		}
	}
}

// TestServeSIGTERMMidDownload stops the daemon with SIGTERM while it
// downloads a large object over a slow link, restarts it, and checks that
// the download completes and every byte verifies.
func TestServeSIGTERMMidDownload(t *testing.T) {
	objs := dataset("bkt", []string{"big/a", "big/b"}, 8<<20)
	inFlight := make(chan struct{})
	var once sync.Once
	s := startEmulator(t, emulator.Options{Objects: objs, Shape: emulator.Shape{BytesPerSec: 8 << 20}})
	s.SetFaults(func(_ *http.Request, n int) emulator.Fault {
		if n == 5 {
			once.Do(func() { close(inFlight) })
			return emulator.Fault{StallAt: 100_000, Stall: time.Hour} // until the request is cancelled
		}
		return emulator.Fault{}
	})
	dir := t.TempDir()
	cfg := daemonConfig(dir, s.Endpoint(), "sources: [{uri: gs://bkt/big/, warm: true}]\n")
	p := startServe(t, dir, cfg)
	select {
	case <-inFlight:
	case <-time.After(waitLimit):
		t.Fatal("the warm prefetch never reached its 5th range read")
	}
	if err := p.terminate(t); err != nil {
		t.Fatalf("exit after SIGTERM mid-download: %v; want status 0", err)
	}
	p.awaitNote(t, "STOPPING=1")
	if tmp, _ := filepath.Glob(filepath.Join(p.cacheDir, "data", "tmp", "*")); len(tmp) != 0 {
		t.Errorf("temp files left after SIGTERM: %v", tmp)
	}

	s.SetFaults(nil)
	s.SetShape(emulator.Shape{})
	p = startServe(t, dir, cfg)
	if _, err := p.cli(t, "prefetch", "--wait", "gs://bkt/big/"); err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		got, err := p.cli(t, "cat", "gs://bkt/"+o.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(got), o.Content) {
			t.Errorf("cat %s after SIGTERM and restart: bytes differ", o.Name)
		}
	}
}

// TestServeReload edits the config file (rename over it, as editors do):
// the budget shrinks and eviction follows; then an invalid edit is refused
// and a SIGHUP reload changes the connection budget.
func TestServeReload(t *testing.T) {
	objs := dataset("bkt", []string{"r/0", "r/1", "r/2", "r/3", "r/4", "r/5"}, 1<<20)
	s := startEmulator(t, emulator.Options{Objects: objs})
	dir := t.TempDir()
	base := daemonConfig(dir, s.Endpoint(), "")
	p := startServe(t, dir, strings.Replace(base, "{dir:", "{max: 64MiB, dir:", 1))
	if _, err := p.cli(t, "prefetch", "--wait", "gs://bkt/r/"); err != nil {
		t.Fatal(err)
	}
	if st := p.status(t); st.Tiers[0].Entries != 6 {
		t.Fatalf("cached %d objects; want 6", st.Tiers[0].Entries)
	}

	mark := p.logs.mark()
	replaceFile(t, p.config, strings.Replace(base, "{dir:", "{max: 2.5MiB, dir:", 1))
	rec := p.logs.await(t, mark, "config reloaded")
	if fmt.Sprint(rec["changed"]) != "[tiers.disk.max]" {
		t.Errorf("reload changed %v; want [tiers.disk.max]", rec["changed"])
	}
	st := p.status(t)
	if d := st.Tiers[0]; d.MaxBytes != 5<<19 || d.UsedBytes > d.MaxBytes || d.Evictions < 4 {
		t.Errorf("after shrinking the budget: %+v; want max 2.5MiB, used within it, 4+ evictions", d)
	}

	mark = p.logs.mark()
	replaceFile(t, p.config, base+"tiers: {}\n")
	p.logs.await(t, mark, "config reload failed; keeping the running config")
	if st := p.status(t); st.Tiers[0].MaxBytes != 5<<19 {
		t.Errorf("after an invalid edit, max is %d; want the running 2.5MiB", st.Tiers[0].MaxBytes)
	}

	mark = p.logs.mark()
	replaceFile(t, p.config, strings.Replace(base, "connections: 4", "connections: 9", 1))
	rec = p.logs.await(t, mark, "config reloaded")
	if !strings.Contains(fmt.Sprint(rec["changed"]), "fetch.connections") {
		t.Errorf("reload changed %v; want fetch.connections among them", rec["changed"])
	}
	if st := p.status(t); st.Fetch.Connections != 9 {
		t.Errorf("connections after reload = %d; want 9", st.Fetch.Connections)
	}

	mark = p.logs.mark()
	p.cmd.Process.Signal(syscall.SIGHUP)
	for rec["trigger"] != "SIGHUP" {
		rec = p.logs.await(t, mark, "config reloaded")
		mark = p.logs.mark()
	}
}

// replaceFile writes data to a temp file beside path and renames it over
// path, as editors do.
func replaceFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestServeMetricsAndNotify scrapes /metrics (parsed as Prometheus text)
// after some traffic, checks /healthz and /readyz, and checks the systemd
// notifications: READY=1, STATUS=, WATCHDOG=1 and STOPPING=1.
func TestServeMetricsAndNotify(t *testing.T) {
	objs := dataset("bkt", []string{"m/0", "m/1"}, 50_000)
	s := startEmulator(t, emulator.Options{Objects: objs})
	dir := t.TempDir()
	p := startServe(t, dir, daemonConfig(dir, s.Endpoint(), ""), "WATCHDOG_USEC=200000")
	if st := p.awaitNote(t, "STATUS="); !strings.Contains(st, "disk ") {
		t.Errorf("status note %q; want tier usage", st)
	}
	p.awaitNote(t, "WATCHDOG=1")
	if _, err := p.cli(t, "prefetch", "--wait", "gs://bkt/m/"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.cli(t, "cat", "gs://bkt/m/0"); err != nil {
		t.Fatal(err)
	}
	addr := p.status(t).MetricsAddr
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s; want 200", path, resp.Status)
		}
	}
	fams := scrape(t, "http://"+addr+"/metrics")
	for _, name := range []string{"cacheagent_tier_bytes", "cacheagent_tier_objects", "cacheagent_tier_max_bytes",
		"cacheagent_tier_hits_total", "cacheagent_tier_misses_total", "cacheagent_tier_evictions_total",
		"cacheagent_fetch_bytes_total", "cacheagent_fetch_duration_seconds", "cacheagent_fetch_retries_total",
		"cacheagent_fetch_crc_failures_total", "cacheagent_fetch_inflight", "cacheagent_fetch_waiting_slices",
		"cacheagent_fetch_small_connections", "cacheagent_fetch_small_waiting",
		"cacheagent_prefetch_pending_objects", "cacheagent_leases", "cacheagent_build_info",
		"cacheagent_control_requests_total", "process_resident_memory_bytes"} {
		if fams[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if f := fams["cacheagent_tier_objects"]; f != nil && f.GetMetric()[0].GetGauge().GetValue() != 2 {
		t.Errorf("cacheagent_tier_objects = %v; want 2", f.GetMetric()[0].GetGauge().GetValue())
	}
	if f := fams["cacheagent_fetch_retries_total"]; f != nil && len(f.GetMetric()) != 6 {
		t.Errorf("cacheagent_fetch_retries_total has %d causes; want 6", len(f.GetMetric()))
	}
	if f := fams["cacheagent_fetch_duration_seconds"]; f != nil && f.GetMetric()[0].GetHistogram().GetSampleCount() != 2 {
		t.Errorf("fetch duration histogram counted %d downloads; want 2", f.GetMetric()[0].GetHistogram().GetSampleCount())
	}
	if err := p.terminate(t); err != nil {
		t.Errorf("exit after SIGTERM: %v; want status 0", err)
	}
	p.awaitNote(t, "STOPPING=1")
}

// scrape parses a /metrics page as Prometheus text.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("/metrics Content-Type %q; want text/plain", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse as Prometheus text: %v", err)
	}
	return fams
}

// TestServeLeaseDroppedOnSIGKILL has a client process acquire a lease,
// evicts the object (it stays, pending, while leased), then kills the
// client with SIGKILL: the daemon releases the lease and the file goes.
func TestServeLeaseDroppedOnSIGKILL(t *testing.T) {
	objs := dataset("bkt", []string{"l/0"}, 1<<20+200_000) // not packed: a file of its own, deleted at the end
	s := startEmulator(t, emulator.Options{Objects: objs})
	dir := t.TempDir()
	p := startServe(t, dir, daemonConfig(dir, s.Endpoint(), ""))
	holder := exec.Command(os.Args[0])
	holder.Env = append(os.Environ(), holdEnv+"="+p.socket+"|bkt|l/0")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	path, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		holder.Process.Kill()
		holder.Wait()
		t.Fatalf("holder printed no lease path: %v", err)
	}
	if got, err := os.ReadFile(strings.TrimSpace(path)); err != nil || !bytes.Equal(got, objs[0].Content) {
		t.Errorf("leased file %q: %d bytes, %v; want the object", path, len(got), err)
	}
	if st := p.status(t); st.Leases != 1 || st.Sessions != 1 {
		t.Errorf("status with a holder: %d sessions, %d leases; want 1, 1", st.Sessions, st.Leases)
	}
	if out, err := p.cli(t, "evict", "gs://bkt/l/"); err != nil || !strings.Contains(out, "1 in use") {
		t.Errorf("evict while leased: %q, %v; want it pending", out, err)
	}
	if st := p.status(t); st.Tiers[0].PendingBytes == 0 {
		t.Errorf("status after evicting a leased object: %+v; want pending bytes", st.Tiers[0])
	}
	mark := p.logs.mark()
	holder.Process.Signal(syscall.SIGKILL)
	holder.Wait()
	if rec := p.logs.await(t, mark, "lease session ended"); rec["released"] != 1.0 {
		t.Errorf("session ended releasing %v leases; want 1", rec["released"])
	}
	st := p.status(t)
	if st.Leases != 0 || st.Sessions != 0 || st.Tiers[0].PendingBytes != 0 || st.Tiers[0].InUseBytes != 0 {
		t.Errorf("status after SIGKILL: %d sessions, %d leases, tier %+v; want nothing held", st.Sessions,
			st.Leases, st.Tiers[0])
	}
	if _, err := os.Stat(strings.TrimSpace(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("evicted file after its holder died: %v; want deleted", err)
	}
}

// TestServeBadConfig checks that serve refuses an invalid config with the
// line of the mistake.
func TestServeBadConfig(t *testing.T) {
	p := newDaemonProc(t, "", "tiers:\n  disk: {dir: /tmp/x, max: lots}\n")
	out, err := exec.Command(binPath, "serve", "--config", p.config).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "line 2") {
		t.Errorf("serve with a bad config: %v\n%s\nwant status 1 and the line", err, out)
	}
}
