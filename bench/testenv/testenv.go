// Package testenv tells tests what this machine offers them, Debian's
// Python and its modules, and skips a test that needs what is missing; with
// CI=true it fails the test instead, since CI must run everything.
package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Python is Debian's interpreter: apt's python3-numpy and python3-torch
// are visible to it, not to another python3 earlier on PATH.
const Python = "/usr/bin/python3"

// Cannot skips a test that needs something this machine lacks, or fails it
// in CI, where everything must be there.
func Cannot(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// NeedPython checks that Python can import modules (none: that it runs),
// and calls Cannot if not.
func NeedPython(t testing.TB, modules ...string) {
	t.Helper()
	code := "pass"
	if len(modules) > 0 {
		code = "import " + strings.Join(modules, ", ")
	}
	if out, err := exec.Command(Python, "-c", code).CombinedOutput(); err != nil {
		Cannot(t, "%s with %s is needed (apt-get install python3-numpy): %v: %s", Python,
			strings.Join(modules, ", "), err, out)
	}
}

// RunPython runs a Python script with args and fails the test, with the
// script's output, if it fails.
func RunPython(t testing.TB, script string, args ...string) {
	t.Helper()
	if out, err := exec.Command(Python, append([]string{script}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// Expectations decodes dir/expect.json, the list of what a fixture script
// wrote (as the real tool reads it back), and fails the test if it cannot,
// or if the list is empty.
func Expectations[T any](t testing.TB, dir string) []T {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "expect.json"))
	if err != nil {
		t.Fatal(err)
	}
	var es []T
	if err := json.Unmarshal(raw, &es); err != nil || len(es) == 0 {
		t.Fatalf("%s/expect.json: %d entries, %v", dir, len(es), err)
	}
	return es
}
