package mount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// maxStale bounds how many stacked stale mounts prepareMountpoint clears.
const maxStale = 8

// errHelper marks a failure reported by fusermount3, which gives no errno.
var errHelper = errors.New("mount: fusermount failed")

// prepareMountpoint returns mountpoint as an absolute path ready to mount
// on: stale mounts (whose server died: statfs or stat fails with ENOTCONN)
// are lazily unmounted, a missing directory is created, and a live FUSE mount there is
// refused.
func prepareMountpoint(ctx context.Context, mountpoint string, log *slog.Logger) (string, error) {
	mp, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", fmt.Errorf("mount: mountpoint %q: %w", mountpoint, err)
	}
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("mount: prepare %s: %w", mp, err)
		}
		if i == maxStale {
			return "", fmt.Errorf("mount: mountpoint %s: still unusable after %d attempts", mp, i)
		}
		// statfs always reaches a FUSE server (stat may be answered from
		// the kernel's attribute cache), so it tells a dead mount.
		var sfs unix.Statfs_t
		err := unix.Statfs(mp, &sfs)
		var st unix.Stat_t
		if err == nil {
			err = unix.Stat(mp, &st)
		}
		switch {
		case errors.Is(err, unix.ENOTCONN), errors.Is(err, unix.ECONNABORTED):
			log.Warn("mount: clearing a stale mount left by a server that died", "mountpoint", mp)
			if err := unmount(ctx, mp, true); err != nil && !errors.Is(err, unix.EINVAL) {
				return "", fmt.Errorf("mount: clear stale mount at %s: %w", mp, err)
			}
			continue
		case errors.Is(err, unix.ENOENT):
			if err := os.MkdirAll(mp, 0o755); err != nil {
				return "", fmt.Errorf("mount: create mountpoint: %w", err)
			}
			continue
		case err != nil:
			return "", fmt.Errorf("mount: mountpoint %s: %w", mp, err)
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return "", fmt.Errorf("mount: mountpoint %s is not a directory", mp)
		}
		return mp, checkNotMounted(mp)
	}
}

// checkNotMounted fails if a FUSE filesystem is mounted at mp: mounting on
// top would hide it.
func checkNotMounted(mp string) error {
	real, err := filepath.EvalSymlinks(mp)
	if err != nil {
		return fmt.Errorf("mount: mountpoint %s: %w", mp, err)
	}
	ms, err := mounts()
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.point == real && strings.HasPrefix(m.fstype, "fuse") {
			return fmt.Errorf("mount: %s is already mounted (%s); unmount it first", mp, m.fstype)
		}
	}
	return nil
}

// unmount unmounts mp, lazily (MNT_DETACH) if lazy is set. Without the
// privilege to do so itself it asks fusermount3, the setuid helper, which
// may unmount what this user mounted. A path that is not mounted gives
// EINVAL.
func unmount(ctx context.Context, mp string, lazy bool) error {
	flags := 0
	if lazy {
		flags = unix.MNT_DETACH
	}
	err := unix.Unmount(mp, flags)
	if !errors.Is(err, unix.EPERM) {
		return err
	}
	bin, lerr := exec.LookPath("fusermount3")
	if lerr != nil {
		return errors.Join(err, lerr)
	}
	args := []string{"-u", "-q"}
	if lazy {
		args = append(args, "-z")
	}
	out, cerr := exec.CommandContext(ctx, bin, append(args, mp)...).CombinedOutput()
	if cerr != nil {
		return fmt.Errorf("%w: %s %s: %w: %s", errHelper, bin, strings.Join(args, " "), cerr, bytes.TrimSpace(out))
	}
	return nil
}

// mountInfo is one mount of /proc/self/mountinfo.
type mountInfo struct {
	point   string // mount point, unescaped
	options string // per-mount options, e.g. "ro,nosuid,nodev,relatime"
	fstype  string // e.g. "fuse.cacheagent"
}

// mounts returns the mounts of this process's mount namespace.
func mounts() ([]mountInfo, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mount: read mount table: %w", err)
	}
	return parseMountinfo(string(b)), nil
}

// parseMountinfo parses the format of proc(5) /proc/pid/mountinfo,
// skipping lines it cannot read.
func parseMountinfo(s string) []mountInfo {
	var out []mountInfo
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		sep := slices.Index(f[6:], "-") + 6 // optional fields end at "-"
		if sep < 6 || sep+1 >= len(f) {
			continue
		}
		out = append(out, mountInfo{point: unescapeOctal(f[4]), options: f[5], fstype: f[sep+1]})
	}
	return out
}

// unescapeOctal undoes the kernel's \ooo escapes of space, tab, newline and
// backslash in mount table fields.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
