package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
)

// dirObjects returns the files of dir as objects gs://bkt/PREFIX/NAME.
func dirObjects(t *testing.T, dir, prefix string) []fakestorage.Object {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var objs []fakestorage.Object
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt",
			Name: prefix + e.Name()}, Content: b})
	}
	return objs
}

// TestLoaderDumpFormats runs the cacheagent binary's `loader ids` and
// `loader dump` on a Megatron dataset numpy wrote and on WebDataset shards
// Python's tarfile wrote (ustar, pax and GNU), and has Python check every
// dumped file: ids against `loader ids`, the token windows against numpy's,
// each field's offsets (int64, batch+1) and bytes (uint8) against what
// tarfile reads from the shards.
func TestLoaderDumpFormats(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	data := t.TempDir()
	const L = 16
	testenv.RunPython(t, "../../loader/formats/testdata/token_datasets.py", filepath.Join(data, "tok"), strconv.Itoa(L))
	testenv.RunPython(t, "../../loader/formats/testdata/wds_dataset.py", filepath.Join(data, "wds"))
	os.Remove(filepath.Join(data, "wds", "expect.json"))
	objs := append(dirObjects(t, filepath.Join(data, "tok", "megatron"), "mt/"),
		dirObjects(t, filepath.Join(data, "wds"), "wds/")...)
	s := startEmulator(t, emulator.Options{Objects: objs})
	for _, tc := range []struct {
		name  string
		flags []string
		check []string
	}{
		{"megatron", []string{"--data", "gs://bkt/mt/", "--pattern", "shard-*.{bin,idx}", "--seq-len", strconv.Itoa(L),
			"--batch", "2", "--shuffle", "global", "--seed", "3", "--world", "2", "--rank", "1"},
			[]string{"tokens", filepath.Join(data, "tok", "expect.json"), "megatron", strconv.Itoa(L)}},
		{"webdataset", []string{"--data", "gs://bkt/wds/", "--pattern", "shard-*.tar", "--format", "webdataset",
			"--batch", "3", "--shuffle", "global", "--seed", "4"},
			[]string{"webdataset", filepath.Join(data, "wds")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			ids, err := run(t, s.Endpoint(), cache, append([]string{"loader", "ids"}, tc.flags...)...)
			if err != nil {
				t.Fatal(err)
			}
			idsFile := filepath.Join(t.TempDir(), "ids.txt")
			if err := os.WriteFile(idsFile, []byte(ids), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "dump")
			args := append([]string{"loader", "dump", "--batches", "3", "--out", out}, tc.flags...)
			if _, err := run(t, s.Endpoint(), cache, args...); err != nil {
				t.Fatal(err)
			}
			if n, _ := filepath.Glob(filepath.Join(out, "batch-*.ids.npy")); len(n) != 3 {
				t.Fatalf("dumped %d batches; want 3", len(n))
			}
			check := append([]string{tc.check[0], out, idsFile}, tc.check[1:]...)
			testenv.RunPython(t, "testdata/check_dump.py", check...)
		})
	}
}

// TestLoaderDumpMalformed runs `loader dump` on malformed shards: the
// binary exits with status 1 and an error naming the object, never a
// panic or a batch.
func TestLoaderDumpMalformed(t *testing.T) {
	ms := cachetest.MalformedDatasets(t)
	var objs []fakestorage.Object
	for _, m := range ms {
		for n, b := range m.Files() {
			objs = append(objs, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt",
				Name: m.Name + "/" + n}, Content: b})
		}
	}
	s := startEmulator(t, emulator.Options{Objects: objs})
	for _, m := range ms {
		t.Run(m.Name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "dump")
			args := []string{"loader", "dump", "--data", "gs://bkt/" + m.Name + "/", "--pattern", m.Pattern,
				"--format", m.Format, "--batch", "1", "--batches", "1", "--out", out}
			if m.TokenDType != "" {
				args = append(args, "--token-dtype", m.TokenDType)
			}
			if m.SeqLen != 0 {
				args = append(args, "--seq-len", strconv.Itoa(m.SeqLen))
			}
			_, err := run(t, s.Endpoint(), filepath.Join(t.TempDir(), "cache"), args...)
			var exit *exec.ExitError
			obj := "gs://bkt/" + m.Name + "/" + m.Object
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(err.Error(), obj) ||
				strings.Contains(err.Error(), "panic") {
				t.Fatalf("%v; want exit status 1 and an error naming %s", err, obj)
			}
			if n, _ := filepath.Glob(filepath.Join(out, "batch-*")); len(n) != 0 {
				t.Errorf("wrote %v", n)
			}
		})
	}
}
