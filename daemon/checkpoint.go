package daemon

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/checkpoint"
	"github.com/cacheagent/cacheagent/control"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// CheckpointStore is a checkpoint store with the upload client it owns.
type CheckpointStore struct {
	*checkpoint.Store
	gcs *fetch.GCS
}

// OpenCheckpointStore opens the checkpoint store of cfg over cache (in the
// disk tier's directory, with an upload client of its own: its own
// connections, the read-write scope) and resumes the saves a previous run
// left. The daemon opens one; a standalone `cacheagent checkpoint` too.
func OpenCheckpointStore(ctx context.Context, cfg Config, cache *tier.Cache, log *slog.Logger) (*CheckpointStore, error) {
	return openCheckpointStore(ctx, cfg, cache, log, nil)
}

// openCheckpointStore is OpenCheckpointStore with the fleet replicas go to
// (nil: none).
func openCheckpointStore(ctx context.Context, cfg Config, cache *tier.Cache, log *slog.Logger,
	fl checkpoint.Fleet) (*CheckpointStore, error) {
	gc := cfg.Fetch.GCS()
	gc.ReadWrite = true
	cc := cfg.Checkpoint.store()
	gc.MaxIdleConns = cmp.Or(cc.Connections, checkpoint.DefaultConnections)
	up, err := fetch.NewGCS(ctx, gc)
	if err != nil {
		return nil, err
	}
	cc.Dir = filepath.Join(cfg.Tiers.Disk.Dir, "checkpoints")
	cc.Cache, cc.Bucket, cc.Node, cc.Logger = cache, up, nodeName(cfg), log
	if fl != nil {
		cc.Fleet = fl
	} else {
		cc.Replicas = 0
	}
	s, err := checkpoint.Open(ctx, cc)
	if err != nil {
		up.Close()
		return nil, err
	}
	return &CheckpointStore{Store: s, gcs: up}, nil
}

// Close stops the uploads (they resume at the next open) and closes the
// upload client.
func (s *CheckpointStore) Close() error {
	return errors.Join(s.Store.Close(), s.gcs.Close())
}

// openCheckpoints opens the daemon's checkpoint store.
func (d *Daemon) openCheckpoints(ctx context.Context, cfg Config) error {
	var fl checkpoint.Fleet
	if d.peers != nil {
		d.ckptFleet = newCkptFleet(d.peers, d.log)
		fl = d.ckptFleet
	}
	s, err := openCheckpointStore(ctx, cfg, d.cache, d.log, fl)
	if err != nil {
		return err
	}
	d.ckpt = s
	return nil
}

// closeCheckpoints stops the uploads (they resume at the next start).
func (d *Daemon) closeCheckpoints() error {
	if d.ckpt == nil {
		return nil
	}
	return d.ckpt.Close()
}

// nodeName names this agent in checkpoints: its fleet name, else the
// host's.
func nodeName(cfg Config) string {
	if cfg.Fleet != nil && cfg.Fleet.Name != "" {
		return cfg.Fleet.Name
	}
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// peerCredKey is the context key of a control connection's peer
// credentials.
type peerCredKey struct{}

// withPeerCred stores the credentials of the process at the other end of a
// control connection in ctx (the http.Server's ConnContext).
func withPeerCred(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return ctx
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return ctx
	}
	return context.WithValue(ctx, peerCredKey{}, cred)
}

