package mount

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

func TestCheckName(t *testing.T) {
	long := strings.Repeat("x", maxSegment)
	for _, tc := range []struct {
		name    string
		wantDir bool
		wantWhy string
	}{
		{"a", false, ""},
		{"a/b/c.npy", false, ""},
		{"with space/ü/..x/.hidden/x..", false, ""},
		{long + "/" + long, false, ""},
		{"dir/", true, ""},
		{"a/b/", true, ""},
		{"", false, whyEmpty},
		{"/", true, whyEmpty},
		{"/leading", false, whyEmpty},
		{"a//b", false, whyEmpty},
		{"a//", true, whyEmpty},
		{".", false, whyDot},
		{"..", false, whyDot},
		{"./a", false, whyDot},
		{"a/../b", false, whyDot},
		{"a/./", true, whyDot},
		{"a\x00b", false, whyNUL},
		{"a/" + long + "x", false, whyLong},
	} {
		dir, why := checkName(tc.name)
		if dir != tc.wantDir || why != tc.wantWhy {
			t.Errorf("checkName(%q) = %v, %q; want %v, %q", tc.name, dir, why, tc.wantDir, tc.wantWhy)
		}
	}
}

func TestBuilder(t *testing.T) {
	var rejected []string
	b := newBuilder(func(name, why string) { rejected = append(rejected, name+": "+why) })
	for _, name := range []string{
		"b.txt", "a/x", "a/y/z", "marker/", "marker/inner/", "clash", "clash/inside",
		"inside/clash/deeper", "inside/clash", "dup", "dup", "../up", "a//b",
	} {
		b.add(object.Attrs{Object: object.Object{Bucket: "bk", Name: name, Generation: 1}})
	}
	l := b.build()
	want := map[string][]string{
		"":             {"a/", "b.txt", "clash/", "dup", "inside/", "marker/"},
		"a":            {"x", "y/"},
		"a/y":          {"z"},
		"marker":       {"inner/"},
		"marker/inner": {},
		"clash":        {"inside"},
		"inside":       {"clash/"},
		"inside/clash": {"deeper"},
	}
	if len(l.dirs) != len(want) {
		t.Errorf("directories %v; want %d", keys(l.dirs), len(want))
	}
	for p, names := range want {
		var got []string
		for _, e := range l.dirs[p] {
			if e.dir {
				got = append(got, e.name+"/")
			} else {
				got = append(got, e.name)
			}
		}
		if !slices.Equal(got, names) && !(len(got) == 0 && len(names) == 0) {
			t.Errorf("directory %q = %q; want %q", p, got, names)
		}
	}
	if l.objects != 6 {
		t.Errorf("objects = %d; want 6", l.objects)
	}
	wantRejected := []string{"clash: " + whyClashes, "inside/clash: " + whyClashes, "../up: " + whyDot, "a//b: " + whyEmpty}
	if !slices.Equal(rejected, wantRejected) {
		t.Errorf("rejected %q; want %q", rejected, wantRejected)
	}
	if e, ok := l.dirs["a/y"].find("z"); !ok || e.attrs.Name != "a/y/z" {
		t.Errorf("find(z) = %+v, %v", e, ok)
	}
	if _, ok := l.dirs["a"].find("nope"); ok {
		t.Error("find(nope) found something")
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func TestOutermost(t *testing.T) {
	for _, tc := range []struct{ in, want []string }{
		{[]string{"a/"}, []string{"a/"}},
		{[]string{"b/", "a/", "a/"}, []string{"a/", "b/"}},
		{[]string{"a/b/", "a/", "ab"}, []string{"a/", "ab"}},
		{[]string{"a", "a/", "ab", "b"}, []string{"a", "b"}},
		{[]string{"x", ""}, []string{""}},
	} {
		if got := outermost(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("outermost(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestInodeNumbers(t *testing.T) {
	seen := map[uint64]string{}
	add := func(what string, ino uint64) {
		t.Helper()
		if ino <= rootIno || ino >= 1<<63 {
			t.Errorf("%s: inode %d out of range", what, ino)
		}
		if prev, ok := seen[ino]; ok {
			t.Errorf("%s and %s share inode %d", what, prev, ino)
		}
		seen[ino] = what
	}
	for _, b := range []string{"b1", "b2"} {
		add("dir "+b, dirIno(b, ""))
		for i := range 100 {
			name := fmt.Sprintf("d/%d", i)
			add("dir "+b+"/"+name, dirIno(b, name))
			for gen := range int64(3) {
				add(fmt.Sprintf("file %s/%s#%d", b, name, gen+1), fileIno(b, name, gen+1))
			}
		}
	}
	// Pinned values: inode numbers must not change between releases.
	if got, want := fileIno("bucket", "train/shard-0001.npy", 1700000000000000), uint64(0x7c2a6a07bdcb1cc1); got != want {
		t.Errorf("fileIno = %#x; want %#x", got, want)
	}
	if got, want := dirIno("bucket", "train"), uint64(0x60827aa51fb7e3f9); got != want {
		t.Errorf("dirIno = %#x; want %#x", got, want)
	}
}

func TestParseMountinfo(t *testing.T) {
	const in = `22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
90 27 0:50 / /tmp/a\040b/mnt ro,nosuid,nodev,relatime shared:7 master:2 - fuse.cacheagent cacheagent ro,user_id=0
garbage line
`
	got := parseMountinfo(in)
	want := []mountInfo{
		{point: "/proc", options: "rw,relatime", fstype: "proc"},
		{point: "/", options: "rw,relatime", fstype: "ext4"},
		{point: "/tmp/a b/mnt", options: "ro,nosuid,nodev,relatime", fstype: "fuse.cacheagent"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseMountinfo = %+v; want %+v", got, want)
	}
	for in, want := range map[string]string{`a\134b`: `a\b`, `tab\011`: "tab\t", `\04`: `\04`, `\999`: `\999`} {
		if got := unescapeOctal(in); got != want {
			t.Errorf("unescapeOctal(%q) = %q; want %q", in, got, want)
		}
	}
}

func TestErrno(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(live)
	cancel()
	for _, tc := range []struct {
		ctx  context.Context
		err  error
		want syscall.Errno
	}{
		{live, nil, 0},
		{done, errors.New("whatever"), syscall.EINTR},
		{live, fmt.Errorf("tier: open: %w", object.ErrNotFound), syscall.ENOENT},
		{live, fmt.Errorf("read: %w: %w", object.ErrGenerationChanged, object.ErrNotFound), syscall.ENOENT},
		{live, fmt.Errorf("read: %w", object.ErrGenerationChanged), syscall.ESTALE},
		{live, fmt.Errorf("tier: fill: %w", tier.ErrNoSpace), syscall.ENOSPC},
		{live, fmt.Errorf("write: %w", syscall.ENOSPC), syscall.ENOSPC},
		{live, fmt.Errorf("read: %w", syscall.ECONNRESET), syscall.EIO},
		{live, object.ErrChecksum, syscall.EIO},
	} {
		if got := errno(tc.ctx, tc.err); got != tc.want {
			t.Errorf("errno(%v) = %v; want %v", tc.err, got, tc.want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	good := Config{Cache: fakeCache{}, Source: fakeLister{}, Roots: []Root{{Bucket: "b"}}}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"no cache", func(c *Config) { c.Cache = nil }},
		{"no source", func(c *Config) { c.Source = nil }},
		{"empty bucket", func(c *Config) { c.Roots = []Root{{}} }},
		{"dot bucket", func(c *Config) { c.Roots = []Root{{Bucket: ".."}} }},
		{"slash bucket", func(c *Config) { c.Roots = []Root{{Bucket: "a/b"}} }},
	} {
		cfg := good
		tc.edit(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		}
	}
	f, err := New(good)
	if err != nil {
		t.Fatal(err)
	}
	if f.cfg.ttl != DefaultListTTL {
		t.Errorf("ttl = %v; want %v", f.cfg.ttl, DefaultListTTL)
	}
	if f.cfg.dynamic {
		t.Error("a mount with roots is dynamic")
	}
	good.Roots = nil
	if f, err := New(good); err != nil || !f.cfg.dynamic {
		t.Errorf("New with no roots: %v; want a dynamic mount", err)
	}
	good.Open = OpenSkip
	if f, err := New(good); err != nil || f.cfg.passthrough {
		t.Errorf("New with OpenSkip: %v; want passthrough off", err)
	}
	good.Open = OpenSkip + 1
	if _, err := New(good); err == nil {
		t.Error("New with an unknown OpenMode: no error")
	}
}

func TestCheckDynamicBucket(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"data", true},
		{"my-bucket_1.example.com", true},
		{"a1b", true},
		{strings.Repeat("a", 63), true},
		{strings.Repeat("a", 63) + "." + strings.Repeat("b", 63), true},
		{"", false},
		{".", false},
		{"..", false},
		{"ab", false},
		{strings.Repeat("a", 64), false},
		{strings.Repeat("a", 256), false},
		{"a/b", false},
		{"a\x00bc", false},
		{".Trash-0", false},
		{"HEAD", false},
		{"Data", false},
		{"-abc", false},
		{"abc-", false},
		{"a b c", false},
		{"ü-bucket", false},
	} {
		if why := checkDynamicBucket(tc.name); (why == "") != tc.ok {
			t.Errorf("checkDynamicBucket(%q) = %q; want ok %v", tc.name, why, tc.ok)
		}
	}
}

// fakeCache and fakeLister stand in where nothing is opened or listed.
// fakeCache's opens fail with err, or object.ErrNotFound if it is nil.
type fakeCache struct{ err error }

func (c fakeCache) Open(context.Context, object.Object, ...tier.OpenOption) (*tier.Handle, error) {
	if c.err != nil {
		return nil, c.err
	}
	return nil, object.ErrNotFound
}

type fakeLister struct{}

func (fakeLister) List(context.Context, string, string) iter.Seq2[object.Attrs, error] {
	return func(func(object.Attrs, error) bool) {}
}
