package daemon

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/loader"
	"github.com/cacheagent/cacheagent/loader/formats"
	"github.com/cacheagent/cacheagent/loader/formats/tokens"
	"github.com/cacheagent/cacheagent/loader/ring"
	"github.com/cacheagent/cacheagent/loader/sampler"
	"github.com/cacheagent/cacheagent/loader/spec"
)

// formatDaemon starts a daemon over an emulator holding objs in bucket
// "bkt", and a client.
func formatDaemon(t *testing.T, objs map[string][]byte) (*Daemon, *control.Client) {
	t.Helper()
	var fo []fakestorage.Object
	for name, data := range objs {
		fo = append(fo, fakestorage.Object{ObjectAttrs: fakestorage.ObjectAttrs{BucketName: "bkt", Name: name},
			Content: data})
	}
	d := startDaemon(t, testConfig(t.TempDir(), startEmulator(t, fo)))
	return d, dial(t, d)
}

// wantFormatIDs returns the batches a loader with req's settings returns,
// its dataset built as `cacheagent loader ids` builds it.
func wantFormatIDs(t *testing.T, d *Daemon, req spec.Spec) []loader.BatchIDs {
	t.Helper()
	ds, err := loader.ResolveDataset(testCtx(t), req, loader.Env{Source: d.src, Records: loader.Direct(d.src),
		Formats: formats.All})
	if err != nil {
		t.Fatal(err)
	}
	mode, _ := sampler.ParseMode(req.Shuffle)
	return allIDs(t, loader.Config{Dataset: ds, BatchSize: req.BatchSize, Shuffle: mode, Seed: req.Seed,
		Epochs: req.Epochs})
}

// readSession reads every batch of a session, checks its ids against want
// and passes its arrays (by name) to check, then releases it.
func readSession(t *testing.T, lc *control.LoaderConn, want []loader.BatchIDs,
	check func(ids []int64, arrays map[string][]byte)) {
	t.Helper()
	eachBatch(t, lc, len(want), func(i int, m ring.Ready) {
		_, descs, err := lc.Batch(m)
		if err != nil {
			t.Fatal(err)
		}
		slot := lc.Slot(int(m.Slot))
		arrays := make(map[string][]byte)
		for _, dsc := range descs {
			arrays[lc.Info.Arrays[dsc.Name].Name] = slot[dsc.Offset : dsc.Offset+dsc.NBytes]
		}
		ids := make([]int64, m.N)
		for k := range ids {
			ids[k] = int64(binary.LittleEndian.Uint64(arrays[idsArray][8*k:]))
		}
		if !slices.Equal(ids, want[i].IDs) {
			t.Fatalf("batch %d: ids %v; want %v", i, ids, want[i].IDs)
		}
		check(ids, arrays)
	})
}

