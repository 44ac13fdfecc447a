package loader

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sync/errgroup"
)

// DefaultArrayName names the one array of a pattern without braces.
const DefaultArrayName = "data"

// FromPattern builds a dataset from the objects of bucket under prefix
// whose names, after the prefix, match pattern. The pattern holds one "*",
// which matches any run of characters other than "/" and names the shard,
// and at most one brace list, such as "{x,y}", whose alternatives name the
// arrays: "shard-*.{x,y}.npy" makes one group per shard from
// shard-0001.x.npy and shard-0001.y.npy, and "{x,y}/part-*.npy" one group
// per part from x/part-0001.npy and y/part-0001.npy. Without braces the single array is
// named DefaultArrayName. Shards are ordered by their "*" match, comparing
// runs of digits by value (shard-2 before shard-10).
//
// FromPattern lists the source and reads every object's .npy header (small
// ranged reads, in parallel) to learn row counts and specs, pinning each
// object's listed generation. A shard missing one of the arrays, arrays of
// a shard with different leading dimensions, and arrays that differ in
// element type or row shape between shards are errors wrapping ErrDataset;
// a malformed pattern or one matching nothing wraps ErrPattern.
func FromPattern(ctx context.Context, src object.Source, bucket, prefix, pattern string) (Dataset, error) {
	d, listed, err := ListShards(ctx, src, Location{Bucket: bucket, Prefix: prefix, Pattern: pattern})
	if err != nil {
		return Dataset{}, err
	}
	idx := make([]int, len(d.Groups))
	for i := range idx {
		idx[i] = i
	}
	hs, err := readHeaders(ctx, src, d, idx, listed)
	if err != nil {
		return Dataset{}, err
	}
	return d, d.apply(idx, hs)
}

// ListShards lists the objects of loc and groups them into shards, as
// FromPattern does, without reading them: a dataset of Names and Groups
// (no rows, no specs, no format), and the listed attributes of its objects.
// Formats build their datasets from it.
func ListShards(ctx context.Context, src object.Source, loc Location) (Dataset, map[object.Object]object.Attrs, error) {
	bucket, prefix, pattern := loc.Bucket, loc.Prefix, loc.Pattern
	re, names, err := compilePattern(pattern)
	if err != nil {
		return Dataset{}, nil, err
	}
	shards := make(map[string][]object.Attrs)
	listed := make(map[object.Object]object.Attrs)
	for a, err := range src.List(ctx, bucket, prefix) {
		if err != nil {
			return Dataset{}, nil, fmt.Errorf("loader: list gs://%s/%s: %w", bucket, prefix, err)
		}
		m := re.FindStringSubmatch(strings.TrimPrefix(a.Name, prefix))
		if m == nil {
			continue
		}
		key, j := m[re.SubexpIndex("shard")], 0
		if k := re.SubexpIndex("array"); k >= 0 {
			j = slices.Index(names, m[k])
		}
		if shards[key] == nil {
			shards[key] = make([]object.Attrs, len(names))
		}
		shards[key][j] = a
		listed[a.Object] = a
	}
	if len(shards) == 0 {
		return Dataset{}, nil, fmt.Errorf("%w: nothing under gs://%s/%s matches %q", ErrPattern, bucket, prefix, pattern)
	}
	keys := make([]string, 0, len(shards))
	for k := range shards {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, naturalCompare)
	d := Dataset{Names: names, Groups: make([]Group, len(keys))}
	for i, k := range keys {
		objs := make([]object.Object, len(names))
		for j, a := range shards[k] {
			if a.Name == "" {
				return Dataset{}, nil, fmt.Errorf("%w: shard %q has no array %s (no object matching %q)",
					ErrDataset, k, names[j], expand(pattern, k, names[j]))
			}
			objs[j] = a.Object
		}
		d.Groups[i] = Group{Objects: objs}
	}
	return d, listed, nil
}

