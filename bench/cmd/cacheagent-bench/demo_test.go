package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// demoSmall are demo flags for a dataset of a few MiB that runs in seconds.
var demoSmall = []string{"demo", "--shards", "4", "--samples", "512", "--sample-bytes", "4KiB", "--batch", "32"}

// demoCmd returns the demo command with args, its temporary directory set
// to tmp so that anything it leaves behind shows.
func demoCmd(tmp string, args ...string) *exec.Cmd {
	cmd := exec.Command(binPath, append([]string{"--cache-dir", filepath.Join(tmp, "ignored")}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	return cmd
}

// shmDirOf returns the shm directory the demo's output names ("" if none).
func shmDirOf(t *testing.T, out string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^cache: disk \S+, shm (\S+)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output names no cache directories:\n%s", out)
	}
	if m[1] == "none" {
		return ""
	}
	return m[1]
}

// checkCleanedUp fails t if the demo left anything in tmp or shm.
func checkCleanedUp(t *testing.T, tmp, shm string) {
	t.Helper()
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("demo left %v behind in TMPDIR", ents)
	}
	if shm != "" {
		if _, err := os.Stat(shm); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("demo left its shm directory %s behind: %v", shm, err)
		}
	}
}

// TestDemo runs the embedded demo, small, in-process (so that the race
// detector sees it), and checks that it reports every epoch of both
// readers, the summary and the mount, and leaves nothing behind. In CI the
// FUSE part must run.
func TestDemo(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	var out bytes.Buffer
	root := newRootCmd()
	root.SetArgs(append([]string{"--cache-dir", filepath.Join(tmp, "ignored")}, demoSmall...))
	root.SetOut(&out)
	root.SetErr(&out)
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	s := out.String()
	for _, re := range []string{
		`(?m)^\s+1\s+direct GCS\s`, `(?m)^\s+3\s+direct GCS\s`,
		`(?m)^\s+1\s+agent, cold\s`, `(?m)^\s+2\s+agent, (shm|disk)\s.*\s0 B\s+(100%|-)\s`, `(?m)^\s+3\s+agent, (shm|disk)\s`,
		`warm epochs \((shm|disk)\): [0-9.]+× the direct reader's speed`,
		`cold epoch: [0-9.]+× the link-limited ideal of [0-9.]+ s`,
		`(?m)^mount: (read .* identical to the GCS object|skipped: .*)$`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf("demo output does not match %q:\n%s", re, s)
		}
	}
	if strings.Contains(s, "mount: skipped") {
		if os.Getenv("CI") == "true" {
			t.Errorf("the demo skipped its FUSE part in CI:\n%s", s)
		} else {
			t.Logf("the demo skipped its FUSE part: %s", regexp.MustCompile(`mount: skipped.*`).FindString(s))
		}
	}
	checkCleanedUp(t, tmp, shmDirOf(t, s))
}

// TestDemoBadFlags checks that impossible sizes are refused with an error
// naming the flag.
func TestDemoBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shards", "0"}, "--shards"},
		{[]string{"--shards", "8", "--samples", "4"}, "--samples"},
		{[]string{"--batch", "0"}, "--batch"},
		{[]string{"--epochs", "-1"}, "--epochs"},
		{[]string{"--step", "-1s"}, "--step"},
		{[]string{"--sample-bytes", "0"}, "--sample-bytes"},
	} {
		tmp := t.TempDir()
		out, err := demoCmd(tmp, append([]string{"demo"}, tc.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("demo %v: %v, output %q; want an error naming %s", tc.args, err, out, tc.want)
		}
		checkCleanedUp(t, tmp, "")
	}
}

// TestDemoInterrupt interrupts the demo while it reads over a slow link and
// checks that it exits with status 130 and removes everything it created.
func TestDemoInterrupt(t *testing.T) {
	tmp := t.TempDir()
	cmd := demoCmd(tmp, append(demoSmall, "--link-rate", "64KiB")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() { // until the table's header: the readers are at work
		out.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "epoch") {
			break
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).ExitStatus() != 130 {
		t.Errorf("interrupted demo: %v; want exit status 130\nstdout:\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	checkCleanedUp(t, tmp, shmDirOf(t, out.String()))
}
