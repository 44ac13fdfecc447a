package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fakeBench writes a cacheagent-bench script into dir that writes its pid,
// its path and its arguments, one a line, to a file, and exits with status
// 7. It returns the file.
func fakeBench(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "args")
	script := fmt.Sprintf("#!/bin/sh\n{ echo $$; echo \"$0\"; for a in \"$@\"; do echo \"$a\"; done; } > '%s'\nexit 7\n", out)
	if err := os.WriteFile(filepath.Join(dir, benchCommand), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// runForward runs bin with args and PATH=path, checks that it exited with
// the fake's status and was replaced by it (same pid), and returns the
// fake's path and arguments.
func runForward(t *testing.T, bin, path, out string, args ...string) []string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "PATH="+path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("cacheagent %q: %v; want exit status 7, the fake cacheagent-bench's", args, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("cacheagent %q did not run the fake cacheagent-bench: %v", args, err)
	}
	got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if pid := strconv.Itoa(cmd.Process.Pid); got[0] != pid {
		t.Errorf("cacheagent-bench ran as pid %s; want %s (exec'd in place)", got[0], pid)
	}
	return got[1:]
}

// TestForwardToBench checks that demo and bench run cacheagent-bench from
// PATH with the same arguments, flags given before the subcommand
// included, in place of the cacheagent process.
func TestForwardToBench(t *testing.T) {
	dir := t.TempDir()
	out := fakeBench(t, dir)
	fake := filepath.Join(dir, benchCommand)
	for _, tc := range []struct {
		args, want []string
	}{
		{[]string{"demo"}, []string{"demo"}},
		{[]string{"demo", "--shards", "4", "--keep", "a b"}, []string{"demo", "--shards", "4", "--keep", "a b"}},
		{[]string{"--cache-dir", "/x", "demo", "--help"}, []string{"demo", "--cache-dir", "/x", "--help"}},
		{[]string{"bench", "loader", "--json", "--samples", "8"}, []string{"loader", "--json", "--samples", "8"}},
		{[]string{"bench", "control-load", "--socket", "/s"}, []string{"control-load", "--socket", "/s"}},
		{[]string{"bench"}, nil},
	} {
		got := runForward(t, binPath, dir, out, tc.args...)
		if want := append([]string{fake}, tc.want...); !slices.Equal(got, want) {
			t.Errorf("cacheagent %q ran %q; want %q", tc.args, got, want)
		}
	}
}

// TestForwardBesideFirst checks that a cacheagent-bench beside cacheagent
// wins over one on PATH.
func TestForwardBesideFirst(t *testing.T) {
	onPath, beside := t.TempDir(), t.TempDir()
	fakeBench(t, onPath)
	out := fakeBench(t, beside)
	bin := filepath.Join(beside, "cacheagent")
	if err := os.Link(binPath, bin); err != nil {
		t.Skipf("cannot link cacheagent beside a fake cacheagent-bench: %v", err)
	}
	got := runForward(t, bin, onPath, out, "bench", "gpu")
	if want := []string{filepath.Join(beside, benchCommand), "gpu"}; !slices.Equal(got, want) {
		t.Errorf("cacheagent bench gpu ran %q; want %q", got, want)
	}
}

// TestForwardNotFound checks the error without cacheagent-bench: it says
// how to build it beside cacheagent and how to run it from a checkout.
func TestForwardNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"demo", "--shards", "4"}, []string{"cacheagent demo runs cacheagent-bench",
			`go build -o "$(dirname $(command -v cacheagent))/cacheagent-bench" ./bench/cmd/cacheagent-bench`,
			"go run ./bench/cmd/cacheagent-bench demo"}},
		{[]string{"bench", "gpu"}, []string{"cacheagent bench runs cacheagent-bench",
			"go run ./bench/cmd/cacheagent-bench gpu"}},
		{[]string{"bench"}, []string{"go run ./bench/cmd/cacheagent-bench --help"}},
	} {
		root := newRootCmd()
		root.SetArgs(tc.args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if !errors.Is(err, exec.ErrNotFound) {
			t.Errorf("cacheagent %q without cacheagent-bench: %v; want exec.ErrNotFound", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("cacheagent %q: error %q does not say %q", tc.args, err, w)
			}
		}
	}
}