// ListFiles is ListShards for formats whose shard is one object (the
// pattern names no arrays): the dataset, and each shard's listed
// attributes, in shard order. kind says what a shard is, for the error
// when the pattern names several objects ("a WebDataset shard is one tar").
func ListFiles(ctx context.Context, src object.Source, loc Location, kind string) (Dataset, []object.Attrs, error) {
	d, listed, err := ListShards(ctx, src, loc)
	if err != nil {
		return Dataset{}, nil, err
	}
	if len(d.Names) != 1 {
		return Dataset{}, nil, fmt.Errorf("%w: %s; the pattern names %v", ErrDataset, kind, d.Names)
	}
	attrs := make([]object.Attrs, len(d.Groups))
	for i, g := range d.Groups {
		attrs[i] = listed[g.Objects[0]]
	}
	return d, attrs, nil
}

// EachShard runs f for shards 0 to n-1, HeaderParallelism at a time, and
// returns the first error (which cancels the ctx the others run with):
// how formats read their shards' headers.
func EachShard(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(HeaderParallelism)
	for i := range n {
		g.Go(func() error { return f(gctx, i) })
	}
	return g.Wait()
}

// compilePattern turns a pattern into a regexp whose group "shard" is the
// "*" match and whose group "array", if any, is the array name, and returns
// the array names.
func compilePattern(p string) (*regexp.Regexp, []string, error) {
	if strings.Count(p, "*") != 1 {
		return nil, nil, fmt.Errorf("%w: %q must hold exactly one *", ErrPattern, p)
	}
	open, end := strings.IndexByte(p, '{'), strings.IndexByte(p, '}')
	if (open < 0) != (end < 0) || end < open || strings.Count(p, "{") > 1 || strings.Count(p, "}") > 1 {
		return nil, nil, fmt.Errorf("%w: %q: at most one {a,b,…} list", ErrPattern, p)
	}
	names := []string{DefaultArrayName}
	var expr strings.Builder
	expr.WriteString("^")
	lit := func(s string) {
		before, after, _ := strings.Cut(s, "*")
		expr.WriteString(regexp.QuoteMeta(before))
		if strings.Contains(s, "*") {
			expr.WriteString("(?P<shard>[^/]*)")
			expr.WriteString(regexp.QuoteMeta(after))
		}
	}
	if open < 0 {
		lit(p)
	} else {
		names = strings.Split(p[open+1:end], ",")
		quoted := make([]string, len(names))
		for i, n := range names {
			if n == "" || strings.ContainsAny(n, "/*") || slices.Contains(names[:i], n) {
				return nil, nil, fmt.Errorf("%w: %q: array name %q is empty, repeated or holds / or *", ErrPattern, p, n)
			}
			quoted[i] = regexp.QuoteMeta(n)
		}
		if strings.Contains(p[open:end], "*") {
			return nil, nil, fmt.Errorf("%w: %q: * inside the braces", ErrPattern, p)
		}
		lit(p[:open])
		expr.WriteString("(?P<array>" + strings.Join(quoted, "|") + ")")
		lit(p[end+1:])
	}
	expr.WriteString("$")
	re, err := regexp.Compile(expr.String())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %q: %w", ErrPattern, p, err)
	}
	return re, names, nil
}

// expand returns pattern with its * replaced by shard and its brace list
// by name, for error messages.
func expand(pattern, shard, name string) string {
	s := strings.Replace(pattern, "*", shard, 1)
	if open, end := strings.IndexByte(s, '{'), strings.IndexByte(s, '}'); open >= 0 && end > open {
		s = s[:open] + name + s[end+1:]
	}
	return s
}

// naturalCompare orders strings with runs of ASCII digits compared by
// value: "a2" < "a10". Equal values with different zero padding order by
// length, so the order is total.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := len(na) - len(nb); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			if c := da - db; c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

// digits returns the length of the run of ASCII digits s starts with.
func digits(s string) int {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}
