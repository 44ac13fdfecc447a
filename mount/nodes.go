package mount

import (
	"context"
	"syscall"

	"github.com/cacheagent/cacheagent/object"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Modes and sizes reported to the kernel.
const (
	fileMode = 0o444
	dirMode  = 0o555
	// blockSize is st_blksize: the I/O size stdio and Python buffer by.
	blockSize = 128 << 10
)

// rootNode is the mount's root: one directory per configured bucket, or in
// a dynamic mount per bucket found so far.
type rootNode struct {
	fs.Inode
	readOnly
	f *FS
}

// dirNode is a directory: a bucket (path "") or a directory inside it.
type dirNode struct {
	fs.Inode
	readOnly
	f    *FS
	b    *bucketView
	path string
}

// fileNode is a file: one generation of an object.
type fileNode struct {
	fs.Inode
	readOnly
	f     *FS
	b     *bucketView
	attrs object.Attrs
	bk    *backing // the backing cache's, guarded by its mu
}

var (
	_ fs.NodeLookuper  = (*rootNode)(nil)
	_ fs.NodeReaddirer = (*rootNode)(nil)
	_ fs.NodeGetattrer = (*rootNode)(nil)
	_ fs.NodeLookuper  = (*dirNode)(nil)
	_ fs.NodeReaddirer = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
	_ fs.NodeFlusher   = (*fileNode)(nil)
)

// Lookup finds a bucket; in a dynamic mount, the first lookup of a name
// checks that the bucket exists at the source.
func (n *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	b, en := n.f.bucket(ctx, name)
	if en != 0 {
		return nil, en
	}
	return n.f.newDir(ctx, &n.Inode, b, "", out), 0
}

// Readdir lists the buckets: in a dynamic mount, those found so far.
func (n *rootNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	names := n.f.bucketNames()
	es := make([]fuse.DirEntry, len(names))
	for i, b := range names {
		es[i] = fuse.DirEntry{Name: b, Mode: syscall.S_IFDIR, Ino: dirIno(b, "")}
	}
	return fs.NewListDirStream(es), 0
}

// Getattr describes the root directory.
func (n *rootNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.f.dirAttr(&out.Attr, rootIno)
	return 0
}

// Lookup finds a name in the bucket's current listing.
func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	d, en := n.list(ctx)
	if en != 0 {
		return nil, en
	}
	e, ok := d.find(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if e.dir {
		return n.f.newDir(ctx, &n.Inode, n.b, joinPath(n.path, name), out), 0
	}
	node := &fileNode{f: n.f, b: n.b, attrs: e.attrs}
	ino := fileIno(n.b.name, e.attrs.Name, e.attrs.Generation)
	n.f.fileAttr(&out.Attr, ino, e.attrs)
	return n.NewInode(ctx, node, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0
}

// Readdir lists the directory from the bucket's current listing.
func (n *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	d, en := n.list(ctx)
	if en != 0 {
		return nil, en
	}
	es := make([]fuse.DirEntry, len(d))
	for i, e := range d {
		if e.dir {
			es[i] = fuse.DirEntry{Name: e.name, Mode: syscall.S_IFDIR, Ino: dirIno(n.b.name, joinPath(n.path, e.name))}
		} else {
			es[i] = fuse.DirEntry{Name: e.name, Mode: syscall.S_IFREG, Ino: fileIno(n.b.name, e.attrs.Name, e.attrs.Generation)}
		}
	}
	return fs.NewListDirStream(es), 0
}

// Getattr describes the directory.
func (n *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.f.dirAttr(&out.Attr, dirIno(n.b.name, n.path))
	return 0
}

// list returns the directory's entries in the current listing; ENOENT if
// the directory is no longer there.
func (n *dirNode) list(ctx context.Context) (dirList, syscall.Errno) {
	l, err := n.f.listing(ctx, n.b)
	if err != nil {
		return nil, errno(ctx, err)
	}
	d, ok := l.dirs[n.path]
	if !ok {
		return nil, syscall.ENOENT
	}
	return d, 0
}

// Getattr describes the file.
func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.f.fileAttr(&out.Attr, n.StableAttr().Ino, n.attrs)
	return 0
}

// Open opens the file for reading, fetching it into the cache first if
// needed. Opening for writing fails with EROFS.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	if n.f.skipOpen(n) {
		// The kernel remembers this for the whole mount: it opens files
		// itself from now on, and reads with no file handle.
		return nil, 0, syscall.ENOSYS
	}
	if hook := n.f.openStart; hook != nil {
		hook(n.attrs.Object)
	}
	h, en := n.f.open(ctx, n)
	if hook := n.f.openDone; hook != nil {
		hook(n.attrs.Object, en)
	}
	if en != 0 {
		return nil, 0, en
	}
	// The bytes never change: keep the kernel's cached pages across opens.
	// Nothing is written: close(2) need not ask us to flush.
	return h, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

// Read reads from the open file fh or, in a mount that skips opens (the kernel
// opened the file without asking: fh is nil), from the cached copy opened
// for this read.
func (n *fileNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r, ok := fh.(fs.FileReader); ok {
		return r.Read(ctx, dest, off)
	}
	return n.f.readUnopened(ctx, n.b, n.attrs, dest, off)
}

// Flush answers ENOSYS, which the kernel remembers for the whole mount: it
// stops sending the flush that close(2) would otherwise wait for. (Opens
// answered by this process already ask for none, with FOPEN_NOFLUSH; the
// files the kernel opens itself in a mount that skips opens cannot.)
func (n *fileNode) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno {
	return syscall.ENOSYS
}

// newDir returns the inode of directory path of bucket b, a child of parent.
func (f *FS) newDir(ctx context.Context, parent *fs.Inode, b *bucketView, path string, out *fuse.EntryOut) *fs.Inode {
	ino := dirIno(b.name, path)
	f.dirAttr(&out.Attr, ino)
	return parent.NewInode(ctx, &dirNode{f: f, b: b, path: path}, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino})
}

// dirAttr fills in a directory's attributes.
func (f *FS) dirAttr(out *fuse.Attr, ino uint64) {
	out.Ino = ino
	out.Mode = syscall.S_IFDIR | dirMode
	out.Nlink = 2
	out.Size = 4096
	out.Blocks = 8
	out.Blksize = blockSize
	out.Uid, out.Gid = f.uid, f.gid
	t := f.started
	out.SetTimes(&t, &t, &t)
}

// fileAttr fills in the attributes of the file holding generation a.
func (f *FS) fileAttr(out *fuse.Attr, ino uint64, a object.Attrs) {
	out.Ino = ino
	out.Mode = syscall.S_IFREG | fileMode
	out.Nlink = 1
	out.Size = uint64(a.Size)
	out.Blocks = (uint64(a.Size) + 511) / 512
	out.Blksize = blockSize
	out.Uid, out.Gid = f.uid, f.gid
	t := a.Updated
	if t.IsZero() { // unknown
		t = f.started
	}
	out.SetTimes(&t, &t, &t)
}
