// Package webdataset indexes WebDataset tar shards in place. Index scans the
// tar headers of a shard, normally a read-only memory mapping of a cached
// object, once, and records where each file's data lies; it never reads or
// copies the data. The members are then grouped into samples as WebDataset
// groups them, and the index can be saved with MarshalBinary and restored
// with UnmarshalShard, so a restart does not rescan the shard.
//
// # Tar format
//
// Index reads POSIX ustar, pax and GNU tar archives, as Python's tarfile,
// GNU tar and Go's archive/tar write them. Each header's checksum is
// verified, accepting the unsigned and the signed sum as tar does; numeric
// fields are octal or, for GNU large files, base-256. Regular files
// (typeflag '0', NUL, or '7') are members. In POSIX ustar headers the
// prefix field is joined to the name with a slash. Pax extended headers
// ('x') may override the next member's path and size; GNU long-name
// entries ('L') override its name. Directories (including old-style
// entries whose name ends in a slash), links, devices and FIFOs have no
// data, whatever their size field says, and are skipped, as are global
// pax headers ('g'), GNU long link names ('K'), volume labels ('V') and,
// with their data, entries of unknown types. GNU sparse and multi-volume files are unsupported
// (ErrUnsupported). Two zero blocks end the archive; whatever follows them
// (record padding) is ignored. An archive without them is accepted if it
// ends on a block boundary after a complete member. Data and its padding
// must lie within the object: a member running past it is an error
// (ErrTruncated), never a short read.
//
// # Samples
//
// As in WebDataset, a member's key is its path up to the first dot of its
// base name and its field is the rest after that dot: a/b/x001.seg.png has
// key a/b/x001 and field seg.png. Consecutive members with the same key
// form a sample; like WebDataset, a key that reappears after another key
// starts a new sample (the shard then has two samples with that key). Two
// members of one sample with the same field are an error (ErrSample), as
// they are in WebDataset. Members whose base name has no dot or starts
// with one have no key and belong to no sample, and neither do metadata
// members, whose first path component starts and ends with "__" (such as
// __meta__ or __meta__/info.json), which WebDataset also skips; note that
// __meta__.json is not one: it is field json of sample __meta__. Unlike WebDataset's
// default, fields are not lower-cased: they are exactly as in the tar.
//
// # Errors
//
// Every error wraps one of the Err sentinels with the details (offsets,
// sizes, names). Test them with errors.Is.
//
// # Concurrency
//
// Index and UnmarshalShard are pure functions of their input and never
// modify it; a Shard is immutable and safe for concurrent use. A Shard
// holds no reference to the bytes it indexed.
package webdataset

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by this package, wrapped with details.
var (
	// ErrHeader means a tar header is malformed: a bad numeric field, an
	// empty name, a malformed pax record or GNU long name, or a zero
	// block not followed by another.
	ErrHeader = errors.New("webdataset: malformed tar header")
	// ErrChecksum means a tar header's checksum does not match its bytes.
	ErrChecksum = errors.New("webdataset: tar header checksum mismatch")
	// ErrTruncated means the object ends inside a header, or before the
	// data or padding of an entry does.
	ErrTruncated = errors.New("webdataset: truncated tar")
	// ErrUnsupported means the tar holds an entry this package cannot
	// index: a GNU sparse or multi-volume file.
	ErrUnsupported = errors.New("webdataset: unsupported tar entry")
	// ErrSample means two members of one sample have the same field.
	ErrSample = errors.New("webdataset: duplicate field in a sample")
	// ErrIndex means a saved index is malformed or does not fit the
	// object: bad magic or checksum, a different object size, members
	// out of order, overlapping or past the end of the object.
	ErrIndex = errors.New("webdataset: invalid saved index")
)

// Member is a regular file in the tar: its full path and where its data
// lies in the object.
type Member struct {
	// Name is the member's path, after pax, GNU long-name and ustar
	// prefix processing.
	Name string
	// Offset is the position of the first data byte in the object; a
	// multiple of 512.
	Offset int64
	// Size is the size of the data in bytes.
	Size int64
}

