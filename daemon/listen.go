package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// SocketMode is the control socket's permission: owner and group may
// connect (systemd's unit runs the daemon with Group=cacheagent).
const SocketMode = 0o660

// ErrSocketInUse means another daemon answers on the control socket.
var ErrSocketInUse = errors.New("daemon: control socket is in use by another daemon")

// listen opens the control socket and the metrics listener and builds
// their servers.
func (d *Daemon) listen(cfg Config) error {
	ln, err := listenUnix(cfg.Control.Socket)
	if err != nil {
		return err
	}
	reqCtx, stop := context.WithCancel(context.Background())
	d.ctrlLn, d.stopRequests = ln, stop
	d.ctrl = &http.Server{
		Handler:           d.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ConnContext:       withPeerCred,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	if cfg.Metrics.Listen == MetricsOff {
		return nil
	}
	mln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		stop()
		return errors.Join(fmt.Errorf("daemon: metrics listen: %w", err), ln.Close())
	}
	d.metLn = mln
	d.metSrv = &http.Server{
		Handler:           d.met.Handler(d.ready.Load),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelDebug),
	}
	return nil
}

// listenUnix listens on a Unix socket at path with SocketMode. A socket
// file left by a dead daemon is replaced; one a live daemon answers on is
// not (ErrSocketInUse), and neither is a file that is not a socket.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("daemon: control socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("daemon: control socket %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrSocketInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("daemon: remove stale control socket: %w", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("daemon: control socket: %w", err)
	}
	// Before the first Accept: connecting needs write permission, and the
	// umask's default (0755 or stricter) allows only the owner meanwhile.
	if err := os.Chmod(path, SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("daemon: control socket mode: %w", err)
	}
	return ln, nil
}