// caller returns the user a checkpoint request acts for: the control
// connection's peer; nil (no checks) for root. A request whose peer is not
// known is refused.
func caller(r *http.Request) (*checkpoint.Owner, error) {
	cred, ok := r.Context().Value(peerCredKey{}).(*unix.Ucred)
	if !ok {
		return nil, fmt.Errorf("%w: the caller's credentials are unknown", control.ErrPermission)
	}
	if cred.Uid == 0 {
		return nil, nil
	}
	return &checkpoint.Owner{UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}

// checkpointURI parses a checkpoint prefix from a request.
func checkpointURI(s string) (object.URI, error) {
	u, err := object.ParsePrefix(s)
	if err != nil {
		return u, fmt.Errorf("%w: %w", control.ErrInvalid, err)
	}
	return u, nil
}

// handleCheckpointSave serves POST /v1/checkpoints.
func (d *Daemon) handleCheckpointSave(w http.ResponseWriter, r *http.Request) {
	var req control.CheckpointSave
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	owner, err := caller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	u, err := checkpointURI(req.URI)
	if err != nil {
		writeError(w, err)
		return
	}
	if !filepath.IsAbs(req.Dir) {
		writeError(w, fmt.Errorf("%w: the directory %q is not an absolute path", control.ErrInvalid, req.Dir))
		return
	}
	dir := filepath.Clean(req.Dir)
	if err := d.ckpt.CheckDurability(req.Wait); err != nil {
		writeError(w, err) // before the save: nothing is taken
		return
	}
	d.servePeers(u.Bucket)
	staging := filepath.Join(d.ckptDir(), "staging") + string(filepath.Separator)
	info, err := d.ckpt.Save(r.Context(), dir, u,
		checkpoint.SaveOptions{Owner: owner, Staged: strings.HasPrefix(dir, staging)})
	if err == nil && cmp.Or(req.Wait, control.DurabilityLocal) != control.DurabilityLocal {
		info, err = d.ckpt.Wait(r.Context(), u, req.Wait)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// servePeers lets the fleet's members read this agent's cached objects
// of bucket (a bucket it saves checkpoints to).
func (d *Daemon) servePeers(bucket string) {
	if d.peers != nil && d.peers.srv != nil {
		d.peers.srv.AllowBucket(bucket)
	}
}

// ckptDir is the checkpoint store's directory.
func (d *Daemon) ckptDir() string { return filepath.Join(d.Config().Tiers.Disk.Dir, "checkpoints") }

// handleCheckpointStaging serves POST /v1/checkpoints/staging: a fresh
// directory on the cache's filesystem, owned by the caller.
func (d *Daemon) handleCheckpointStaging(w http.ResponseWriter, r *http.Request) {
	owner, err := caller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	dir, err := d.ckpt.Staging(owner)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, control.CheckpointDir{Dir: dir})
}

// handleCheckpointUnstage serves DELETE /v1/checkpoints/staging?dir=: it
// removes a staging or restore directory the daemon gave the caller (whose
// parent the caller may not write), with what is left in it.
func (d *Daemon) handleCheckpointUnstage(w http.ResponseWriter, r *http.Request) {
	owner, err := caller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	dir := r.URL.Query().Get("dir")
	if !stagingName(filepath.Base(dir)) || dir != filepath.Join(d.ckptDir(), "staging", filepath.Base(dir)) {
		writeError(w, fmt.Errorf("%w: %q is not a staging directory", control.ErrInvalid, dir))
		return
	}
	if err := checkpoint.CheckGiven(dir, owner); err != nil {
		writeError(w, err)
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stagingName reports whether name is one the daemon gives staging and
// restore directories: hex digits, with "restore-" before them for a
// restore's (never ".", ".." or anything else in staging/).
func stagingName(name string) bool {
	hexDigits := strings.TrimPrefix(name, "restore-")
	if hexDigits == "" {
		return false
	}
	for _, r := range hexDigits {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// handleCheckpointWait serves POST /v1/checkpoints/wait.
func (d *Daemon) handleCheckpointWait(w http.ResponseWriter, r *http.Request) {
	var req control.CheckpointWait
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	u, err := checkpointURI(req.URI)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx := r.Context()
	if req.TimeoutMillis > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMillis)*time.Millisecond)
		defer cancel()
	}
	info, err := d.ckpt.Wait(ctx, u, cmp.Or(req.Durability, control.DurabilityGCS))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// handleCheckpointStatus serves GET /v1/checkpoints[?uri=].
func (d *Daemon) handleCheckpointStatus(w http.ResponseWriter, r *http.Request) {
	var u object.URI
	if s := r.URL.Query().Get("uri"); s != "" {
		var err error
		if u, err = checkpointURI(s); err != nil {
			writeError(w, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, control.Checkpoints{Checkpoints: d.ckpt.Status(u)})
}

// handleCheckpointList serves GET /v1/checkpoints/list?uri=gs://B/RUN/.
func (d *Daemon) handleCheckpointList(w http.ResponseWriter, r *http.Request) {
	u, err := checkpointURI(r.URL.Query().Get("uri"))
	if err != nil {
		writeError(w, err)
		return
	}
	l, skipped, err := checkpoint.List(r.Context(), d.src, u)
	if err != nil {
		writeError(w, err)
		return
	}
	out := control.Checkpoints{Checkpoints: l}
	for _, e := range skipped {
		out.Skipped = append(out.Skipped, e.Error())
	}
	writeJSON(w, http.StatusOK, out)
}

// handleCheckpointRestore serves POST /v1/checkpoints/restore.
func (d *Daemon) handleCheckpointRestore(w http.ResponseWriter, r *http.Request) {
	var req control.CheckpointRestore
	if err := decodeBody(w, r, &req, maxRequestBody); err != nil {
		writeError(w, err)
		return
	}
	owner, err := caller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	u, err := checkpointURI(req.URI)
	if err != nil {
		writeError(w, err)
		return
	}
	dir := req.Dir
	switch {
	case dir == "":
		var b [8]byte
		rand.Read(b[:])
		dir = filepath.Join(d.ckptDir(), "staging", "restore-"+hex.EncodeToString(b[:]))
	case !filepath.IsAbs(dir):
		writeError(w, fmt.Errorf("%w: the directory %q is not an absolute path", control.ErrInvalid, dir))
		return
	}
	res, err := d.ckpt.Restore(r.Context(), u, filepath.Clean(dir), owner)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
