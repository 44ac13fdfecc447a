package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/stats"
)

// Who the test acts for: a training user, and the daemon's group (the
// control socket's, which the user belongs to, as scripts/cacheagent.service
// has it).
const (
	testUID      = 1000
	testGID      = 1000
	testDaemonGr = 4242
)

// TestCheckpointAsUser runs the daemon as scripts/cacheagent.service does
// (root without any capability: no CAP_CHOWN, no CAP_DAC_OVERRIDE) and
// saves and restores as an ordinary user, uid 1000: the CLI from and into
// directories of theirs the daemon may not even read (as with
// ProtectHome=yes), and the Python client through a staging directory and
// into a fresh one. Nothing needs a capability: the daemon gives its
// directories by ACL, the client moves the files with its own rights.
func TestCheckpointAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Cannot(t, "acting as uid %d needs root", testUID)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Cannot(t, "setpriv (util-linux) is needed to run the daemon without capabilities: %v", err)
	}
	testenv.NeedPython(t)
	s := startEmulator(t, emulator.Options{Buckets: []string{"bkt"}})
	dir := t.TempDir()
	// The user reaches the socket, the staging directories and the binary.
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(binPath)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := newDaemonProc(t, dir, daemonConfig(dir, s.Endpoint(), ""))
	p.wrap = []string{setpriv, "--regid", fmt.Sprint(testDaemonGr), "--clear-groups", "--inh-caps=-all",
		"--ambient-caps=-all", "--bounding-set=-all", "--"}
	p.start()
	p.awaitNote(t, "READY=1")

	// The user's home: theirs alone, out of the daemon's sight.
	home := filepath.Join(dir, "home")
	mkdirAs(t, home, 0o700)
	files := checkpointFiles()
	src := filepath.Join(home, "ckpt")
	writeFiles(t, src, files)
	chownTree(t, home)

	const uri = "gs://bkt/user-run/step-1/"
	if out, err := asUser(t, binPath, "--socket", p.socket, "checkpoint", "save", src, uri, "--wait", "gcs"); err != nil {
		t.Fatalf("save as uid %d: %v\n%s", testUID, err, out)
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(src, name)); err == nil {
			t.Errorf("%s is still in the saved directory; want it moved", name)
		}
	}
	restored := filepath.Join(home, "restored")
	out, err := asUser(t, binPath, "--socket", p.socket, "checkpoint", "restore", uri, restored, "--json")
	if err != nil {
		t.Fatalf("restore as uid %d: %v\n%s", testUID, err, out)
	}
	var res stats.Restore
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Dir != restored || res.Files != len(files) {
		t.Errorf("restore printed %q (%v)", out, err)
	}
	for name, want := range files {
		p := filepath.Join(restored, filepath.FromSlash(name))
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("restored %s: %v", name, err)
		}
	}
	if out, err := asUser(t, binPath, "--socket", p.socket, "checkpoint", "restore", uri, restored); err == nil ||
		!strings.Contains(out, "nothing is overwritten") {
		t.Errorf("a second restore into %s: %v\n%s; want a refusal", restored, err, out)
	}
	// A file of another user's in the directory is refused; nothing moves.
	other := filepath.Join(dir, "shared")
	mkdirAs(t, other, 0o755)
	writeFiles(t, other, map[string][]byte{"mine": []byte("x")})
	chownTree(t, other)
	if err := os.WriteFile(filepath.Join(other, "roots"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := asUser(t, binPath, "--socket", p.socket, "checkpoint", "save", other, "gs://bkt/user-run/step-x/"); err == nil {
		t.Errorf("a save holding root's file succeeded: %s", out)
	}
	if _, err := os.Stat(filepath.Join(other, "mine")); err != nil {
		t.Errorf("a refused save moved a file: %v", err)
	}

	// Python: save into a staging directory, wait, restore fresh and into
	// a directory of the user's.
	pkg := filepath.Join(dir, "py")
	if err := os.CopyFS(pkg, os.DirFS(filepath.Join("..", "..", "python", "src"))); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command("chmod", "-R", "a+rX", pkg).Run(); err != nil {
		t.Fatal(err)
	}
	if out, err := asUser(t, testenv.Python, "-c", pythonAsUser, pkg, p.socket, "gs://bkt/user-run/step-2/",
		filepath.Join(home, "py-restored")); err != nil {
		t.Fatalf("python as uid %d: %v\n%s", testUID, err, out)
	}
	// Every staging and restore directory handed out is gone (their
	// parent is the daemon's: the clients asked it to remove them).
	left, err := os.ReadDir(filepath.Join(p.cacheDir, "checkpoints", "staging"))
	if err != nil || len(left) != 0 {
		t.Errorf("staging directories left: %v (%v)", left, err)
	}
	// The user may not have another user's staging directory removed,
	// nor anything outside the staging directory.
	c, err := control.Dial(context.Background(), p.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roots, err := c.CheckpointStaging(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for dir, want := range map[string]string{roots: "PermissionDenied", home: "InvalidRequest"} {
		out, err := asUser(t, testenv.Python, "-c", unstageAsUser, pkg, p.socket, dir, want)
		if err != nil {
			t.Errorf("removing %s as uid %d: %v\n%s", dir, testUID, err, out)
		}
	}
	if _, err := os.Stat(roots); err != nil {
		t.Errorf("root's staging directory: %v", err)
	}
}

// pythonAsUser saves, waits for and restores a checkpoint with the Python
// client: argv is the package's directory, the socket, the URI and a
// directory to restore into.
const pythonAsUser = `
import os, sys
sys.path.insert(0, sys.argv[1])
import cacheagent.checkpoint as ckpt
sock, uri, out = sys.argv[2:5]
data = {"model.pt": os.urandom(1 << 20), "optim/__0_0.distcp": os.urandom(70000)}
with ckpt.save(uri, socket=sock) as ck:
    for name, b in data.items():
        (ck.dir / name).parent.mkdir(parents=True, exist_ok=True)
        (ck.dir / name).write_bytes(b)
    # As mkstemp and mkdtemp make them: the owner's alone.
    os.mkdir(ck.dir / "private", 0o700)
    fd = os.open(ck.dir / "private" / "tmp.bin", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"secret")
    os.close(fd)
    data["private/tmp.bin"] = b"secret"
assert ck.info["state"] == "local", ck.info
ckpt.wait(uri, durability="gcs", timeout=60, socket=sock)
with ckpt.restore(uri, socket=sock) as r:
    for name, b in data.items():
        assert (r.dir / name).read_bytes() == b, name
    assert not any((r.dir / n).exists() for n in ("x",))
r = ckpt.restore(uri, out, socket=sock)
for name, b in data.items():
    assert open(os.path.join(out, name), "rb").read() == b, name
    assert os.stat(os.path.join(out, os.path.dirname(name) or ".")).st_uid == os.getuid()
`

// unstageAsUser asks the daemon to remove a directory and expects the
// error class named: argv is the package's directory, the socket, the
// directory and the class.
const unstageAsUser = `
import sys
sys.path.insert(0, sys.argv[1])
import cacheagent
from cacheagent.client import Client
sock, d, want = sys.argv[2:5]
c = Client(sock)
try:
    c._request("DELETE", "/v1/checkpoints/staging", query={"dir": d})
except getattr(cacheagent, want):
    sys.exit(0)
sys.exit("removed " + d)
`

// asUser runs a command as testUID (with the daemon's group, as a member)
// and returns its combined output.
func asUser(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testUID, Gid: testGID,
		Groups: []uint32{testDaemonGr}}}
	cmd.Env = append(os.Environ(), "HOME=/nonexistent")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mkdirAs makes the directory p, mode perm, testUID's.
func mkdirAs(t *testing.T, p string, perm os.FileMode) {
	t.Helper()
	if err := os.Mkdir(p, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, testUID, testGID); err != nil {
		t.Fatal(err)
	}
}

// chownTree makes everything under root testUID's.
func chownTree(t *testing.T, root string) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, testUID, testGID)
	})
	if err != nil {
		t.Fatal(err)
	}
}
