package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/cmd/cli"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/mmapstore/npy"
	"github.com/cacheagent/cacheagent/mmapstore/safetensors"
)

// inspectOptions returns options for a standalone inspect against the
// emulator at endpoint, with a fresh cache dir and no daemon on the socket.
func inspectOptions(t *testing.T, endpoint string) *cli.Options {
	dir := t.TempDir()
	return &cli.Options{CacheDir: filepath.Join(dir, "cache"), Endpoint: endpoint, Revalidate: time.Minute,
		Connections: 4, Slice: cli.Size(1 << 20), Socket: filepath.Join(dir, "none.sock")}
}

// runInspect runs `inspect args...` in-process, with opts resolved as the
// root command would, and returns its stdout.
func runInspect(t *testing.T, opts *cli.Options, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := newInspectCmd(opts)
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

func readTestdata(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "mmapstore", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestInspect(t *testing.T) {
	npyData := readTestdata(t, "npy/testdata/f4_lt_2x3x4_F_v1.npy")
	stData := readTestdata(t, "safetensors/testdata/all_dtypes.safetensors")
	obj := func(name string, b []byte) fakestorage.Object {
		return fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: name}, Content: b}
	}
	s := startEmulator(t, emulator.Options{Objects: []fakestorage.Object{
		obj("d/x.npy", npyData),
		obj("d/model.safetensors", stData),
	}})
	opts := inspectOptions(t, s.Endpoint())

	out, err := runInspect(t, opts, "--json", "gs://bkt/d/x.npy")
	if err != nil {
		t.Fatalf("inspect x.npy: %v", err)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	a := rep.Array
	if rep.Format != "npy" || rep.Version != "1.0" || rep.Descr != "<f4" || a == nil || a.DType != "float32" ||
		!slices.Equal(a.Shape, []int{2, 3, 4}) || a.Order != "Fortran" || a.Offset != 128 || a.Bytes != 96 ||
		rep.DataOffset != 128 || rep.Size != int64(len(npyData)) || rep.Generation == 0 {
		t.Errorf("inspect x.npy = %s; want npy 1.0 <f4 float32 (2, 3, 4) Fortran at 128, 96 bytes", out)
	}

	out, err = runInspect(t, opts, "gs://bkt/d/x.npy")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"npy 1.0", "float32 (<f4, little)", "(2, 3, 4)", "Fortran", "128"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect x.npy text lacks %q:\n%s", want, out)
		}
	}

	out, err = runInspect(t, opts, "--json", "gs://bkt/d/model.safetensors")
	if err != nil {
		t.Fatalf("inspect model.safetensors: %v", err)
	}
	rep = inspectReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	checkSafetensorsReport(t, rep, stData)

	out, err = runInspect(t, opts, "gs://bkt/d/model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"safetensors, 16 tensors", "t.f64", "float64", "(2, 3)", "[0, 48]", "note = café λ"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect model.safetensors text lacks %q:\n%s", want, out)
		}
	}
}

// checkSafetensorsReport compares rep with safetensors.Parse of the file.
func checkSafetensorsReport(t *testing.T, rep inspectReport, file []byte) {
	t.Helper()
	f, err := safetensors.Parse(file)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Format != "safetensors" || rep.DataOffset != f.DataOffset || len(rep.Tensors) != len(f.Names) ||
		rep.Metadata["format"] != "pt" {
		t.Fatalf("report: format %q, data offset %d, %d tensors, metadata %v; want safetensors, %d, %d, format=pt",
			rep.Format, rep.DataOffset, len(rep.Tensors), rep.Metadata, f.DataOffset, len(f.Names))
	}
	for i, tr := range rep.Tensors {
		a := f.Tensors[f.Names[i]]
		begin := a.Offset - f.DataOffset
		if tr.Name != f.Names[i] || tr.DType != a.DType.String() || !slices.Equal(tr.Shape, a.Shape) ||
			tr.Offset != a.Offset || tr.DataOffsets == nil ||
			*tr.DataOffsets != [2]int64{begin, begin + int64(len(a.Data))} {
			t.Errorf("tensor %d = %+v; want %s %s %v at %d", i, tr, f.Names[i], a.DType, a.Shape, a.Offset)
		}
	}
}

func TestInspectMalformed(t *testing.T) {
	npyData := readTestdata(t, "npy/testdata/f4_lt_3x4_C_v1.npy")
	obj := func(name string, b []byte) fakestorage.Object {
		return fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: name}, Content: b}
	}
	s := startEmulator(t, emulator.Options{Objects: []fakestorage.Object{
		obj("d/cut.npy", npyData[:len(npyData)-1]),
		obj("d/hdr.npy", bytes.Replace(slices.Clone(npyData), []byte("'descr'"), []byte("'descx'"), 1)),
		obj("d/bad.safetensors", []byte("\x02\x00\x00\x00\x00\x00\x00\x00{]")),
		obj("d/notes.txt", []byte("just text")),
	}})
	opts := inspectOptions(t, s.Endpoint())
	tests := []struct {
		uri  string
		want error
	}{
		{"gs://bkt/d/cut.npy", npy.ErrTruncated},
		{"gs://bkt/d/hdr.npy", npy.ErrHeader},
		{"gs://bkt/d/bad.safetensors", safetensors.ErrHeader},
		{"gs://bkt/d/notes.txt", mmapstore.ErrFormat},
	}
	for _, tc := range tests {
		out, err := runInspect(t, opts, tc.uri)
		switch {
		case err == nil:
			t.Errorf("inspect %s succeeded:\n%s", tc.uri, out)
		case !errors.Is(err, tc.want):
			t.Errorf("inspect %s = %v; want %v", tc.uri, err, tc.want)
		case strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), tc.uri):
			t.Errorf("inspect %s: error %q; want one line naming the object", tc.uri, err)
		}
	}
	if _, err := runInspect(t, opts, "gs://bkt/d/missing.npy"); err == nil {
		t.Error("inspect of a missing object succeeded")
	}
}

// TestInspectThroughDaemon runs inspect while a daemon owns the cache: it
// maps the daemon's copy through a lease session instead of opening the
// cache directory.
func TestInspectThroughDaemon(t *testing.T) {
	npyData := readTestdata(t, "npy/testdata/f8_lt_5_C_v2.npy")
	s := startEmulator(t, emulator.Options{Objects: []fakestorage.Object{{
		ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: "d/v2.npy"}, Content: npyData}}})
	dir := t.TempDir()
	p := startServe(t, dir, daemonConfig(dir, s.Endpoint(), ""))
	opts := inspectOptions(t, s.Endpoint())
	opts.Socket = p.socket
	out, err := runInspect(t, opts, "--json", "gs://bkt/d/v2.npy")
	if err != nil {
		t.Fatalf("inspect through the daemon: %v", err)
	}
	var rep inspectReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if rep.Version != "2.0" || rep.Array == nil || rep.Array.DType != "float64" || !slices.Equal(rep.Array.Shape, []int{5}) {
		t.Errorf("inspect = %s; want npy 2.0 float64 (5,)", out)
	}
	if _, err := os.Stat(opts.CacheDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("inspect created its own cache dir (%v); want the daemon's used", err)
	}
}
