package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// binPath is the cacheagent-bench binary built once by TestMain, for the
// tests that signal it or check its exit status.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cacheagent-bench-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "cacheagent-bench")
	if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runBench runs cacheagent-bench with args in-process, standalone against
// the emulator at endpoint ("": none) on a fresh cache dir, and returns its
// stdout.
func runBench(t *testing.T, endpoint string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	root := newRootCmd()
	root.SetArgs(append([]string{"--cache-dir", filepath.Join(dir, "cache"), "--socket", filepath.Join(dir, "none.sock"),
		"--endpoint", endpoint, "--connections", "4", "--slice", "1MiB"}, args...))
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// synthEmulator serves data as gs://bkt/train/ shards.
func synthEmulator(t *testing.T, data synth.Dataset) *emulator.Server {
	t.Helper()
	s, err := emulator.Start(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	err = data.Write("train/", func(name string, b []byte) error {
		_, err := s.Put("bkt", name, b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
