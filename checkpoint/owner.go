package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Owner is the user a save or restore is done for: the files saved must be
// theirs, and the files restored are made theirs. A nil *Owner checks
// nothing (an in-process caller, or root).
type Owner struct {
	UID, GID int
}

// owns reports whether o may take a file of uid.
func (o *Owner) owns(uid uint32) bool { return o == nil || o.UID == 0 || uint32(o.UID) == uid }

// checkOwner returns ErrPermission unless owner owns the file fi (at p).
func checkOwner(fi fs.FileInfo, owner *Owner, p string) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("checkpoint: %s: no owner information", p)
	}
	if !owner.owns(st.Uid) {
		return fmt.Errorf("%w: %s belongs to uid %d", ErrPermission, p, st.Uid)
	}
	return nil
}

// GiveDir lets owner use dir, a directory the agent made for them (a
// staging or restore directory): it grants them rwx by a POSIX ACL, with
// a default ACL that lets the agent read, rename and remove what they put
// in it and them what the agent puts in it. The agent keeps the
// directory, so it needs no capability: it runs as the hardened unit runs
// it, root without CAP_CHOWN or CAP_DAC_OVERRIDE. On a filesystem without
// ACLs the directory is chowned to owner instead (which needs CAP_CHOWN).
// A nil owner (root) needs nothing.
func GiveDir(dir string, owner *Owner) error {
	if owner == nil || owner.UID == 0 {
		return nil
	}
	err := setACL(dir, owner.UID)
	if errors.Is(err, unix.EOPNOTSUPP) {
		if cerr := os.Chown(dir, owner.UID, owner.GID); cerr != nil {
			return fmt.Errorf("checkpoint: give %s to uid %d: its filesystem has no ACLs, and chown: %w",
				dir, owner.UID, cerr)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: give %s to uid %d: %w", dir, owner.UID, err)
	}
	return nil
}

// POSIX ACL extended attributes in the kernel's format (posix_acl_xattr.h):
// a version, then (tag, permissions, id) entries sorted by tag, then id.
const (
	aclVersion  = 2
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclMask     = 0x10
	aclOther    = 0x20
	aclNoID     = 0xffffffff
)

// aclEntry is one entry of an ACL.
type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// encodeACL encodes entries, already in the kernel's order.
func encodeACL(entries []aclEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// userEntries returns named-user entries for uids, sorted, without
// duplicates.
func userEntries(perm uint16, uids ...uint32) []aclEntry {
	slices.Sort(uids)
	var out []aclEntry
	for _, u := range slices.Compact(uids) {
		out = append(out, aclEntry{aclUser, perm, u})
	}
	return out
}

// setACL gives uid rwx on dir (the access ACL), and, through the default
// ACL inherited by what is created in it, rwx to uid and to the agent's
// own user, read to others.
func setACL(dir string, uid int) error {
	access := []aclEntry{{aclUserObj, 7, aclNoID}, {aclUser, 7, uint32(uid)}, {aclGroupObj, 0, aclNoID},
		{aclMask, 7, aclNoID}, {aclOther, 0, aclNoID}}
	def := append([]aclEntry{{aclUserObj, 7, aclNoID}}, userEntries(7, uint32(uid), uint32(os.Geteuid()))...)
	def = append(def, aclEntry{aclGroupObj, 5, aclNoID}, aclEntry{aclMask, 7, aclNoID}, aclEntry{aclOther, 5, aclNoID})
	if err := unix.Lsetxattr(dir, "system.posix_acl_access", encodeACL(access), 0); err != nil {
		return err
	}
	return unix.Lsetxattr(dir, "system.posix_acl_default", encodeACL(def), 0)
}

// CheckGiven returns nil if owner may remove dir, a directory the agent
// gave (GiveDir, or a restore's): owner owns it or holds its ACL entry. A
// missing dir is os.ErrNotExist; a nil owner (root) may remove any.
func CheckGiven(dir string, owner *Owner) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("checkpoint: %s is not a directory", dir)
	}
	if checkOwner(fi, owner, dir) == nil || given(dir, owner) {
		return nil
	}
	return fmt.Errorf("%w: %s was not given to uid %d", ErrPermission, dir, owner.UID)
}

// given reports whether dir, the agent's, was given to owner by an ACL
// (GiveDir): an existing restore directory owner may use.
func given(dir string, owner *Owner) bool {
	b := make([]byte, 256)
	n, err := unix.Lgetxattr(dir, "system.posix_acl_access", b)
	if err != nil || n < 4 {
		return false
	}
	for e := b[4:n]; len(e) >= 8; e = e[8:] {
		tag, perm, id := binary.LittleEndian.Uint16(e), binary.LittleEndian.Uint16(e[2:]), binary.LittleEndian.Uint32(e[4:])
		if tag == aclUser && id == uint32(owner.UID) && perm&7 == 7 {
			return true
		}
	}
	return false
}

// sameOwner reports whether a and b have the same owner.
func sameOwner(a, b fs.FileInfo) bool {
	sa, ok1 := a.Sys().(*syscall.Stat_t)
	sb, ok2 := b.Sys().(*syscall.Stat_t)
	return ok1 && ok2 && sa.Uid == sb.Uid
}
