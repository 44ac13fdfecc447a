package daemon

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/checkpoint"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fleet"
	"github.com/cacheagent/cacheagent/object"
)

// TestDaemonCheckpointReplicas runs two daemons in one fleet. A save on a
// whose uploads all fail is durable at "peers" once b holds a verified
// replica; a leaves before the commit, and b takes the save over and
// commits it; a, restarted, finds it committed and keeps the one
// manifest. A checkpoint a saved is then restored on b from a's cache:
// the emulator serves the manifest, not the files.
func TestDaemonCheckpointReplicas(t *testing.T) {
	emu := startEmulator(t, nil)
	if _, err := emu.Put("bkt", "d/x", []byte("x")); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "fleet.key")
	if err := os.WriteFile(key, []byte("00112233445566778899aabbccddeeff\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(name string, join ...string) Config {
		cfg := testConfig(t.TempDir(), emu)
		cfg.Tiers.Disk.Max = 1 << 30
		cfg.Sources = []SourceConfig{{URI: object.URI{Bucket: "bkt", Path: "d/"}}}
		cfg.Fleet = &fleet.Config{Name: name, Listen: "127.0.0.1:0", PeerListen: "127.0.0.1:0", Join: join,
			KeyFile: key}
		return cfg
	}
	acfg := config("node-a")
	a := startDaemon(t, acfg)
	b := startDaemon(t, config("node-b", a.fleet.Self().Addr))
	waitMembers(t, 2, a, b)
	files := map[string][]byte{"model.pt": emulator.Pattern(1, 3<<20), "optim/0.pt": emulator.Pattern(2, 1<<20)}
	save := func(d *Daemon, uri, wait string) control.Checkpoints {
		t.Helper()
		c := dial(t, d)
		dir, err := c.CheckpointStaging(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for name, data := range files {
			os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755)
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.SaveCheckpoint(testCtx(t), dir, uri, wait); err != nil {
			t.Fatalf("save %s (wait %s): %v", uri, wait, err)
		}
		st, err := c.CheckpointStatus(testCtx(t), uri)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	// Uploads are cut after 16 KiB (the claim, tiny, goes through): a's
	// save reaches "peers", not "gcs".
	emu.SetUploadFaults(func(*http.Request, int) emulator.Fault { return emulator.Fault{ResetAfter: 16 << 10} })
	const u1 = "gs://bkt/run/step-1/"
	st := save(a, u1, control.DurabilityPeers)
	if len(st.Checkpoints) != 1 || st.Checkpoints[0].State != checkpoint.Peers || st.Checkpoints[0].Replicas != 1 {
		t.Fatalf("a's save: %+v; want state peers, 1 replica", st.Checkpoints)
	}
	id := st.Checkpoints[0].Save
	held, err := dial(t, b).CheckpointStatus(testCtx(t), u1)
	if err != nil || len(held.Checkpoints) != 1 || held.Checkpoints[0].State != checkpoint.Replica {
		t.Fatalf("b holds %+v, %v; want a replica", held.Checkpoints, err)
	}

	// a leaves before committing; b takes the save over once uploads work.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	emu.SetUploadFaults(nil)
	u, _ := object.ParsePrefix(u1)
	var m *checkpoint.Manifest
	for deadline := time.Now().Add(2 * testTimeout); ; {
		if m, err = checkpoint.ReadManifest(ctx, b.src, u); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never committed a's save: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if m.Save != id || m.Node != "node-a" || len(m.Files) != len(files) {
		t.Fatalf("manifest %+v; want a's save %s", m, id)
	}
	ma, err := b.src.Stat(ctx, object.Object{Bucket: "bkt", Name: u.Path + checkpoint.ManifestName})
	if err != nil {
		t.Fatal(err)
	}

	// a comes back on its disk: its resumed upload finds the save
	// committed; the manifest stays the one b wrote.
	fc := *acfg.Fleet
	fc.Join = []string{b.fleet.Self().Addr}
	acfg.Fleet = &fc
	a = startDaemon(t, acfg)
	if _, err := dial(t, a).WaitCheckpoint(testCtx(t), u1, control.DurabilityGCS, 0); err != nil {
		t.Fatal(err)
	}
	if mb, err := a.src.Stat(ctx, ma.Object); err != nil || mb.Generation != ma.Generation {
		t.Errorf("manifest generation %d, %v after a resumed; want %d", mb.Generation, err, ma.Generation)
	}
	waitMembers(t, 2, a, b)

	// A checkpoint a saved is restored on b from a's cache.
	const u2 = "gs://bkt/run/step-2/"
	save(a, u2, control.DurabilityGCS)
	before := emu.BytesServed()
	res, err := dial(t, b).RestoreCheckpoint(testCtx(t), u2, "")
	if err != nil {
		t.Fatal(err)
	}
	served := emu.BytesServed() - before
	var total int64
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(res.Dir, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("restored %s differs (%v)", name, err)
		}
		total += int64(len(data))
	}
	if served > total/20 {
		t.Errorf("the restore on b read %d bytes from the emulator for a %d-byte checkpoint a holds; want ≤ 5%%",
			served, total)
	}
}

// waitMembers waits until every daemon's table has n members.
func waitMembers(t *testing.T, n int, ds ...*Daemon) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); ; {
		ok := true
		for _, d := range ds {
			ok = ok && d.fleet.Table().Len() == n
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet never had %d members", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