// Field is one member of a sample: the field name (the member's name after
// the key and its dot) and where its data lies in the object.
type Field struct {
	// Name is the field name, such as "jpg" or "seg.png".
	Name string
	// Offset is the position of the first data byte in the object.
	Offset int64
	// Size is the size of the data in bytes.
	Size int64
}

// Sample is a WebDataset sample: a key and its fields, in tar order.
type Sample struct {
	// Key is the common path of the sample's members, up to the first
	// dot of their base names.
	Key string
	// Fields are the sample's members in tar order, with distinct names.
	// The slice belongs to the Shard and must not be modified.
	Fields []Field
}

// Field returns the sample's field with the given name.
func (s Sample) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// Shard is the index of a WebDataset tar shard.
type Shard struct {
	size    int64
	members []Member
	samples []span
	fields  []Field  // the fields of every sample, back to back
	names   []string // distinct field names, first seen first
}

// span is a sample: its key and its fields, fields[lo:hi].
type span struct {
	key    string
	lo, hi int
}

// Index scans the tar shard b and returns its index. See the package
// documentation for what it accepts.
func Index(b []byte) (*Shard, error) {
	members, err := scan(b)
	if err != nil {
		return nil, err
	}
	return newShard(members, int64(len(b)))
}

// newShard groups members into samples.
func newShard(members []Member, size int64) (*Shard, error) {
	s := &Shard{size: size, members: members}
	seen := make(map[string]bool)
	for _, m := range members {
		key, field, ok := SplitName(m.Name)
		if !ok {
			continue
		}
		n := len(s.samples)
		if n == 0 || s.samples[n-1].key != key {
			s.samples = append(s.samples, span{key: key, lo: len(s.fields), hi: len(s.fields)})
			n++
		}
		cur := &s.samples[n-1]
		for _, f := range s.fields[cur.lo:cur.hi] {
			if f.Name == field {
				return nil, fmt.Errorf("%w: sample %q has two %q members, the second at byte %d",
					ErrSample, key, field, m.Offset)
			}
		}
		s.fields = append(s.fields, Field{Name: field, Offset: m.Offset, Size: m.Size})
		cur.hi++
		if !seen[field] {
			seen[field] = true
			s.names = append(s.names, field)
		}
	}
	return s, nil
}

// SplitName splits a member name into its WebDataset key and field, as
// described in the package documentation. It returns false for a name that
// belongs to no sample: no dot in its base name, a base name starting with
// a dot, or a metadata name.
func SplitName(name string) (key, field string, ok bool) {
	if strings.HasPrefix(name, "__") {
		first, _, _ := strings.Cut(name, "/")
		if len(first) >= 4 && strings.HasSuffix(first, "__") {
			return "", "", false
		}
	}
	base := strings.LastIndexByte(name, '/') + 1
	dot := strings.IndexByte(name[base:], '.')
	if dot <= 0 {
		return "", "", false
	}
	return name[:base+dot], name[base+dot+1:], true
}

// ObjectSize returns the size of the object the shard was indexed from.
func (s *Shard) ObjectSize() int64 { return s.size }

// Members returns every regular file of the tar in order, including those
// in no sample. The slice belongs to the Shard and must not be modified.
func (s *Shard) Members() []Member { return s.members }

// NumSamples returns the number of samples.
func (s *Shard) NumSamples() int { return len(s.samples) }

// Sample returns sample i. It panics if i is not in [0, NumSamples()), as
// a slice index would.
func (s *Shard) Sample(i int) Sample {
	sp := s.samples[i]
	return Sample{Key: sp.key, Fields: s.fields[sp.lo:sp.hi:sp.hi]}
}

// Fields returns the distinct field names of all samples, in the order
// they first appear. The slice belongs to the Shard and must not be
// modified.
func (s *Shard) Fields() []string { return s.names }
