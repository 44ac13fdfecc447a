package daemon

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// TestUnstageRefusesOtherDirectories: DELETE /v1/checkpoints/staging
// removes only a directory the daemon names in staging/: never staging/..
// (the whole checkpoint store, saves included) or staging/. , even for a
// root caller, whom the ownership check does not stop.
func TestUnstageRefusesOtherDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs a root caller (CI runs as root)")
		}
		t.Skip("needs a root caller")
	}
	emu := startEmulator(t, dataset("bkt", "d/", 1, 10))
	d := startDaemon(t, testConfig(t.TempDir(), emu))
	hc := unixClient(t, d)
	ck := d.ckptDir()
	for _, p := range []string{filepath.Join(ck, "saves", "x"), filepath.Join(ck, "staging", "0a1b")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	staging := filepath.Join(ck, "staging")
	for _, dir := range []string{staging + "/..", staging + "/.", staging + "/", staging + "//0a1b", staging + "/x/../0a1b"} {
		if code := unstage(t, hc, dir); code != http.StatusBadRequest {
			t.Errorf("DELETE staging?dir=%s: %d; want 400", dir, code)
		}
	}
	if _, err := os.Stat(filepath.Join(ck, "saves", "x")); err != nil {
		t.Errorf("the checkpoint store lost its saves: %v", err)
	}
	if code := unstage(t, hc, filepath.Join(staging, "0a1b")); code != http.StatusNoContent {
		t.Errorf("DELETE of a staging directory: %d; want 204", code)
	}
}

// unstage sends DELETE /v1/checkpoints/staging?dir=dir and returns the
// answer's status.
func unstage(t *testing.T, hc *http.Client, dir string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, "http://x/v1/checkpoints/staging?dir="+url.QueryEscape(dir), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
