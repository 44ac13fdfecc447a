package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/fleettest"
)

// ckptLarge is how many large files phase 8's checkpoint has; a sixteenth
// of it is in ckptSmall small files.
const (
	ckptLarge = 4
	ckptSmall = 64
)

// checkpoints is phase 8, issue 27's fleet goals, on N nodes with the
// GCS and peer links of o and a checkpoint C of o.ckptSize (ckptLarge
// large files, a sixteenth of C in ckptSmall small ones):
//
//   - node 2 saves C with --wait peers: the time against C / r_p;
//   - then waits for gcs (the upload runs after the replica, over the
//     node's uplink, capped at r_p: the harness caps GCS downloads only);
//   - all N nodes restore C at once: GCS bytes against 0.05·C, time
//     against N nodes each restoring it from GCS alone (a standalone
//     `cacheagent checkpoint restore` in each node's namespace, over its
//     GCS link: the baseline);
//   - node 2 saves C' with --wait peers and is SIGKILLed: the time until
//     a survivor committed it, then the N-1 survivors restore it: GCS
//     bytes against 1.05·C.
func checkpoints(ctx context.Context, o opts) error {
	N := o.nodes
	C := o.ckptSize
	cfg := o.cfg(N, 4*C, false)
	cfg.Objects, cfg.Size = 1, 1<<20
	h, err := startAlive(ctx, cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	saver := h.Nodes[1] // rejoins through node 1 after a restart
	rp := float64(o.peerMbit) * 1e6 / 8
	rg := float64(o.gcsMbit) * 1e6 / 8
	report("\n## 8. checkpoints: C = %s (%d large files, %d small), N = %d, r_g = %d Mbit/s, r_p = %d Mbit/s",
		mib(C), ckptLarge, ckptSmall, N, o.gcsMbit, o.peerMbit)
	files := ckptFiles(C)
	uri := func(step int) string { return fmt.Sprintf("gs://bench/ckpt/run/step-%d/", step) }
	save := func(step int, wait string) (time.Duration, error) {
		dir := filepath.Join(saver.Dir, fmt.Sprintf("save-%d", step))
		if err := writeCkpt(dir, files); err != nil {
			return 0, err
		}
		t0 := time.Now()
		_, err := saver.CLI(ctx, "checkpoint", "save", dir, uri(step), "--wait", wait)
		return time.Since(t0), err
	}

	took, err := save(1, "peers")
	if err != nil {
		return err
	}
	report("save --wait peers: %.2fs = %.2f × C/r_p (%.2fs)", took.Seconds(), took.Seconds()/(float64(C)/rp), float64(C)/rp)
	t0 := time.Now()
	if _, err := saver.CLI(ctx, "checkpoint", "wait", uri(1), "--durability", "gcs"); err != nil {
		return err
	}
	up := time.Since(t0)
	report("then the upload: %.2fs = %.2f × C over the node's uplink, r_p (%.2fs; the harness caps GCS downloads only)",
		up.Seconds(), up.Seconds()/(float64(C)/rp), float64(C)/rp)

	// The baseline: every node restores C from GCS alone, standalone.
	base, _, err := restoreAll(ctx, h, h.Nodes, uri(1), files, true)
	if err != nil {
		return err
	}
	report("baseline: %d nodes each restoring C from GCS alone: %.2fs (C/r_g = %.2fs), GCS bytes %.3f·C",
		N, base.took.Seconds(), float64(C)/rg, float64(base.gcs)/float64(C))
	fl, _, err := restoreAll(ctx, h, h.Nodes, uri(1), files, false)
	if err != nil {
		return err
	}
	report("fleet restore on %d nodes at once, the saver up: %.2fs = %.2f× faster than the baseline; GCS bytes %.3f·C",
		N, fl.took.Seconds(), base.took.Seconds()/fl.took.Seconds(), float64(fl.gcs)/float64(C))

	// The saver dies after its replica is held.
	if _, err := save(2, "peers"); err != nil {
		return err
	}
	if err := saver.Kill(); err != nil {
		return err
	}
	killed := time.Now()
	survivors := append([]*fleettest.Node{h.Nodes[0]}, h.Nodes[2:]...)
	for {
		if out, err := survivors[0].CLI(ctx, "checkpoint", "list", "gs://bench/ckpt/run/"); err == nil &&
			strings.Contains(string(out), uri(2)) {
			break
		}
		if time.Since(killed) > 5*time.Minute {
			return fmt.Errorf("no survivor committed step 2 in 5 minutes")
		}
		time.Sleep(time.Second)
	}
	report("saver SIGKILLed after --wait peers: a survivor committed the save %.1fs later (takeover grace 10s + the upload)",
		time.Since(killed).Seconds())
	dead, _, err := restoreAll(ctx, h, survivors, uri(2), files, false)
	if err != nil {
		return err
	}
	report("restore on the %d survivors: %.2fs; GCS bytes %.3f·C", len(survivors), dead.took.Seconds(),
		float64(dead.gcs)/float64(C))
	traffic(ctx, h)
	return nil
}

// ckptFile is one file of phase 8's checkpoint.
type ckptFile struct {
	name string
	data []byte
}

// ckptFiles returns a checkpoint of about c bytes.
func ckptFiles(c int64) []ckptFile {
	var fs []ckptFile
	large := c * 15 / 16 / ckptLarge
	for i := range ckptLarge {
		fs = append(fs, ckptFile{fmt.Sprintf("model-%d.safetensors", i), emulator.Pattern(uint64(i+1), int(large))})
	}
	small := emulator.Pattern(99, int(c/16/ckptSmall))
	for i := range ckptSmall {
		fs = append(fs, ckptFile{fmt.Sprintf("optim/%03d.pt", i), small})
	}
	return fs
}

// writeCkpt writes files under dir.
func writeCkpt(dir string, files []ckptFile) error {
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// restoreResult is a restore on several nodes at once.
type restoreResult struct {
	took time.Duration // until the last node finished
	gcs  int64         // GCS bytes it cost
}

// restoreAll restores uri on nodes at once, checks every file, and
// returns the time and GCS bytes. standalone restores without the daemons
// (a cache of its own, straight from GCS over the node's link).
func restoreAll(ctx context.Context, h *fleettest.Harness, nodes []*fleettest.Node, uri string, files []ckptFile,
	standalone bool) (restoreResult, []time.Duration, error) {
	before, _, err := h.GCSBytes(ctx)
	if err != nil {
		return restoreResult{}, nil, err
	}
	per := make([]time.Duration, len(nodes))
	errs := make([]error, len(nodes))
	t0 := time.Now()
	var wg sync.WaitGroup
	tag := "fleet"
	if standalone {
		tag = "alone"
	}
	for i, n := range nodes {
		wg.Go(func() {
			dir := filepath.Join(n.Dir, fmt.Sprintf("restore-%s-%d", tag, time.Now().UnixNano()))
			defer os.RemoveAll(dir)
			if standalone {
				cache := filepath.Join(n.Dir, "standalone-cache")
				defer os.RemoveAll(cache)
				_, errs[i] = h.Exec(ctx, n.NS, filepath.Join(h.Config().Bin, "cacheagent"), "checkpoint", "restore", uri, dir,
					"--socket", filepath.Join(n.Dir, "none.sock"), "--endpoint", n.Proxy+"/storage/v1/",
					"--cache-dir", cache, "--shm-dir", "none")
			} else {
				_, errs[i] = n.CLI(ctx, "checkpoint", "restore", uri, dir)
			}
			per[i] = time.Since(t0)
			if errs[i] != nil {
				return
			}
			for _, f := range files {
				got, err := os.ReadFile(filepath.Join(dir, f.name))
				if err != nil || string(got) != string(f.data) {
					errs[i] = fmt.Errorf("%s: restored %s differs (%v)", n.Name, f.name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(t0)
	for _, err := range errs {
		if err != nil {
			return restoreResult{}, nil, err
		}
	}
	after, _, err := h.GCSBytes(ctx)
	return restoreResult{took: took, gcs: after - before}, per, err
}
