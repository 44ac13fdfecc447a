package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"github.com/spf13/cobra"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/synth"
)

// loaderEmulator serves data as gs://bkt/train/ shards.
func loaderEmulator(t *testing.T, data synth.Dataset) *emulator.Server {
	t.Helper()
	var objs []fakestorage.Object
	err := data.Write("train/", func(name string, b []byte) error {
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: name}, Content: b})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return startEmulator(t, emulator.Options{Objects: objs})
}

// runCmd runs cmd with args in-process, with opts resolved as the root
// command would, and returns its stdout.
func runCmd(t *testing.T, opts *cli.Options, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := opts.Resolve(cmd); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(io.Discard)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

// parseIDs parses `loader ids` output: one batch of ids per line.
func parseIDs(t *testing.T, out string) [][]int64 {
	t.Helper()
	var batches [][]int64
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		var b []int64
		for _, f := range strings.Fields(line) {
			id, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			b = append(b, id)
		}
		batches = append(batches, b)
	}
	return batches
}

func TestLoaderIDs(t *testing.T) {
	data := synth.Dataset{Rows: []int{10, 7, 12, 9}, RowBytes: 16} // 38 samples
	s := loaderEmulator(t, data)
	ids := func(args ...string) [][]int64 {
		t.Helper()
		cmd := newLoaderCmd(inspectOptions(t, s.Endpoint()))
		out, err := runCmd(t, inspectOptions(t, s.Endpoint()), cmd,
			append([]string{"ids", "--data", "gs://bkt/train/", "--batch", "4", "--seed", "3", "--epoch", "2"}, args...)...)
		if err != nil {
			t.Fatalf("loader ids %v: %v", args, err)
		}
		return parseIDs(t, out)
	}
	seen := map[int64]int{}
	var length int
	for rank := range 3 {
		got := ids("--rank", strconv.Itoa(rank), "--world", "3", "--window", "2")
		if len(got) != 4 { // ceil(38/3) = 13 samples: 4 batches, the last of 1
			t.Fatalf("rank %d: %d batches; want 4", rank, len(got))
		}
		n := 0
		for _, b := range got {
			for _, id := range b {
				seen[id]++
				n++
			}
		}
		if rank > 0 && n != length {
			t.Errorf("rank %d read %d samples; rank 0 %d", rank, n, length)
		}
		length = n
	}
	if len(seen) != 38 {
		t.Errorf("%d distinct samples over the ranks; want 38", len(seen))
	}
	full := ids("--epochs", "1")
	if resumed := ids("--resume-batch", "3"); !slices.EqualFunc(resumed, full[3:], slices.Equal) {
		t.Errorf("--resume-batch 3 = %v; want %v", resumed, full[3:])
	}
	if other := ids("--seed", "4"); slices.EqualFunc(other, full, slices.Equal) {
		t.Errorf("seeds 3 and 4 print the same batches")
	}
	seq := ids("--shuffle", "sequential", "--batch", "38")
	if len(seq) != 1 || seq[0][0] != 0 || seq[0][37] != 37 {
		t.Errorf("sequential: %v", seq)
	}
	for _, bad := range [][]string{{"--shuffle", "random"}, {"--tail", "pad"}, {"--rank", "3", "--world", "3"}} {
		cmd := newLoaderCmd(inspectOptions(t, s.Endpoint()))
		if _, err := runCmd(t, inspectOptions(t, s.Endpoint()), cmd,
			append([]string{"ids", "--data", "gs://bkt/train/"}, bad...)...); err == nil {
			t.Errorf("loader ids %v succeeded", bad)
		}
	}
}

func TestLoaderIDsManifest(t *testing.T) {
	data := synth.Dataset{Rows: []int{5, 6}, RowBytes: 8}
	s := loaderEmulator(t, data)
	m := `{"arrays": ["x", "y"], "shards": [
		{"x": "gs://bkt/train/shard-00000.x.npy", "y": "gs://bkt/train/shard-00000.y.npy"},
		{"x": "gs://bkt/train/shard-00001.x.npy", "y": "gs://bkt/train/shard-00001.y.npy", "rows": 6}]}`
	path := filepath.Join(t.TempDir(), "manifest.json")
	if err := os.WriteFile(path, []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := inspectOptions(t, s.Endpoint())
	out, err := runCmd(t, opts, newLoaderCmd(opts), "ids", "--manifest", path, "--batch", "11", "--shuffle", "sequential")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseIDs(t, out); len(got) != 1 || len(got[0]) != 11 {
		t.Errorf("ids over the manifest: %v", got)
	}
}

func TestLoaderIDsNodeShuffle(t *testing.T) {
	data := synth.Dataset{Rows: []int{10, 7, 12, 9, 5, 8}, RowBytes: 16} // 51 samples
	s := loaderEmulator(t, data)
	ids := func(args ...string) [][]int64 {
		t.Helper()
		opts := inspectOptions(t, s.Endpoint())
		out, err := runCmd(t, opts, newLoaderCmd(opts), append([]string{"ids", "--data", "gs://bkt/train/",
			"--batch", "4", "--seed", "3", "--shuffle", "node", "--world", "4"}, args...)...)
		if err != nil {
			t.Fatalf("loader ids %v: %v", args, err)
		}
		return parseIDs(t, out)
	}
	parts, err := sampler.Partition(data.Rows, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	off, _ := sampler.Offsets(data.Rows)
	seen := map[int64]bool{}
	var batches int
	for rank := range 4 {
		got := ids("--rank", strconv.Itoa(rank), "--ranks-per-node", "2")
		if rank > 0 && len(got) != batches {
			t.Errorf("rank %d: %d batches; rank 0 %d", rank, len(got), batches)
		}
		batches = len(got)
		for _, b := range got {
			for _, id := range b {
				seen[id] = true
				if !slices.ContainsFunc(parts[rank/2], func(g int) bool { return id >= off[g] && id < off[g+1] }) {
					t.Errorf("rank %d (node %d) read sample %d outside its partition %v", rank, rank/2, id, parts[rank/2])
				}
			}
		}
	}
	if len(seen) != 51 {
		t.Errorf("%d distinct samples over the ranks; want 51", len(seen))
	}
	want := ids("--rank", "3", "--ranks-per-node", "2")
	if got := ids("--rank", "3", "--nodes", "2", "--node", "1"); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("--nodes 2 --node 1 = %v; want %v (from --ranks-per-node 2)", got, want)
	}
	t.Setenv("LOCAL_WORLD_SIZE", "2")
	if got := ids("--rank", "3"); !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("LOCAL_WORLD_SIZE=2: %v; want %v", got, want)
	}
	opts := inspectOptions(t, s.Endpoint())
	if _, err := runCmd(t, opts, newLoaderCmd(opts), "ids", "--data", "gs://bkt/train/", "--shuffle", "node",
		"--world", "4", "--ranks-per-node", "3"); err == nil {
		t.Errorf("--world 4 --ranks-per-node 3 succeeded")
	}
}
