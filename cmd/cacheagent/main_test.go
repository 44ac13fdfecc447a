package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
)

// binPath is the cacheagent binary built once by TestMain.
var binPath string

func TestMain(m *testing.M) {
	if spec := os.Getenv(holdEnv); spec != "" {
		os.Exit(holdLease(spec))
	}
	dir, err := os.MkdirTemp("", "cacheagent-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "cacheagent")
	out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the binary against the emulator and cache dir and returns stdout.
func run(t *testing.T, endpoint, cacheDir string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, append([]string{"--endpoint", endpoint, "--cache-dir", cacheDir}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("cacheagent %s: %w\nstderr: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

func dataset(bucket string, names []string, size int) []fakestorage.Object {
	objs := make([]fakestorage.Object, len(names))
	for i, n := range names {
		objs[i] = fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: n},
			Content:     emulator.Pattern(uint64(i)+7, size+i),
		}
	}
	return objs
}

func startEmulator(t *testing.T, opts emulator.Options) *emulator.Server {
	t.Helper()
	s, err := emulator.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestCLIRoundTrip covers prefetch, ls --json, cat, status --json, pin, evict
// and unpin, with hostile object names.
func TestCLIRoundTrip(t *testing.T) {
	names := []string{"d/plain.bin", "d/../../x", "d/a/./b", "d/.", "d/new\nline", "d/ünï cødé",
		"d/" + strings.Repeat("n", 1022)}
	objs := dataset("bkt", names, 100_000)
	s := startEmulator(t, emulator.Options{Objects: objs})
	parent := t.TempDir()
	cache := filepath.Join(parent, "cache")

	if _, err := run(t, s.Endpoint(), cache, "prefetch", "gs://bkt/d/"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, s.Endpoint(), cache, "ls", "--json", "gs://bkt/d/")
	if err != nil {
		t.Fatal(err)
	}
	var rows []lsEntry
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("ls --json: %v\n%s", err, out)
	}
	if len(rows) != len(names) {
		t.Fatalf("ls: %d rows; want %d", len(rows), len(names))
	}
	for _, r := range rows {
		if r.Tier != "disk" || r.Generation == 0 {
			t.Errorf("ls row %q: tier %q generation %d; want disk and a generation", r.Name, r.Tier, r.Generation)
		}
	}
	gets := s.MediaGETs()
	for _, o := range objs {
		got, err := run(t, s.Endpoint(), cache, "cat", "gs://bkt/"+o.Name)
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
	// Nothing outside the cache dir.
	ents, _ := os.ReadDir(parent)
	if len(ents) != 1 || ents[0].Name() != "cache" {
		t.Errorf("parent dir holds %v; want only cache/", ents)
	}

	out, err = run(t, s.Endpoint(), cache, "status", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st statusReport
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(st.Tiers) == 0 || st.Tiers[0].Entries != int64(len(names)) || st.Tiers[0].UsedBytes <= 0 {
		t.Errorf("status = %+v; want %d disk entries with used bytes", st, len(names))
	}

	if out, err = run(t, s.Endpoint(), cache, "pin", "gs://bkt/d/a"); err != nil || !strings.Contains(out, "pinned 1 ") {
		t.Errorf("pin: %q, %v; want 1 pinned", out, err)
	}
	if _, err = run(t, s.Endpoint(), cache, "evict", "gs://bkt/d/"); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, s.Endpoint(), cache, "ls", "--json", "gs://bkt/d/")
	if err != nil {
		t.Fatal(err)
	}
	rows = nil
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		want := "none"
		if r.Name == "d/a/./b" {
			want = "disk" // pinned: evict leaves it
		}
		if r.Tier != want {
			t.Errorf("after evict, %q is in tier %q; want %q", r.Name, r.Tier, want)
		}
	}
	if _, err = run(t, s.Endpoint(), cache, "unpin", "gs://bkt/d/"); err != nil {
		t.Fatal(err)
	}
}

// TestPrefetchSIGKILL kills a prefetch mid-download and runs it again: the
// second run finishes, and every object reads back intact.
func TestPrefetchSIGKILL(t *testing.T) {
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("set/shard-%02d", i)
	}
	objs := dataset("bkt", names, 1<<20)
	inFlight := make(chan struct{})
	s := startEmulator(t, emulator.Options{Objects: objs})
	s.SetFaults(func(r *http.Request, n int) emulator.Fault {
		if n == 6 {
			close(inFlight)
			// Hold this response until the client is gone: the kill lands mid-download.
			return emulator.Fault{StallAt: 300_000, Stall: time.Minute}
		}
		return emulator.Fault{}
	})
	cache := filepath.Join(t.TempDir(), "cache")
	cmd := exec.Command(binPath, "--endpoint", s.Endpoint(), "--cache-dir", cache, "--connections", "1", "--slice", "256KiB",
		"prefetch", "gs://bkt/set/")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inFlight:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("prefetch never reached its 6th range read")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("prefetch ended with %v; want killed by SIGKILL", err)
	}
	s.SetFaults(nil)

	if _, err := run(t, s.Endpoint(), cache, "prefetch", "gs://bkt/set/"); err != nil {
		t.Fatal(err)
	}
	gets := s.MediaGETs()
	for _, o := range objs {
		got, err := run(t, s.Endpoint(), cache, "cat", "gs://bkt/"+o.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal([]byte(got), o.Content) {
			t.Errorf("cat %s after SIGKILL + re-run: bytes differ", o.Name)
		}
	}
	if d := s.MediaGETs() - gets; d != 0 {
		t.Errorf("reads after the re-run made %d media GETs; want 0", d)
	}
	tmp, _ := filepath.Glob(filepath.Join(cache, "data", "tmp", "*"))
	if len(tmp) != 0 {
		t.Errorf("temp files left after re-run: %v", tmp)
	}
}

// TestSecondProcessLocked checks that a second process gets a clear error
// naming the owner's pid while one holds the cache dir.
func TestSecondProcessLocked(t *testing.T) {
	objs := dataset("bkt", []string{"slow/a"}, 4<<20)
	hold := make(chan struct{})
	var once sync.Once
	s := startEmulator(t, emulator.Options{Objects: objs, Faults: func(r *http.Request, n int) emulator.Fault {
		once.Do(func() { close(hold) })
		return emulator.Fault{HeaderWait: time.Minute}
	}})
	cache := filepath.Join(t.TempDir(), "cache")
	owner := exec.Command(binPath, "--endpoint", s.Endpoint(), "--cache-dir", cache, "prefetch", "gs://bkt/slow/")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { owner.Process.Kill(); owner.Wait() }()
	select {
	case <-hold:
	case <-time.After(time.Minute):
		t.Fatal("owner never started downloading")
	}
	_, err := run(t, s.Endpoint(), cache, "status")
	if err == nil {
		t.Fatal("status while another process owns the cache dir succeeded; want an error")
	}
	if want := fmt.Sprint(owner.Process.Pid); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name the owner's pid %s", err, want)
	}
}
