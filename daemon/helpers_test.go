package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/cachetest"
	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/control"
)

// testTimeout bounds every wait in these tests; none is expected to come
// close.
const testTimeout = time.Minute

// dataset returns n objects named prefix%02d of size+i bytes each.
func dataset(bucket, prefix string, n, size int) []fakestorage.Object {
	objs := make([]fakestorage.Object, n)
	for i := range objs {
		objs[i] = fakestorage.Object{
			ObjectAttrs: fakestorage.ObjectAttrs{BucketName: bucket, Name: fmt.Sprintf("%s%02d", prefix, i)},
			Content:     emulator.Pattern(uint64(i)+11, size+i),
		}
	}
	return objs
}

// startEmulator starts the emulator with objs for the test.
func startEmulator(t testing.TB, objs []fakestorage.Object) *emulator.Server {
	t.Helper()
	return cachetest.Emulator(t, emulator.Options{Objects: objs})
}

// testConfig is a config for a daemon in dir against emu.
func testConfig(dir string, emu *emulator.Server) Config {
	return Config{
		Tiers:   TiersConfig{Disk: TierConfig{Dir: filepath.Join(dir, "cache")}},
		Fetch:   FetchConfig{Endpoint: emu.Endpoint(), Connections: 8, Slice: 256 << 10},
		Control: ControlConfig{Socket: filepath.Join(dir, "c.sock")},
		Metrics: MetricsConfig{Listen: "127.0.0.1:0"},
	}.WithDefaults()
}

// startDaemon starts a daemon on cfg, closed at cleanup.
// unpacked returns cfg with nothing packed (tiers.disk.pack_below 0): for
// tests that look at each object's own file (deleted, replaced, a byte
// flipped in it).
func unpacked(cfg Config) Config {
	cfg.Tiers.Disk.PackBelow = new(Size)
	return cfg
}

func startDaemon(t testing.TB, cfg Config) *Daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	d, err := Start(ctx, cfg, Options{Logger: log, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		d.Close(ctx)
	})
	return d
}

// dial connects a client to d, closed at cleanup.
func dial(t *testing.T, d *Daemon) *control.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := control.Dial(ctx, d.Config().Control.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testCtx returns a context bounded by testTimeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// await waits for ch to be closed or to yield, failing after testTimeout.
func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// unixClient is a plain HTTP client of d's control socket.
func unixClient(t *testing.T, d *Daemon) *http.Client {
	sock := d.Config().Control.Socket
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "unix", sock)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}
