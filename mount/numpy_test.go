package mount

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/fetch"
)

// npyScript loads each .npy file named on the command line with
// mmap_mode='r' and prints its type, dtype, shape and the SHA-256 of its data.
const npyScript = `
import hashlib, sys
import numpy as np
for p in sys.argv[1:]:
    a = np.load(p, mmap_mode="r")
    shape = ",".join(str(d) for d in a.shape)
    digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()
    print(type(a).__name__, a.dtype.str, shape, digest)
`

// npyFile is a version 1.0 .npy file and what numpy should report for it.
type npyFile struct {
	name  string
	bytes []byte
	want  string // the script's line
}

// newNPY encodes a C-order array of shape with elements of size bytes,
// descr (e.g. "<f4"), filled by put.
func newNPY(name, descr string, size int, shape []int, put func(b []byte, i int)) npyFile {
	dims := make([]string, len(shape))
	n := 1
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
		n *= d
	}
	tuple := strings.Join(dims, ", ")
	if len(shape) == 1 {
		tuple += ","
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, tuple)
	pad := (64 - (10+len(header)+1)%64) % 64 // data starts 64-byte aligned
	header += strings.Repeat(" ", pad) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), 0, 0)
	binary.LittleEndian.PutUint16(b[8:], uint16(len(header)))
	b = append(b, header...)
	data := make([]byte, n*size)
	for i := range n {
		put(data[i*size:], i)
	}
	sum := sha256.Sum256(data)
	want := fmt.Sprintf("memmap %s %s %s", descr, strings.Join(dims, ","), hex.EncodeToString(sum[:]))
	return npyFile{name: name, bytes: append(b, data...), want: want}
}

// TestNumpyMmapThroughMount has numpy map .npy files on the mount, in both
// read modes.
func TestNumpyMmapThroughMount(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	files := []npyFile{
		newNPY("train/x.npy", "<f4", 4, []int{64, 33}, func(b []byte, i int) {
			binary.LittleEndian.PutUint32(b, math.Float32bits(float32(i)*0.5))
		}),
		newNPY("train/y.npy", "<i8", 8, []int{1000}, func(b []byte, i int) {
			binary.LittleEndian.PutUint64(b, uint64(i*i))
		}),
		newNPY("train/big.npy", "<i2", 2, []int{1024, 1536}, func(b []byte, i int) {
			binary.LittleEndian.PutUint16(b, uint16(i*7))
		}),
	}
	var objs []fakestorage.Object
	for _, f := range files {
		objs = append(objs, obj("data", f.name, f.bytes))
	}
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := e.config(Root{Bucket: "data", Prefix: "train/"})
			m.apply(&cfg)
			_, mp := e.mount(t, cfg, nil)
			args := []string{"-c", npyScript}
			var want []string
			for _, f := range files {
				args = append(args, filepath.Join(mp, "data", f.name))
				want = append(want, f.want)
			}
			// A bound, not a timing assertion: a hung child must not hang the test.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, testenv.Python, args...)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("numpy: %v\n%s", err, stderr.String())
			}
			if got := strings.Split(strings.TrimSpace(string(out)), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("numpy printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
