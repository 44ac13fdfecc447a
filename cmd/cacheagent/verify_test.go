package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
)

// cachedFiles returns the data files of the disk tier in cacheDir.
func cachedFiles(t *testing.T, cacheDir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cacheDir, "data", "[0-9a-f][0-9a-f]", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestVerifyStandalone flips a byte of a cached file and runs verify on
// the cache directory: it reports and drops the copy, and cat then reads
// the object intact (fetched again).
func TestVerifyStandalone(t *testing.T) {
	objs := dataset("bkt", []string{"v/a", "v/b"}, 1<<20+50_000) // not packed: a file each, to flip a byte in
	s := startEmulator(t, emulator.Options{Objects: objs})
	cache := filepath.Join(t.TempDir(), "cache")
	if _, err := run(t, s.Endpoint(), cache, "prefetch", "gs://bkt/v/"); err != nil {
		t.Fatal(err)
	}
	files := cachedFiles(t, cache)
	if len(files) != 2 {
		t.Fatalf("cached files = %v; want 2", files)
	}
	cachetest.FlipByte(t, files[0], 10)
	out, err := run(t, s.Endpoint(), cache, "verify", "--json", "--rate", "1GiB", "gs://bkt/v/")
	if err != nil {
		t.Fatal(err)
	}
	var rep control.VerifyReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if !rep.Done || rep.Objects != 2 || rep.Verified != 1 || rep.Corrupt != 1 || len(rep.Dropped) != 1 ||
		rep.Bytes != 2<<20+100_001 {
		t.Errorf("verify = %+v; want 2 objects, 1 verified, 1 corrupt and dropped, 2 MiB + 100001 bytes", rep)
	}
	gets := s.MediaGETs()
	for _, o := range objs {
		got, err := run(t, s.Endpoint(), cache, "cat", "gs://bkt/"+o.Name)
		if err != nil || !bytes.Equal([]byte(got), o.Content) {
			t.Errorf("cat %s after verify: %d bytes, %v; want the object", o.Name, len(got), err)
		}
	}
	if s.MediaGETs() == gets {
		t.Error("no media GET after verify dropped a copy; want it fetched again")
	}
	out, err = run(t, s.Endpoint(), cache, "verify")
	if err != nil || !strings.Contains(out, "verified the cache: 2 objects") || !strings.Contains(out, "corrupt 0,") {
		t.Errorf("verify (whole cache) = %q, %v; want 2 objects, none corrupt", out, err)
	}
}

// TestVerifyThroughDaemon runs verify against a daemon.
func TestVerifyThroughDaemon(t *testing.T) {
	objs := dataset("bkt", []string{"v/a", "v/b", "v/c"}, 1<<20+60_000) // not packed: a file each
	s := startEmulator(t, emulator.Options{Objects: objs})
	dir := t.TempDir()
	p := startServe(t, dir, daemonConfig(dir, s.Endpoint(), ""))
	if _, err := p.cli(t, "prefetch", "--wait", "gs://bkt/v/"); err != nil {
		t.Fatal(err)
	}
	files := cachedFiles(t, p.cacheDir)
	if len(files) != 3 {
		t.Fatalf("cached files = %v; want 3", files)
	}
	cachetest.FlipByte(t, files[1], 10)
	out, err := p.cli(t, "verify", "gs://bkt/v/")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"verified gs://bkt/v/: 3 objects, 3 copies", "intact 2,", "corrupt 1,", "dropped (fetched again"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify output lacks %q:\n%s", want, out)
		}
	}
	if st := p.status(t); st.Tiers[len(st.Tiers)-1].Corrupt != 1 {
		t.Errorf("status: disk tier %+v; want 1 corrupt", st.Tiers[len(st.Tiers)-1])
	}
	for _, o := range objs {
		got, err := p.cli(t, "cat", "gs://bkt/"+o.Name)
		if err != nil || !bytes.Equal([]byte(got), o.Content) {
			t.Errorf("cat %s after verify: %d bytes, %v; want the object", o.Name, len(got), err)
		}
	}
}
