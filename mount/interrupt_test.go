package mount

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/bench/testenv"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// gate stalls the emulator's media GETs until it is opened; started is
// closed when the first one arrives.
type gate struct {
	started, release       chan struct{}
	startOnce, releaseOnce sync.Once
}

func newGate() *gate { return &gate{started: make(chan struct{}), release: make(chan struct{})} }

// plan is the emulator's fault plan: no fault, after a wait.
func (g *gate) plan(r *http.Request, n int) emulator.Fault {
	g.startOnce.Do(func() { close(g.started) })
	select {
	case <-g.release:
	case <-r.Context().Done():
	}
	return emulator.Fault{}
}

// open lets the media GETs through.
func (g *gate) open() { g.releaseOnce.Do(func() { close(g.release) }) }

// TestInterruptedOpen kills a process while its open waits for a cold
// download: the open returns EINTR at once, leaves nothing open, and the
// download goes on for the next reader.
func TestInterruptedOpen(t *testing.T) {
	cat, err := exec.LookPath("cat")
	if err != nil {
		testenv.Cannot(t, "no cat: %v", err)
	}
	data := emulator.Pattern(3, 100<<10)
	g := newGate()
	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "slow.bin", data)}, Faults: g.plan}, fetch.Config{})
	t.Cleanup(g.open)
	// Opens from this process may be interrupted too (and retried by Go):
	// the hook never blocks, and only the first and last results count.
	results := make(chan syscall.Errno, 64)
	srv, mp := e.mount(t, e.config(Root{Bucket: "data"}), func(f *FS) {
		f.openDone = func(_ object.Object, en syscall.Errno) {
			select {
			case results <- en:
			default:
			}
		}
	})
	path := filepath.Join(mp, "data", "slow.bin")

	killDuringOpen(t, cat, path, g.started)
	if en := <-results; en != syscall.EINTR {
		t.Errorf("interrupted open = %v; want EINTR", en)
	}
	if st := srv.Stats(); st.OpenFiles != 0 || st.OpenErrors != 1 {
		t.Errorf("OpenFiles = %d, OpenErrors = %d; want 0 and 1", st.OpenFiles, st.OpenErrors)
	}

	g.open()
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the interrupted open: %v (equal %v)", err, bytes.Equal(got, data))
	}
	last := syscall.Errno(1<<31 - 1)
	for len(results) > 0 {
		last = <-results
	}
	if last != 0 {
		t.Errorf("last open = %v; want success", last)
	}
	if n := e.emu.MediaGETs(); n != 1 {
		t.Errorf("media GETs = %d; want 1 (the interrupted download went on)", n)
	}
}

// killDuringOpen runs cat on path and SIGKILLs it once started is closed
// (its open is waiting for the download), then checks that it died.
func killDuringOpen(t *testing.T, cat, path string, started <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(cat, path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var waiter sync.WaitGroup
	waiter.Go(func() { exited <- cmd.Wait() })
	defer waiter.Wait()
	select {
	case <-started:
	case err := <-exited:
		t.Fatalf("cat exited before the download started: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// The kernel holds the dying process until the open is answered.
	var ee *exec.ExitError
	if err := <-exited; !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("cat: %v; want killed", err)
	}
}
