package main

import (
	"strings"
	"testing"
)

// TestMountOpenFlag: an unknown --open and --skip-open against --open ask
// are errors that name the flag, before anything is opened or mounted.
func TestMountOpenFlag(t *testing.T) {
	mp := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--open", "never", mp}, `open mode "never"`},
		{[]string{"mount", "--open", "ask", "--skip-open", mp}, "--skip-open contradicts --open ask"},
	} {
		_, err := run(t, "http://127.0.0.1:1/storage/v1/", t.TempDir(), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cacheagent %s: %v; want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
