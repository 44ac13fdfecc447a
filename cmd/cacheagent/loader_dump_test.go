package main

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
)

// checkDump is run by numpy: it rebuilds the windows from the raw files
// and compares them, and the ids, with what `loader dump` wrote.
const checkDump = `
import glob, sys
import numpy as np
raw, out, L, ids_txt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
stream = np.concatenate([np.fromfile(f, dtype=np.uint16) for f in sorted(glob.glob(raw + "/part-*.bin"))])
batches = [[int(x) for x in line.split()] for line in ids_txt.strip().split("\n")]
for i, want in enumerate(batches[:2]):
    ids = np.load(f"{out}/batch-{i:05d}.ids.npy")
    tok = np.load(f"{out}/batch-{i:05d}.tokens.npy")
    assert ids.dtype == np.int64 and ids.tolist() == want, (ids, want)
    assert tok.dtype == np.uint16 and tok.shape == (len(want), L + 1), tok.shape
    for k, w in enumerate(want):
        assert (tok[k] == stream[w * L: w * L + L + 1]).all(), (i, k, w)
print("ok")
`

// TestLoaderDumpTokens dumps the first batches of a raw token dataset and
// has numpy check them against the files and `loader ids`.
func TestLoaderDumpTokens(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	raw := t.TempDir()
	var objs []fakestorage.Object
	next := uint16(0)
	for i, n := range []int{37, 5, 90} {
		b := make([]byte, 2*n)
		for k := range n {
			binary.LittleEndian.PutUint16(b[2*k:], next)
			next += 7
		}
		name := "part-" + string(rune('0'+i)) + ".bin"
		if err := os.WriteFile(filepath.Join(raw, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: "tok/" + name}, Content: b})
	}
	s := startEmulator(t, emulator.Options{Objects: objs})
	args := []string{"--data", "gs://bkt/tok/", "--pattern", "part-*.bin", "--token-dtype", "uint16", "--seq-len", "8",
		"--batch", "3", "--shuffle", "global", "--seed", "2", "--world", "2", "--rank", "1"}
	opts := inspectOptions(t, s.Endpoint())
	ids, err := runCmd(t, opts, newLoaderCmd(opts), append([]string{"ids"}, args...)...)
	if err != nil {
		t.Fatalf("loader ids: %v", err)
	}
	out := filepath.Join(t.TempDir(), "dump")
	opts = inspectOptions(t, s.Endpoint())
	if _, err := runCmd(t, opts, newLoaderCmd(opts), append([]string{"dump", "--batches", "2", "--out", out}, args...)...); err != nil {
		t.Fatalf("loader dump: %v", err)
	}
	res, err := exec.Command(testenv.Python, "-c", checkDump, raw, out, "8", ids).CombinedOutput()
	if err != nil || !strings.Contains(string(res), "ok") {
		t.Fatalf("numpy check: %v\n%s", err, res)
	}
}

// TestInspectFormats inspects a Megatron index, an llm.c shard and a tar
// from the parsers' fixtures.
func TestInspectFormats(t *testing.T) {
	read := func(p string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "mmapstore", p))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := map[string][]byte{
		"gpt.idx":   read("megatron/testdata/gpt_uint16.idx"),
		"gpt2.bin":  read("tokens/testdata/gpt2_000001.bin"),
		"shard.tar": read("webdataset/testdata/shard_pax.tar"),
	}
	var objs []fakestorage.Object
	for n, b := range files {
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: n}, Content: b})
	}
	s := startEmulator(t, emulator.Options{Objects: objs})
	for name, want := range map[string]string{"gpt.idx": "megatron index", "gpt2.bin": "llm.c", "shard.tar": "webdataset tar"} {
		out, err := runInspect(t, inspectOptions(t, s.Endpoint()), "gs://bkt/"+name)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("inspect %s: %v\n%s", name, err, out)
		}
	}
}
