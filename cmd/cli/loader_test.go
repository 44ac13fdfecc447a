package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadLimited: a manifest or spec file is read up to its limit, also
// from a device whose size says nothing (/dev/zero would otherwise grow
// memory until the process is killed).
func TestReadLimited(t *testing.T) {
	p := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := readLimited(p, 2); err != nil || string(b) != "{}" {
		t.Errorf("readLimited(2 bytes, max 2) = %q, %v", b, err)
	}
	if _, err := readLimited(p, 1); err == nil {
		t.Error("readLimited(2 bytes, max 1) succeeded")
	}
	if _, err := readLimited("/dev/zero", 1<<10); err == nil {
		t.Error("readLimited(/dev/zero) succeeded")
	}
}
