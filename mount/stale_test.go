package mount

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
)

// The helper process mounts at $helperEnv/mnt (cache in $helperEnv/cache),
// prints helperReady and serves until its stdin closes or it is killed.
const (
	helperEnv   = "CACHEAGENT_MOUNT_HELPER_DIR"
	helperReady = "cacheagent-mount-helper: mounted"
)

// TestMountHelperProcess is the helper process of TestStaleMountCleared; it
// does nothing in a normal run.
func TestMountHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		return
	}
	objs := []fakestorage.Object{obj("data", "f", []byte("helper"))}
	e := newEnvAt(t, filepath.Join(dir, "helper-cache"), emulator.Options{Objects: objs}, fetch.Config{})
	srv, err := Mount(context.Background(), filepath.Join(dir, "mnt"), e.config(Root{Bucket: "data"}))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(helperReady)
	io.Copy(io.Discard, os.Stdin) // until the parent closes it (or kills us)
	if err := srv.Unmount(); err != nil {
		t.Error(err)
	}
	srv.Wait()
}

// TestStaleMountCleared SIGKILLs a process serving a mount, which leaves a
// dead mount behind ("transport endpoint is not connected"); the next Mount
// at that place clears it and serves.
func TestStaleMountCleared(t *testing.T) {
	requireFUSE(t)
	dir := t.TempDir()
	mp := filepath.Join(dir, "mnt")
	t.Cleanup(func() { syscall.Unmount(mp, syscall.MNT_DETACH) }) // whatever happens below

	cmd := exec.Command(os.Args[0], "-test.run=^TestMountHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := false
	for sc := bufio.NewScanner(stdout); !ready && sc.Scan(); {
		ready = sc.Text() == helperReady
	}
	if !ready {
		cmd.Wait()
		t.Fatalf("helper did not mount:\n%s", stderr.String())
	}
	if ms := mountsAt(t, mp); len(ms) != 1 {
		t.Fatalf("mounts at %s: %+v; want the helper's", mp, ms)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if _, err := os.ReadDir(mp); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("readdir of the dead mount: %v; want ENOTCONN", err)
	}

	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "f", []byte("fresh"))}}, fetch.Config{})
	srv := mountAt(t, mp, e.config(Root{Bucket: "data"}), nil)
	if b, err := os.ReadFile(filepath.Join(mp, "data", "f")); err != nil || string(b) != "fresh" {
		t.Errorf("read through the new mount: %q, %v", b, err)
	}
	if ms := mountsAt(t, mp); len(ms) != 1 {
		t.Errorf("mounts at %s: %+v; want only the new one", mp, ms)
	}
	if n := e.logs.count("stale mount", "mountpoint", mp); n != 1 {
		t.Errorf("stale mount logged %d times; want once", n)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	if ms := mountsAt(t, mp); len(ms) != 0 {
		t.Errorf("mounts at %s after Unmount: %+v", mp, ms)
	}
}

// TestMountRefusesLiveMount checks that a second Mount at a live mount's
// place fails instead of hiding it.
func TestMountRefusesLiveMount(t *testing.T) {
	e := newEnv(t, emulator.Options{Objects: dataset()}, fetch.Config{})
	_, mp := e.mount(t, e.config(datasetRoots...), nil)
	srv, err := Mount(context.Background(), mp, e.config(datasetRoots...))
	if err == nil {
		srv.Unmount()
		srv.Wait()
		t.Fatal("second Mount at the same place succeeded")
	}
	if ms := mountsAt(t, mp); len(ms) != 1 {
		t.Errorf("mounts at %s: %+v; want the first only", mp, ms)
	}
}
