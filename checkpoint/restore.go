package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
	"github.com/cacheagent/cacheagent/tier"
)

// restoreParallel bounds a restore's concurrent files.
const restoreParallel = 16

// Restore places the committed checkpoint at u into dir (created if
// missing; a file already there is an error, nothing is overwritten): it
// reads the manifest, checks that the objects match it (ErrMismatch), and
// reads each file through the cache (which fetches what it lacks: in fleet
// mode from the members that hold it, so a cluster restoring at once reads
// the checkpoint from GCS about once), then hard-links the cache's copy
// into dir where it can (the same filesystem, a file the agent may link
// and only the agent may write: the cache's copy itself, not to be
// changed in place; a file adopted from another user's save is theirs),
// else copies it, checking its CRC32C. With an
// owner, dir must be theirs (or not exist) and copies are made theirs.
func (s *Store) Restore(ctx context.Context, u object.URI, dir string, owner *Owner) (stats.Restore, error) {
	m, err := ReadManifest(ctx, s.cfg.Bucket, u)
	if err != nil {
		return stats.Restore{}, err
	}
	if err := Check(ctx, s.cfg.Bucket, m, nil); err != nil {
		return stats.Restore{}, err
	}
	if s.cfg.Fleet != nil && m.Node != s.cfg.Node {
		s.cfg.Fleet.Prefer(ctx, u, m.Node) // it holds the files, unless it died
	}
	root, err := openRestoreDir(dir, owner)
	if err != nil {
		return stats.Restore{}, err
	}
	defer root.Close()
	res := stats.Restore{Dir: dir, Files: len(m.Files), Bytes: m.Bytes()}
	linked := make([]bool, len(m.Files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(restoreParallel)
	pre, _ := object.ParsePrefix(m.URI)
	for i, f := range m.Files {
		g.Go(func() (err error) {
			o := object.Object{Bucket: pre.Bucket, Name: pre.Path + f.Name, Generation: f.Generation}
			linked[i], err = s.restoreFile(gctx, root, o, f, owner)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, fmt.Errorf("checkpoint: restore %s into %s: %w", m.URI, dir, err)
	}
	for _, l := range linked {
		if l {
			res.Linked++
		}
	}
	s.mu.Lock()
	s.figures.Restores++
	s.mu.Unlock()
	return res, nil
}

// openRestoreDir creates dir if needed (as owner's) and opens it as a
// root.
func openRestoreDir(dir string, owner *Owner) (*os.Root, error) {
	if err := os.Mkdir(dir, 0o755); err == nil {
		if err := giveNew(dir, owner); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("checkpoint: restore: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: restore: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("checkpoint: restore: %s is not a directory", dir)
	}
	if err := checkOwner(fi, owner, dir); err != nil && !given(dir, owner) {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// restoreFile reads o (file f of the manifest) through the cache and
// places it in root: a hard link to the cache's copy if it can, else a
// verified copy. It reports whether it linked.
func (s *Store) restoreFile(ctx context.Context, root *os.Root, o object.Object, f File, owner *Owner) (bool, error) {
	h, err := s.cfg.Cache.Open(ctx, o)
	if err != nil {
		return false, err
	}
	defer h.Close()
	if a := h.Attrs(); a.Size != f.Size || (a.HasCRC32C && a.CRC32C != f.CRC32C) {
		return false, fmt.Errorf("%w: the cached copy of %s has %d bytes, CRC32C %08x", ErrMismatch, o, a.Size, a.CRC32C)
	}
	if err := mkdirsAs(root, f.Name, owner); err != nil {
		return false, err
	}
	// A segment holds other objects too, and a file another user may
	// write would let them change the cache's copy through the link:
	// copied.
	if !h.Packed() && agentsAlone(h.Path()) {
		if err := linkInto(root, h.Path(), f.Name); err == nil {
			return true, nil
		}
	}
	return false, copyInto(root, h, f, owner)
}

// agentsAlone reports whether the cache's file at p is one only the agent
// may change: the agent's, with no write for its group or others (which,
// as the mask, bounds an ACL's entries too). A file adopted from a save
// keeps its saver's owner and mode: a hard link to it would let the saver
// write the cache's copy of an immutable generation, and set its times
// back. Only its owner can change its owner or mode: the answer holds.
func agentsAlone(p string) bool {
	fi, err := os.Lstat(p)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && st.Uid == uint32(os.Geteuid()) && fi.Mode().Perm()&0o022 == 0
}

// giveNew makes dir, which the agent just created, owner's: chowned where
// the agent may, else given by an ACL (GiveDir).
func giveNew(dir string, owner *Owner) error {
	if owner == nil {
		return nil
	}
	err := os.Lchown(dir, owner.UID, owner.GID)
	if errors.Is(err, unix.EPERM) {
		return GiveDir(dir, owner)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// mkdirsAs creates the parent directories of name in root, as owner's.
func mkdirsAs(root *os.Root, name string, owner *Owner) error {
	dir := filepath.Dir(filepath.FromSlash(name))
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, string(filepath.Separator))
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		err := root.Mkdir(p, 0o755)
		switch {
		case err == nil && owner != nil:
			if err := giveNew(filepath.Join(root.Name(), p), owner); err != nil {
				return err
			}
		case err != nil && !errors.Is(err, os.ErrExist):
			return fmt.Errorf("checkpoint: %w", err)
		}
	}
	return nil
}

// linkInto hard-links the cache's file at src as name in root.
func linkInto(root *os.Root, src, name string) error {
	d, err := os.Open(filepath.Dir(src))
	if err != nil {
		return err
	}
	defer d.Close()
	dir, base := filepath.Split(filepath.FromSlash(name))
	if dir == "" {
		dir = "."
	}
	pd, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer pd.Close()
	return linkat(d, filepath.Base(src), pd, base)
}

// copyInto copies the cache's copy h of f as f.Name in root, checking its
// CRC32C, and makes it owner's.
func copyInto(root *os.Root, h *tier.Handle, f File, owner *Owner) error {
	w, err := root.OpenFile(filepath.FromSlash(f.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	hash := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(w, hash), io.NewSectionReader(h, 0, f.Size))
	switch {
	case err != nil:
	case n != f.Size:
		err = fmt.Errorf("%w: %s: %d of %d bytes", object.ErrShortRead, f.Name, n, f.Size)
	case hash.Sum32() != f.CRC32C:
		err = fmt.Errorf("%w: %s", object.ErrChecksum, f.Name)
	case owner != nil:
		if err = w.Chown(owner.UID, owner.GID); errors.Is(err, unix.EPERM) {
			err = nil // no CAP_CHOWN: the agent's, readable, in a directory given to owner
		}
	}
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(filepath.FromSlash(f.Name))
		return fmt.Errorf("checkpoint: copy %s: %w", f.Name, err)
	}
	return nil
}
