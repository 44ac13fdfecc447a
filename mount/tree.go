package mount

import (
	"slices"
	"strings"

	"github.com/cacheagent/cacheagent/object"
)

// maxSegment is the longest file name Linux accepts (NAME_MAX).
const maxSegment = 255

// Reasons an object is left out of a listing.
const (
	whyEmpty   = "empty path segment"
	whyDot     = `"." or ".." path segment`
	whyNUL     = "contains NUL"
	whyLong    = "path segment longer than 255 bytes"
	whyClashes = "a directory has the same path"
)

// checkName reports why an object name cannot be a relative path ("" if it
// can) and whether it names a directory (it ends in '/').
func checkName(name string) (dir bool, why string) {
	if strings.IndexByte(name, 0) >= 0 {
		return false, whyNUL
	}
	p, dir := strings.CutSuffix(name, "/")
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "":
			return dir, whyEmpty
		case seg == "." || seg == "..":
			return dir, whyDot
		case len(seg) > maxSegment:
			return dir, whyLong
		}
	}
	return dir, ""
}

// entry is one name in a listed directory: a subdirectory or a file (one
// object generation).
type entry struct {
	name  string // one path segment
	dir   bool
	attrs object.Attrs // files only
}

// dirList is a listed directory's entries, sorted by name.
type dirList []entry

// find returns the entry called name.
func (d dirList) find(name string) (entry, bool) {
	i, ok := slices.BinarySearchFunc(d, name, func(e entry, n string) int { return strings.Compare(e.name, n) })
	if !ok {
		return entry{}, false
	}
	return d[i], true
}

// listing is one bucket's tree as listed at one time: every directory by its
// path inside the bucket ("" is the bucket's root, "a/b" a subdirectory).
// It is immutable once built.
type listing struct {
	dirs    map[string]dirList
	objects int // files in the tree
	// bytes is the files' total size; smallBytes that of those no larger
	// than SmallFileSize (OpenAuto's rule).
	bytes, smallBytes int64
}

// builder assembles a listing from flat, '/'-delimited object names, in any
// order.
type builder struct {
	dirs    map[string]map[string]entry
	objects int
	// reject is called for each object left out, with the reason.
	reject func(name, why string)
}

func newBuilder(reject func(name, why string)) *builder {
	return &builder{dirs: map[string]map[string]entry{"": {}}, reject: reject}
}

// add puts object a into the tree, or rejects it.
func (b *builder) add(a object.Attrs) {
	dir, why := checkName(a.Name)
	if why != "" {
		b.reject(a.Name, why)
		return
	}
	if dir {
		b.mkdirAll(strings.TrimSuffix(a.Name, "/"))
		return
	}
	parent, base := "", a.Name
	if i := strings.LastIndexByte(a.Name, '/'); i >= 0 {
		parent, base = a.Name[:i], a.Name[i+1:]
		b.mkdirAll(parent)
	}
	siblings := b.dirs[parent]
	if old, ok := siblings[base]; ok {
		if old.dir {
			b.reject(a.Name, whyClashes)
		}
		return // else listed twice: keep the first
	}
	siblings[base] = entry{name: base, attrs: a}
	b.objects++
}

// mkdirAll creates directory p and its parents. A file in the way is
// replaced and rejected.
func (b *builder) mkdirAll(p string) {
	if _, ok := b.dirs[p]; ok || p == "" {
		return
	}
	parent, base := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parent, base = p[:i], p[i+1:]
		b.mkdirAll(parent)
	}
	siblings := b.dirs[parent]
	if old, ok := siblings[base]; ok && !old.dir {
		b.reject(old.attrs.Name, whyClashes)
		b.objects--
	}
	siblings[base] = entry{name: base, dir: true}
	b.dirs[p] = make(map[string]entry)
}

// build returns the listing. The builder must not be used afterwards.
func (b *builder) build() *listing {
	l := &listing{dirs: make(map[string]dirList, len(b.dirs)), objects: b.objects}
	for p, m := range b.dirs {
		d := make(dirList, 0, len(m))
		for _, e := range m {
			d = append(d, e)
			if !e.dir {
				l.bytes += e.attrs.Size
				if e.attrs.Size <= SmallFileSize {
					l.smallBytes += e.attrs.Size
				}
			}
		}
		slices.SortFunc(d, func(x, y entry) int { return strings.Compare(x.name, y.name) })
		l.dirs[p] = d
	}
	return l
}

// joinPath returns the path of child name in directory dir.
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}
