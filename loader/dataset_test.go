package loader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/loader/synth"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
)

// writeFile writes data as gs://b/name in the env's source.
func (e *env) writeFile(t testing.TB, name string, data []byte) {
	t.Helper()
	p := filepath.Join(e.root, testBucket, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFromPattern(t *testing.T) {
	data := synth.Dataset{Rows: []int{3, 4, 5}, RowBytes: 12}
	e := newEnv(t, data)
	e.writeFile(t, "train/README", []byte("not a shard"))
	d := e.dataset(t)
	if !slices.Equal(d.Names, []string{"x", "y"}) || len(d.Groups) != 3 {
		t.Fatalf("names %v, %d groups", d.Names, len(d.Groups))
	}
	for i, g := range d.Groups {
		if g.Rows != data.Rows[i] || g.Objects[0].Name != synth.Name("train/", i, "x") ||
			g.Objects[1].Name != synth.Name("train/", i, "y") || g.Objects[0].Generation == 0 {
			t.Errorf("group %d = %+v", i, g)
		}
	}
	want := []Spec{{DType: array.Uint8, ByteOrder: array.NotApplicable, Row: []int{12}},
		{DType: array.Int64, ByteOrder: array.Little}}
	for j, s := range d.Specs {
		if !s.equal(want[j]) || s.RowSize() != []int{12, 8}[j] {
			t.Errorf("spec %d = %s; want %s", j, s, want[j])
		}
	}
	// The arrays in directories of their own, shards numbered without padding.
	for i, n := range []int{2, 10, 9} {
		e.writeFile(t, "alt/x/part-"+strconv.Itoa(n)+".npy", data.X(i))
		e.writeFile(t, "alt/y/part-"+strconv.Itoa(n)+".npy", data.Y(i))
	}
	alt, err := FromPattern(context.Background(), e.src, testBucket, "alt/", "{x,y}/part-*.npy")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, g := range alt.Groups {
		order = append(order, g.Objects[1].Name)
	}
	if want := []string{"alt/y/part-2.npy", "alt/y/part-9.npy", "alt/y/part-10.npy"}; !slices.Equal(order, want) {
		t.Errorf("shard order %v; want %v", order, want)
	}
	one, err := FromPattern(context.Background(), e.src, testBucket, "train/", "shard-*.x.npy")
	if err != nil || !slices.Equal(one.Names, []string{DefaultArrayName}) || len(one.Groups) != 3 {
		t.Errorf("single-array pattern: %+v, %v", one, err)
	}
}

func TestFromPatternErrors(t *testing.T) {
	data := synth.Dataset{Rows: []int{3, 4}, RowBytes: 8}
	e := newEnv(t, data)
	ctx := context.Background()
	for _, p := range []string{"shard.npy", "a-*-*.npy", "{x,y.npy*", "*.{x,,y}.npy", "*.{x,x}.npy", "{x,*}.npy", "{a}{b}*"} {
		if _, err := FromPattern(ctx, e.src, testBucket, "train/", p); !errors.Is(err, ErrPattern) {
			t.Errorf("FromPattern(%q) = %v; want ErrPattern", p, err)
		}
	}
	if _, err := FromPattern(ctx, e.src, testBucket, "nothing/", synth.Pattern); !errors.Is(err, ErrPattern) {
		t.Errorf("pattern matching nothing: %v; want ErrPattern", err)
	}
	// A shard whose y is missing.
	e.writeFile(t, "train/shard-00002.x.npy", data.X(0))
	_, err := FromPattern(ctx, e.src, testBucket, "train/", synth.Pattern)
	if !errors.Is(err, ErrDataset) || !strings.Contains(err.Error(), "shard-00002.y.npy") {
		t.Errorf("missing array: %v; want ErrDataset naming shard-00002.y.npy", err)
	}
	// A shard whose arrays have different leading dimensions.
	e.writeFile(t, "train/shard-00002.y.npy", data.Y(1))
	_, err = FromPattern(ctx, e.src, testBucket, "train/", synth.Pattern)
	if !errors.Is(err, ErrDataset) || !strings.Contains(err.Error(), "has 4 rows but x") {
		t.Errorf("mismatched leading dimensions: %v; want ErrDataset saying so", err)
	}
	// A shard whose x rows are wider than the others'.
	wide := synth.Dataset{Rows: []int{3}, RowBytes: 16}
	e.writeFile(t, "train/shard-00002.x.npy", wide.X(0))
	e.writeFile(t, "train/shard-00002.y.npy", wide.Y(0))
	if _, err := FromPattern(ctx, e.src, testBucket, "train/", synth.Pattern); !errors.Is(err, ErrDataset) {
		t.Errorf("different row shapes: %v; want ErrDataset", err)
	}
	// Not an npy file; a truncated one; a 0-d array.
	for name, b := range map[string][]byte{
		"not npy":   []byte("hello, world"),
		"truncated": data.X(0)[:200],
		"0-d":       append(synth.NPYHeader("|u1", nil), 7),
	} {
		e.writeFile(t, "train/shard-00002.x.npy", b)
		if _, err := FromPattern(ctx, e.src, testBucket, "train/", synth.Pattern); !errors.Is(err, ErrDataset) {
			t.Errorf("%s: %v; want ErrDataset", name, err)
		}
	}
}

func TestManifest(t *testing.T) {
	data := synth.Dataset{Rows: []int{3, 4}, RowBytes: 8}
	e := newEnv(t, data)
	ctx := context.Background()
	gen := e.dataset(t).Groups[1].Objects[0].Generation
	m := `{"arrays": ["x", "y"], "shards": [
		{"x": "gs://b/train/shard-00000.x.npy", "y": "gs://b/train/shard-00000.y.npy"},
		{"x": "gs://b/train/shard-00001.x.npy#` + strconv.FormatInt(gen, 10) + `", "y": "gs://b/train/shard-00001.y.npy", "rows": 4}]}`
	d, err := ParseManifest([]byte(m))
	if err != nil {
		t.Fatal(err)
	}
	if d.Groups[0].Rows != 0 || d.Groups[1].Rows != 4 || d.Groups[1].Objects[0].Generation != gen {
		t.Fatalf("parsed %+v", d)
	}
	if _, err := New(FromStore(e.store), Config{Dataset: d, BatchSize: 2}); !errors.Is(err, ErrDataset) {
		t.Errorf("New with unknown rows: %v; want ErrDataset", err)
	}
	r, err := d.Resolve(ctx, e.src)
	if err != nil {
		t.Fatal(err)
	}
	if r.Groups[0].Rows != 3 || len(r.Specs) != 2 || d.Groups[0].Rows != 0 {
		t.Fatalf("Resolve = %+v (the original must not change)", r)
	}
	got := flatten(drain(t, e.open(t, Config{Dataset: r, BatchSize: 2, Shuffle: 2}), data))
	if len(got) != 7 {
		t.Errorf("read %d samples; want 7", len(got))
	}
	// Rows the manifest gets wrong are caught when the shard opens.
	bad := r
	bad.Groups = slices.Clone(r.Groups)
	bad.Groups[1].Rows = 5
	l := e.open(t, Config{Dataset: bad, BatchSize: 2, Shuffle: 2})
	nerr := firstError(l)
	if !errors.Is(nerr, ErrDataset) || !strings.Contains(nerr.Error(), "has 4 rows; the dataset says 5") {
		t.Errorf("wrong rows: %v; want ErrDataset", nerr)
	}
	if _, err := l.Next(ctx); !errors.Is(err, ErrDataset) {
		t.Errorf("Next after a failure: %v; want the same failure", err)
	}
}

// firstError reads batches until Next fails, and returns the error.
func firstError(l *Loader) error {
	for {
		b, err := l.Next(context.Background())
		if err != nil {
			return err
		}
		b.Release()
	}
}

func TestManifestMissingShard(t *testing.T) {
	data := synth.Dataset{Rows: []int{3, 4}, RowBytes: 8}
	e := newEnv(t, data)
	ctx := context.Background()
	r := e.dataset(t)
	miss := r
	miss.Groups = append(slices.Clone(r.Groups), Group{Rows: 2, Objects: []object.Object{
		{Bucket: testBucket, Name: "train/gone.x.npy"}, {Bucket: testBucket, Name: "train/gone.y.npy"}}})
	l := e.open(t, Config{Dataset: miss, BatchSize: 3, Shuffle: 2})
	if nerr := firstError(l); !errors.Is(nerr, object.ErrNotFound) {
		t.Errorf("missing shard: %v; want object.ErrNotFound", nerr)
	}
	if _, err := miss.Resolve(ctx, e.src); err != nil {
		t.Errorf("Resolve reads only shards of unknown rows: %v", err)
	}
	miss.Groups[2].Rows = 0
	if _, err := miss.Resolve(ctx, e.src); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Resolve of a missing shard: %v; want object.ErrNotFound", err)
	}
}

func TestManifestErrors(t *testing.T) {
	tests := []string{
		``,
		`{`,
		`[]`,
		`{"arrays": ["x"], "shards": []}`,
		`{"arrays": [], "shards": [{}]}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b/o"}], "extra": 1}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b/o", "z": "gs://b/p"}]}`,
		`{"arrays": ["x"], "shards": [{"y": "gs://b/o"}]}`,
		`{"arrays": ["x"], "shards": [{"x": "s3://b/o"}]}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b"}]}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b/o#0"}]}`,
		`{"arrays": ["x"], "shards": [{"x": 5}]}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b/o", "rows": -1}]}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b/o", "rows": "7"}]}`,
		`{"arrays": ["x", "x"], "shards": [{"x": "gs://b/o"}]}`,
		`{"arrays": ["rows"], "shards": [{"rows": 1}]}`,
		`{"arrays": ["x"], "shards": [{"x": "gs://b/o"}]} {}`,
	}
	for _, m := range tests {
		_, err := ParseManifest([]byte(m))
		if !errors.Is(err, ErrManifest) && !errors.Is(err, ErrDataset) {
			t.Errorf("ParseManifest(%s) = %v; want ErrManifest or ErrDataset", m, err)
		}
	}
}

func TestNaturalCompare(t *testing.T) {
	in := []string{"s10", "s2", "s02", "s1", "a", "s", "s1b", "s1a", "t0"}
	slices.SortFunc(in, naturalCompare)
	want := []string{"a", "s", "s1", "s1a", "s1b", "s2", "s02", "s10", "t0"}
	if !slices.Equal(in, want) {
		t.Errorf("sorted %v; want %v", in, want)
	}
}

func TestSeams(t *testing.T) {
	e := newEnv(t, unevenData)
	var allocs int
	hookErr := errors.New("device copy failed")
	var calls int
	l := e.open(t, Config{BatchSize: 4, Seed: 3, Prefetch: 3, Workers: 1,
		NewBuffer: func(n int) ([]byte, error) { allocs++; return make([]byte, n), nil },
		OnBatch: func(_ context.Context, b *Batch) error {
			calls++
			if b.Index == 2 {
				return hookErr
			}
			return nil
		}})
	if allocs != 3*2 {
		t.Errorf("NewBuffer called %d times; want one per buffer per array (6)", allocs)
	}
	for i := range 3 {
		b, err := l.Next(context.Background())
		if i < 2 {
			if err != nil {
				t.Fatal(err)
			}
			b.Release()
			continue
		}
		if !errors.Is(err, hookErr) {
			t.Errorf("batch 2: %v; want the hook's error", err)
		}
	}
	if _, err := New(FromStore(e.store), Config{Dataset: e.dataset(t), BatchSize: 4,
		NewBuffer: func(n int) ([]byte, error) { return nil, errors.New("no pinned memory") }}); err == nil {
		t.Errorf("New with a failing NewBuffer succeeded")
	}
}