// TestLoaderSessionTokens reads raw uint16 token files as windows: every
// batch's "tokens" rows are the windows [kL, kL+L+1) of the shards'
// concatenated stream, across shard boundaries.
func TestLoaderSessionTokens(t *testing.T) {
	const L = 16
	var stream []byte
	objs := make(map[string][]byte)
	for i, n := range []int{100, 5, 61, 40} {
		b := make([]byte, 2*n)
		for k := range n {
			binary.LittleEndian.PutUint16(b[2*k:], uint16(len(stream)/2+k)*7+3)
		}
		objs[fmt.Sprintf("tok/shard-%d.bin", i)] = b
		stream = append(stream, b...)
	}
	d, c := formatDaemon(t, objs)
	req := spec.Spec{Data: "gs://bkt/tok/", Pattern: "shard-*.bin", Format: "tokens", SeqLen: L,
		TokenDType: "uint16", BatchSize: 5, Shuffle: "global", Seed: 9, Epochs: 2, Prefetch: 3}
	want := wantFormatIDs(t, d, req)
	for _, tc := range []struct{ out, dtype string }{{"", "<u2"}, {"int64", "<i8"}, {"int32", "<i4"}} {
		req.TokenOutDType = tc.out
		lc, err := c.OpenLoader(testCtx(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if a := lc.Info.Arrays[0]; lc.Info.Format != "tokens" || a.Name != tokens.ArrayName || a.DType != tc.dtype ||
			!slices.Equal(a.Row, []int{L + 1}) {
			t.Fatalf("session %q, array %+v; want tokens %s [%d]", lc.Info.Format, a, tc.dtype, L+1)
		}
		size := int(tc.dtype[2] - '0')
		row := size * (L + 1)
		readSession(t, lc, want, func(ids []int64, arrays map[string][]byte) {
			for i, k := range ids {
				got := arrays[tokens.ArrayName][i*row : (i+1)*row]
				for j := range L + 1 {
					w := uint64(binary.LittleEndian.Uint16(stream[2*(L*int(k)+j):]))
					g := uint64(binary.LittleEndian.Uint16(got[j*size:]))
					switch size {
					case 4:
						g = uint64(binary.LittleEndian.Uint32(got[j*size:]))
					case 8:
						g = binary.LittleEndian.Uint64(got[j*size:])
					}
					if g != w {
						t.Fatalf("%s: window %d token %d = %d; want %d", tc.dtype, k, j, g, w)
					}
				}
			}
		})
		lc.Close()
	}
}

// wdsSample is one sample of the WebDataset test's tars.
type wdsSample struct {
	key    string
	fields map[string][]byte
}

// writeTar returns a tar of samples, fields in name order.
func writeTar(t *testing.T, samples []wdsSample) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, s := range samples {
		names := make([]string, 0, len(s.fields))
		for f := range s.fields {
			names = append(names, f)
		}
		slices.Sort(names)
		for _, f := range names {
			b := s.fields[f]
			if err := tw.WriteHeader(&tar.Header{Name: s.key + "." + f, Mode: 0o644, Size: int64(len(b)),
				Typeflag: tar.TypeReg}); err != nil {
				t.Fatal(err)
			}
			tw.Write(b)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// wdsData returns two tars of samples with a variable-size "txt" field
// and a "cls" field that some samples lack, and every sample in order.
func wdsData(t *testing.T) (map[string][]byte, []wdsSample) {
	var all []wdsSample
	objs := make(map[string][]byte)
	for sh, n := range []int{13, 9} {
		var samples []wdsSample
		for range n {
			id := len(all)
			s := wdsSample{key: fmt.Sprintf("s%04d", id), fields: map[string][]byte{
				"txt": bytes.Repeat([]byte{byte(id)}, 1+id*37%700)}}
			if id%4 != 1 {
				s.fields["cls"] = []byte(fmt.Sprint(id % 10))
			}
			samples, all = append(samples, s), append(all, s)
		}
		objs[fmt.Sprintf("wds/shard-%d.tar", sh)] = writeTar(t, samples)
	}
	return objs, all
}

// TestLoaderSessionWebDataset reads WebDataset tars: per field, the
// offsets and data arrays hold each sample's member bytes, empty for a
// sample without the field; a field_bytes too small for a batch ends the
// session with the loader's error.
func TestLoaderSessionWebDataset(t *testing.T) {
	objs, all := wdsData(t)
	d, c := formatDaemon(t, objs)
	req := spec.Spec{Data: "gs://bkt/wds/", Pattern: "shard-*.tar", BatchSize: 4, Shuffle: "global",
		Seed: 5, Epochs: 2, Prefetch: 2}
	want := wantFormatIDs(t, d, spec.Spec{Data: req.Data, Pattern: req.Pattern, Format: "webdataset",
		BatchSize: 4, Shuffle: "global", Seed: 5, Epochs: 2})
	lc, err := c.OpenLoader(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Info.Format != "webdataset" || !slices.Equal(lc.Info.Fields, []string{"cls", "txt"}) {
		t.Fatalf("session format %q, fields %v; want webdataset [cls txt]", lc.Info.Format, lc.Info.Fields)
	}
	readSession(t, lc, want, func(ids []int64, arrays map[string][]byte) {
		for _, f := range lc.Info.Fields {
			offs, data := arrays[f+offsetsSuffix], arrays[f+dataSuffix]
			if len(offs) != 8*(len(ids)+1) {
				t.Fatalf("%s: %d offset bytes for %d samples", f, len(offs), len(ids))
			}
			for i, id := range ids {
				lo, hi := binary.LittleEndian.Uint64(offs[8*i:]), binary.LittleEndian.Uint64(offs[8*i+8:])
				if got := data[lo:hi]; !bytes.Equal(got, all[id].fields[f]) {
					t.Fatalf("sample %d field %s = %q; want %q", id, f, got, all[id].fields[f])
				}
			}
		}
	})
	lc.Close()

	req.FieldBytes = 100 // a batch of "txt" needs more
	lc, err = c.OpenLoader(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	m, err := lc.Recv(testCtx(t))
	if re, ok := m.(*ring.Error); err != nil || !ok || re.Code != ring.CodeLoader || !strings.Contains(re.Text, "txt") {
		t.Fatalf("Recv with field_bytes 100: %#v, %v; want the loader's error naming the field", m, err)
	}
}
