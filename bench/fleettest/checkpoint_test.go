package fleettest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
)

// Checkpoint test sizes: ckptFiles files of ckptFileSize bytes.
const (
	ckptFiles    = 4
	ckptFileSize = 64 << 20
)

// TestCheckpoint runs the checkpoint scenarios on one fleet of three,
// whose uploads to GCS are paced at 4 MB/s a request:
//
//   - a checkpoint n2 saved and committed is restored on all three at
//     once: n2's cache serves it, GCS serves about nothing (≤ 0.05·C);
//   - n2 saves another with --wait peers and is SIGKILLed at once: the
//     member holding its replica uploads and commits it, once; restored
//     on the two survivors it leaves GCS about once (≤ 1.05·C); n2,
//     restarted, finds it committed and leaves the manifest as it is.
func TestCheckpoint(t *testing.T) {
	need(t)
	h := fleet(t, Config{UploadRate: "4MB"})
	ctx := context.Background()
	saver := h.Nodes[1] // n2 rejoins through n1 after its restart
	const c = int64(ckptFiles * ckptFileSize)
	steps := map[int]map[string][]byte{}
	files := func(step int) map[string][]byte {
		if m, ok := steps[step]; ok {
			return m
		}
		m := make(map[string][]byte)
		for i := range ckptFiles {
			m[fmt.Sprintf("rank-%d.pt", i)] = emulator.Pattern(uint64(1000*step+i), ckptFileSize)
		}
		steps[step] = m
		return m
	}
	uri := func(step int) string { return fmt.Sprintf("gs://%s/ckpt/run/step-%d/", h.cfg.Bucket, step) }
	save := func(step int, wait string) {
		t.Helper()
		dir := filepath.Join(saver.Dir, fmt.Sprintf("save-%d", step))
		os.MkdirAll(dir, 0o755)
		for name, data := range files(step) {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		if _, err := saver.CLI(ctx, "checkpoint", "save", dir, uri(step), "--wait", wait); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: saved %s (%d bytes) with --wait %s in %v", saver.Name, uri(step), c, wait,
			time.Since(t0).Round(time.Millisecond))
	}
	// restore restores step on nodes at once, checks every file, and
	// returns the GCS bytes it cost.
	restore := func(step int, nodes []*Node) int64 {
		t.Helper()
		before, _, err := h.GCSBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := files(step)
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Go(func() {
				dir := filepath.Join(n.Dir, fmt.Sprintf("restore-%d", step))
				if _, err := n.CLI(ctx, "checkpoint", "restore", uri(step), dir); err != nil {
					t.Error(err)
					return
				}
				for name, data := range want {
					if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, data) {
						t.Errorf("%s: restored %s differs (%v)", n.Name, name, err)
					}
				}
			})
		}
		wg.Wait()
		after, _, err := h.GCSBytes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("step %d restored on %d nodes: GCS bytes %d = %.3f·C", step, len(nodes), after-before,
			float64(after-before)/float64(c))
		return after - before
	}

	// Restored from the saver's cache.
	save(1, "gcs")
	if got := restore(1, h.Nodes); float64(got) > 0.05*float64(c) {
		t.Errorf("restore with the saver up read %d GCS bytes; want ≤ 0.05·C (%d)", got, c/20)
	}

	// The saver dies right after its save is held by a peer.
	save(2, "peers")
	if err := saver.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILLed %s", saver.Name)
	survivors := []*Node{h.Nodes[0], h.Nodes[2]}
	var listed []checkpointEntry
	deadline := time.Now().Add(2 * time.Minute)
	for {
		listed = listCheckpoints(t, survivors[0], strings.TrimSuffix(uri(2), "step-2/"))
		if len(listed) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(listed) != 2 || listed[0].URI != uri(2) {
		t.Fatalf("after the saver died, the run lists %+v; want step 2 committed by its replica's holder", listed)
	}
	commits := int64(0)
	for _, n := range survivors {
		if st, err := n.Status(ctx); err == nil && st.Checkpoints != nil {
			commits += st.Checkpoints.Commits
		}
	}
	if commits != 1 {
		t.Errorf("the survivors committed %d times; want once", commits)
	}
	if got := restore(2, survivors); float64(got) > 1.05*float64(c) {
		t.Errorf("restore with the saver dead read %d GCS bytes; want ≤ 1.05·C (%d)", got, c*105/100)
	}
	objs := emulatorList(t, h, "ckpt/run/step-2/")
	if len(objs) != ckptFiles+1 {
		t.Errorf("step 2 has objects %v; want its %d files and one manifest, no claim or part left", objs, ckptFiles)
	}

	// The saver comes back: its resumed save finds the commit, and the
	// manifest stays the one written.
	if err := saver.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := saver.CLI(ctx, "checkpoint", "wait", uri(2), "--durability", "gcs", "--timeout", "90s"); err != nil {
		t.Fatal(err)
	}
	if again := emulatorList(t, h, "ckpt/run/step-2/"); !sameSet(again, objs) {
		t.Errorf("after the saver resumed, step 2 has objects %v; want %v", again, objs)
	}
}

// checkpointEntry is the part of `cacheagent checkpoint list --json` the
// test reads.
type checkpointEntry struct {
	URI  string `json:"uri"`
	Save string `json:"save"`
}

// listCheckpoints lists the committed checkpoints of run through n.
func listCheckpoints(t *testing.T, n *Node, run string) []checkpointEntry {
	t.Helper()
	out, err := n.CLI(context.Background(), "checkpoint", "list", run, "--json")
	if err != nil {
		t.Logf("%s: checkpoint list: %v", n.Name, err)
		return nil
	}
	var l control.Checkpoints
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("checkpoint list --json: %v: %s", err, out)
	}
	var es []checkpointEntry
	for _, c := range l.Checkpoints {
		es = append(es, checkpointEntry{URI: c.URI, Save: c.Save})
	}
	return es
}

// emulatorList returns "name@generation" of every object under prefix,
// read from the emulator itself.
func emulatorList(t *testing.T, h *Harness, prefix string) []string {
	t.Helper()
	out, err := h.Exec(context.Background(), h.Hub, "curl", "-sS", "--fail", "--max-time", "10",
		fmt.Sprintf("%s/storage/v1/b/%s/o?prefix=%s", h.EmuBase, h.cfg.Bucket, strings.ReplaceAll(prefix, "/", "%2F")))
	if err != nil {
		t.Fatal(err)
	}
	var l struct {
		Items []struct {
			Name       string `json:"name"`
			Generation string `json:"generation"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatalf("list: %v: %s", err, out)
	}
	var names []string
	for _, it := range l.Items {
		names = append(names, it.Name+"@"+it.Generation)
	}
	return names
}
