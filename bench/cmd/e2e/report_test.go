package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/object"
)

func TestReplaceSection(t *testing.T) {
	sec := beginMarker + "\nnew\n" + endMarker + "\n"
	tests := []struct{ name, doc, want string }{
		{"empty doc", "", sec},
		{"appended", "# B\n\ntext\n\n\n", "# B\n\ntext\n\n" + sec},
		{"replaced", "# B\n" + beginMarker + "\nold\n" + endMarker + "\n## after\n", "# B\n" + sec + "## after\n"},
		{"replaced at the end", "a\n" + beginMarker + "old" + endMarker, "a\n" + sec},
	}
	for _, tt := range tests {
		got, err := replaceSection([]byte(tt.doc), sec)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: replaceSection = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	for _, doc := range []string{beginMarker + " only", endMarker + " " + beginMarker, "x " + endMarker} {
		if _, err := replaceSection([]byte(doc), sec); err == nil {
			t.Errorf("replaceSection(%q): no error; want one for broken markers", doc)
		}
	}
}

// sampleResults is a run where the agent meets two targets and misses one.
func sampleResults() *results {
	r := &results{
		setup: setupRecord{Kind: "setup", Objects: 4, Shards: 2, Samples: 1000, Bytes: 400e6, Batch: 10, Epochs: 3,
			Connections: 4, BytesPerSec: 100e6, FirstByteMS: 20, IdealSec: 1, CeilingSec: 0.5},
		mount: torchReport{SamplesPerSec: 900, Torch: "x"}, tmpfs: torchReport{SamplesPerSec: 1000, Torch: "x"},
		torchRuns: 2, machine: "test machine", command: "bench/e2e.sh",
	}
	add := func(reader string, secs ...float64) {
		for i, s := range secs {
			r.epochs = append(r.epochs, epochRecord{Kind: "epoch", Reader: reader, Epoch: i + 1, Seconds: s, Samples: 1000,
				SamplesPerSec: 1000 / s, DownloadSec: s / 2})
		}
	}
	add(readerDirect, 2, 2, 2)
	add(readerDownload, 1.5, 0.1, 0.1)
	add(readerAgent, 1.5, 0.1, 0.3)
	add(readerAgentAhead, 1.1, 0.1, 0.1)
	return r
}

func TestMarkdownTargets(t *testing.T) {
	md, err := sampleResults().markdown()
	if err != nil {
		t.Fatalf("markdown: %v", err)
	}
	for _, want := range []string{
		"| agent warm epoch ≥ 10× the direct-GCS epoch | **10.0×** (mean of 2 warm epochs 0.200 s vs direct GCS 2.000 s; lookahead = connections: 20.0×) | met |",
		"| agent cold epoch ≤ 1.25× the link-limited ideal | **1.50×** (1.500 s vs 1.000 s; lookahead = connections: 1.10×; a plain parallel copy over the same link: 0.75×) | **not met** |",
		"| PyTorch through the mount (warm) ≥ 0.8× PyTorch on tmpfs | **0.90×** (900 vs 1000 samples/s) | met |",
		"| download-then-read | 1 (copy 0.75 s) |",
		"| agent | 1 (cold) | 1.500 |",
		"| machine ceiling: 4 plain streams, link unshaped, bytes discarded | | 0.500 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if !strings.HasPrefix(md, beginMarker) || !strings.HasSuffix(md, endMarker+"\n") {
		t.Errorf("markdown is not wrapped in the markers:\n%s", md)
	}
}

func TestMarkdownNeedsDirect(t *testing.T) {
	r := sampleResults()
	r.epochs = r.epochs[3:]
	if _, err := r.markdown(); err == nil {
		t.Error("markdown without direct-GCS epochs: no error; want one")
	}
}

func TestReadResults(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jsonl")
	writeFile(t, good, `{"kind":"setup","bytes":5,"ideal_sec":1}
{"kind":"epoch","reader":"agent","epoch":1,"seconds":2}
`)
	var r results
	if err := readResults(good, &r); err != nil || r.setup.Bytes != 5 || len(r.epochs) != 1 || r.epochs[0].Seconds != 2 {
		t.Errorf("readResults(good) = %+v, %v", r, err)
	}
	for name, body := range map[string]string{
		"nosetup.jsonl": `{"kind":"epoch","reader":"agent","epoch":1}` + "\n",
		"kind.jsonl":    `{"kind":"other"}` + "\n",
		"json.jsonl":    "{\n",
	} {
		p := filepath.Join(dir, name)
		writeFile(t, p, body)
		if err := readResults(p, &results{}); err == nil {
			t.Errorf("readResults(%s): no error; want one", name)
		}
	}
}

// writeFile writes a test file.
func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLocalFilesReadByLoader checks that the download-then-read path (files
// laid out as root/BUCKET/NAME, mapped by mmapstore) feeds the loader the
// right samples.
func TestLocalFilesReadByLoader(t *testing.T) {
	root := t.TempDir()
	ds := synth.Uniform(3, 50, 24)
	if err := ds.WriteDir(root, "bkt", "train/"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir, err := fetch.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	d, err := loader.FromPattern(ctx, dir, "bkt", "train/", synth.Pattern)
	if err != nil {
		t.Fatal(err)
	}
	store := mmapstore.New(localFiles{root: root}, mmapstore.Config{Revalidate: -1})
	defer store.Close()
	l, err := loader.New(loader.FromStore(store), loader.Config{Dataset: d, BatchSize: 16, Seed: 3, Epochs: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var n int
	for {
		b, err := l.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if err := checkBatch(b); err != nil {
			t.Fatal(err)
		}
		n += b.Len()
		b.Release()
	}
	if n != 2*150 {
		t.Errorf("read %d samples in 2 epochs; want %d", n, 2*150)
	}
	if _, err := localPath(root, object.Object{Bucket: "bkt", Name: "../../etc/passwd"}); err == nil {
		t.Error("localPath accepted a name that leaves the root")
	}
}
