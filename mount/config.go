package mount

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// DefaultListTTL is how long a bucket listing is used when Config.ListTTL
// is zero.
const DefaultListTTL = time.Minute

// Cache opens cached objects. *tier.Cache implements it.
type Cache interface {
	// Open returns a handle on the cached copy of o (o.Generation is always
	// set here), fetching it first on a miss. It honours ctx while it waits.
	Open(ctx context.Context, o object.Object, opts ...tier.OpenOption) (*tier.Handle, error)
}

// Lister lists objects by name prefix. object.Source (and so *fetch.GCS)
// implements it.
type Lister interface {
	// List yields the live objects of bucket whose names start with prefix.
	List(ctx context.Context, bucket, prefix string) iter.Seq2[object.Attrs, error]
}

// reclaimingCache is a Cache that asks for handles back when it is full
// (tier.Cache.OnNoSpace): the mount then closes its idle files, which it
// also keeps to a share of the cache's budget.
type reclaimingCache interface {
	OnNoSpace(fn func()) (remove func())
	// MaxBytes returns the cache's byte budget.
	MaxBytes() int64
}

var (
	_ Cache           = (*tier.Cache)(nil)
	_ reclaimingCache = (*tier.Cache)(nil)
	_ Lister          = (object.Source)(nil)
)

// Root is one part of GCS the mount shows: the objects of Bucket whose names
// start with Prefix (all of the bucket if Prefix is empty). Prefix is a plain
// name prefix, as in GCS: "train" also matches "training/x".
type Root struct {
	Bucket string
	Prefix string
}

// Config configures New and Mount, which never modify it.
type Config struct {
	// Cache serves and fills the files' bytes. Required.
	Cache Cache
	// Source lists the buckets. Required.
	Source Lister
	// Roots are the bucket prefixes to show, at <mountpoint>/<bucket>/; a
	// prefix inside another one of the same bucket adds nothing. With no
	// roots the mount is dynamic: any bucket whose name is looked up and
	// exists at the source is shown in full (see the package doc).
	Roots []Root
	// ListTTL is how long a bucket listing (and the kernel's cache of names
	// and attributes) is used before the bucket is listed again. 0 means
	// DefaultListTTL; negative means forever (list once per mount).
	ListTTL time.Duration
	// AllowOther lets users other than the mounting one use the mount
	// (mount option allow_other; without root, /etc/fuse.conf must have
	// user_allow_other).
	AllowOther bool
	// DisablePassthrough makes this process serve every read even where
	// the kernel could read the cached files itself (for comparison and
	// debugging).
	DisablePassthrough bool
	// Open says whether the kernel asks this process to open each file:
	// OpenAuto (the zero value) decides at the first open, from the
	// dataset; see OpenMode and "Opening files" in the package doc.
	Open OpenMode
	// Logger receives warnings (names left out, failed listings and opens);
	// nil discards them.
	Logger *slog.Logger
}

// settings is a validated Config with defaults applied.
type settings struct {
	cache       Cache
	src         Lister
	buckets     map[string][]string // bucket → sorted prefixes, none inside another
	dynamic     bool                // no roots: buckets are found by lookup
	ttl         time.Duration       // negative: forever
	allowOther  bool
	passthrough bool
	open        OpenMode
	log         *slog.Logger
}

// settings validates c and applies defaults.
func (c Config) settings() (settings, error) {
	switch {
	case c.Cache == nil:
		return settings{}, errors.New("mount: Config.Cache is nil")
	case c.Source == nil:
		return settings{}, errors.New("mount: Config.Source is nil")
	}
	s := settings{
		cache: c.Cache, src: c.Source, buckets: make(map[string][]string), dynamic: len(c.Roots) == 0,
		ttl: c.ListTTL, allowOther: c.AllowOther, passthrough: !c.DisablePassthrough && c.Open != OpenSkip,
		open: c.Open, log: c.Logger,
	}
	if c.Open > OpenSkip {
		return settings{}, fmt.Errorf("mount: Config.Open: unknown %v", c.Open)
	}
	for _, r := range c.Roots {
		if why := checkBucket(r.Bucket); why != "" {
			return settings{}, fmt.Errorf("mount: bucket %q: %s", r.Bucket, why)
		}
		s.buckets[r.Bucket] = append(s.buckets[r.Bucket], r.Prefix)
	}
	for b, ps := range s.buckets {
		s.buckets[b] = outermost(ps)
	}
	if s.ttl == 0 {
		s.ttl = DefaultListTTL
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s, nil
}

// checkBucket returns why bucket cannot be a directory name, or "".
func checkBucket(bucket string) string {
	switch {
	case bucket == "":
		return "empty"
	case bucket == "." || bucket == "..":
		return `"." and ".." cannot be directory names`
	case strings.ContainsAny(bucket, "/\x00"):
		return "contains '/' or NUL"
	case len(bucket) > maxSegment:
		return fmt.Sprintf("longer than %d bytes", maxSegment)
	}
	return ""
}

// checkDynamicBucket returns why name cannot be a bucket that a dynamic
// mount looks for at the source, or "": GCS's bucket naming rules (3–222
// bytes of lower-case letters, digits, '-', '_' and '.', starting and ending
// with a letter or digit, dot-separated parts of at most 63). Names the
// shell and desktop tools probe for (".Trash-0", "HEAD", "autorun.inf"…)
// and hostile ones ("..", NUL, '/') fail here, before any request.
func checkDynamicBucket(name string) string {
	if why := checkBucket(name); why != "" {
		return why
	}
	switch {
	case len(name) < 3 || len(name) > 222:
		return "not 3 to 222 bytes"
	case !isBucketAlnum(name[0]) || !isBucketAlnum(name[len(name)-1]):
		return "must start and end with a lower-case letter or digit"
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isBucketAlnum(c) && c != '-' && c != '_' && c != '.' {
			return "only lower-case letters, digits, '-', '_' and '.'"
		}
	}
	for part := range strings.SplitSeq(name, ".") {
		if len(part) > 63 {
			return "a dot-separated part is longer than 63 bytes"
		}
	}
	return ""
}

func isBucketAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

// outermost returns the sorted prefixes of ps that no other prefix in ps
// contains: listing those lists everything ps names, each object once.
func outermost(ps []string) []string {
	ps = slices.Clone(ps)
	slices.Sort(ps)
	ps = slices.Compact(ps)
	out := ps[:0]
	for _, p := range ps {
		// Sorted order puts a prefix right before the names it contains.
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}
