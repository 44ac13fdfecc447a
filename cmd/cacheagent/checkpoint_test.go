package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// checkpointFiles is a DCP-style checkpoint: metadata, shards (one larger
// than the test's 1 MiB parts), a torch.save file, a nested file.
func checkpointFiles() map[string][]byte {
	return map[string][]byte{
		".metadata":       []byte(`{"planner": "default"}`),
		"__0_0.distcp":    emulator.Pattern(11, 3<<20+3),
		"__1_0.distcp":    emulator.Pattern(12, 900<<10),
		"model.pt":        emulator.Pattern(13, 1<<20+7),
		"optim/state.bin": emulator.Pattern(14, 5000),
	}
}

// writeFiles writes files under dir.
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointSIGKILL saves a checkpoint through the daemon, SIGKILLs
// the daemon while the upload is in flight, and starts it again on the same
// cache: the save resumes and commits exactly once, the objects are the
// files, nothing of the upload (claim, parts) is left, a second save of the
// prefix is refused, and list, status and restore see the checkpoint.
func TestCheckpointSIGKILL(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	var once sync.Once
	inFlight := make(chan struct{})
	s.SetUploadFaults(func(r *http.Request, n int) emulator.Fault {
		if n == 4 {
			once.Do(func() { close(inFlight) })
			return emulator.Fault{HeaderWait: time.Minute} // held until the daemon is gone
		}
		return emulator.Fault{}
	})
	dir := t.TempDir()
	cfg := daemonConfig(dir, s.Endpoint(), "checkpoint: {connections: 2, part_size: 1MiB}\n")
	p := startServe(t, dir, cfg)
	files := checkpointFiles()
	src := filepath.Join(dir, "ckpt-src")
	writeFiles(t, src, files)
	const uri = "gs://bkt/run1/step-10/"
	out, err := p.cli(t, "checkpoint", "save", src, uri, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ State string }
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.State != "local" {
		t.Fatalf("save printed %q (%v); want state local", out, err)
	}
	select {
	case <-inFlight:
	case <-time.After(waitLimit):
		t.Fatal("the upload never reached its 4th request")
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	s.SetUploadFaults(nil)

	p = startServe(t, dir, cfg)
	if _, err := p.cli(t, "checkpoint", "wait", uri, "--durability", "gcs", "--timeout", "1m"); err != nil {
		t.Fatal(err)
	}
	gcs, err := fetch.NewGCS(context.Background(), fetch.GCSConfig{Endpoint: s.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer gcs.Close()
	var names []string
	for a, err := range gcs.List(context.Background(), "bkt", "run1/") {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.TrimPrefix(a.Name, "run1/step-10/"))
		if want, ok := files[strings.TrimPrefix(a.Name, "run1/step-10/")]; ok {
			if got := readAll(t, gcs, a.Object); !bytes.Equal(got, want) {
				t.Errorf("%s differs from the file saved", a.Name)
			}
		}
	}
	if len(names) != len(files)+1 {
		t.Errorf("objects under the run: %q; want the %d files and one manifest", names, len(files))
	}

	// A second save of the committed prefix is refused; GCS is unchanged.
	src2 := filepath.Join(dir, "ckpt-src2")
	writeFiles(t, src2, map[string][]byte{"x": []byte("x")})
	if _, err := p.cli(t, "checkpoint", "save", src2, uri); err == nil || !strings.Contains(err.Error(), "committed") {
		t.Errorf("a second save of %s: %v; want a refusal", uri, err)
	}
	if _, err := os.Stat(filepath.Join(src2, "x")); err != nil {
		t.Errorf("a refused save moved its file: %v", err)
	}

	out, err = p.cli(t, "checkpoint", "list", "gs://bkt/run1/", "--json")
	var list control.Checkpoints
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Checkpoints) != 1 || list.Checkpoints[0].URI != uri {
		t.Fatalf("list: %q, %v", out, err)
	}
	out, err = p.cli(t, "checkpoint", "status", "--json")
	var st control.Checkpoints
	if err != nil || json.Unmarshal([]byte(out), &st) != nil || len(st.Checkpoints) != 1 || st.Checkpoints[0].State != "gcs" {
		t.Fatalf("status: %q, %v", out, err)
	}
	restored := filepath.Join(dir, "restored")
	gets := s.MediaGETs()
	if _, err := p.cli(t, "checkpoint", "restore", uri, restored); err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(restored, filepath.FromSlash(name))); err != nil || !bytes.Equal(got, want) {
			t.Errorf("restored %s: %v", name, err)
		}
	}
	if n := s.MediaGETs() - gets; n > 1 {
		t.Errorf("the restore made %d media GETs; want the manifest's only", n)
	}
}

// readAll reads object o whole.
func readAll(t *testing.T, g *fetch.GCS, o object.Object) []byte {
	t.Helper()
	a, err := g.Stat(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.NewRangeReader(context.Background(), a.Object, 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckpointStandalone saves, lists and restores without a daemon:
// save returns once the checkpoint is committed.
func TestCheckpointStandalone(t *testing.T) {
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	dir := t.TempDir()
	cache := filepath.Join(dir, "cache")
	files := checkpointFiles()
	src := filepath.Join(dir, "src")
	writeFiles(t, src, files)
	const uri = "gs://bkt/solo/step-1/"
	out, err := run(t, s.Endpoint(), cache, "checkpoint", "save", src, uri)
	if err != nil || !strings.Contains(out, "gcs") {
		t.Fatalf("save: %q, %v", out, err)
	}
	if out, err := run(t, s.Endpoint(), cache, "checkpoint", "list", "gs://bkt/solo/"); err != nil || !strings.Contains(out, uri) {
		t.Fatalf("list: %q, %v", out, err)
	}
	if _, err := run(t, s.Endpoint(), cache, "checkpoint", "status"); err == nil {
		t.Error("status without a daemon succeeded")
	}
	restored := filepath.Join(dir, "out")
	if _, err := run(t, s.Endpoint(), cache, "checkpoint", "restore", uri, restored); err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(restored, filepath.FromSlash(name))); err != nil || !bytes.Equal(got, want) {
			t.Errorf("restored %s: %v", name, err)
		}
	}
}
