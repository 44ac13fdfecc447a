package mount

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// readOnly answers every operation that would change the filesystem with
// EROFS, and statfs with what a read-only filesystem without free space
// reports. Every node embeds it: the mount is read-only anyway, but go-fuse's
// defaults for some of these (Unlink, Rmdir) report success.
type readOnly struct{}

// Statfs reports no blocks and no free space, but the maximum name length
// (pathconf's NAME_MAX comes from it).
func (readOnly) Statfs(_ context.Context, out *fuse.StatfsOut) syscall.Errno {
	*out = fuse.StatfsOut{Bsize: 4096, Frsize: 4096, NameLen: maxSegment}
	return 0
}

var (
	_ fs.NodeSetattrer      = readOnly{}
	_ fs.NodeSetxattrer     = readOnly{}
	_ fs.NodeRemovexattrer  = readOnly{}
	_ fs.NodeCreater        = readOnly{}
	_ fs.NodeTmpfiler       = readOnly{}
	_ fs.NodeMkdirer        = readOnly{}
	_ fs.NodeMknoder        = readOnly{}
	_ fs.NodeLinker         = readOnly{}
	_ fs.NodeSymlinker      = readOnly{}
	_ fs.NodeUnlinker       = readOnly{}
	_ fs.NodeRmdirer        = readOnly{}
	_ fs.NodeRenamer        = readOnly{}
	_ fs.NodeWriter         = readOnly{}
	_ fs.NodeAllocater      = readOnly{}
	_ fs.NodeCopyFileRanger = readOnly{}

	// The methods must reach the node types (no ambiguous selectors).
	_ fs.NodeUnlinker  = (*rootNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeWriter    = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
)

// Setattr refuses chmod, chown, truncate and utimes.
func (readOnly) Setattr(context.Context, fs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// Setxattr refuses to set extended attributes.
func (readOnly) Setxattr(context.Context, string, []byte, uint32) syscall.Errno { return syscall.EROFS }

// Removexattr refuses to remove extended attributes.
func (readOnly) Removexattr(context.Context, string) syscall.Errno { return syscall.EROFS }

// Create refuses to create files.
func (readOnly) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

// Tmpfile refuses O_TMPFILE.
func (readOnly) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

// Mkdir refuses to create directories.
func (readOnly) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Mknod refuses to create device nodes, fifos and sockets.
func (readOnly) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Link refuses hard links.
func (readOnly) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Symlink refuses symbolic links.
func (readOnly) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Unlink refuses to remove files.
func (readOnly) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }

// Rmdir refuses to remove directories.
func (readOnly) Rmdir(context.Context, string) syscall.Errno { return syscall.EROFS }

// Rename refuses renames.
func (readOnly) Rename(context.Context, string, fs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}

// Write refuses writes.
func (readOnly) Write(context.Context, fs.FileHandle, []byte, int64) (uint32, syscall.Errno) {
	return 0, syscall.EROFS
}

// Allocate refuses fallocate.
func (readOnly) Allocate(context.Context, fs.FileHandle, uint64, uint64, uint32) syscall.Errno {
	return syscall.EROFS
}

// CopyFileRange refuses copies into the filesystem.
func (readOnly) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.EROFS
}
