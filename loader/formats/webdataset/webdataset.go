package loader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"unsafe"

	"golang.org/x/sync/errgroup"

	"github.com/cacheagent/cacheagent/mmapstore/webdataset"
	"github.com/cacheagent/cacheagent/object"
)

// IndexCache keeps WebDataset member indexes (webdataset.Shard's
// MarshalBinary) across runs, keyed by object generation. Implementations
// must be safe for concurrent use.
type IndexCache interface {
	// Load returns the saved index of o (a pinned generation), if any.
	Load(o object.Object) ([]byte, bool)
	// Store saves the index of o.
	Store(o object.Object, b []byte) error
}

// DirIndex returns an IndexCache of files in dir (created on the first
// Store), one per (bucket, name, generation): the name is the SHA-256 of
// the three, so a new generation never finds an old index.
func DirIndex(dir string) IndexCache { return dirIndex(dir) }

// dirIndex is DirIndex's IndexCache.
type dirIndex string

// path returns the file of o's index.
func (d dirIndex) path(o object.Object) string {
	h := sha256.Sum256([]byte(o.Bucket + "\x00" + o.Name + "\x00" + strconv.FormatInt(o.Generation, 10)))
	return filepath.Join(string(d), hex.EncodeToString(h[:16])+".wdsidx")
}

// Load implements IndexCache.
func (d dirIndex) Load(o object.Object) ([]byte, bool) {
	b, err := os.ReadFile(d.path(o))
	return b, err == nil
}

// Store implements IndexCache: it writes a temporary file and renames it.
func (d dirIndex) Store(o object.Object, b []byte) error {
	if err := os.MkdirAll(string(d), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(string(d), ".wdsidx-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err = errors.Join(err, f.Close()); err == nil {
		err = os.Rename(f.Name(), d.path(o))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// fromRecords builds a WebDataset dataset: each tar's index comes from
// o.Index (validated with webdataset.UnmarshalShard against the listed
// size; rebuilt if it does not decode) or from scanning the tar acquired
// through o.Records, and is then saved to o.Index.
func fromRecords(ctx context.Context, src object.Source, bucket, prefix, pattern string, o Options) (Dataset, error) {
	d, listed, err := listShards(ctx, src, bucket, prefix, pattern)
	if err != nil {
		return Dataset{}, err
	}
	d.Format = FormatWebDataset
	if len(d.Names) != 1 {
		return Dataset{}, fmt.Errorf("%w: a WebDataset shard is one tar; the pattern names %v", ErrDataset, d.Names)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(headerParallelism)
	for i := range d.Groups {
		g.Go(func() error {
			a := listed[d.Groups[i].Objects[0]]
			x, err := tarIndex(gctx, a, o)
			if err != nil {
				return err
			}
			d.Groups[i].Index, d.Groups[i].Rows = x, x.NumSamples()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Dataset{}, err
	}
	for _, sh := range d.Groups {
		for _, f := range sh.Index.Fields() {
			if !slices.Contains(d.Fields, f) {
				d.Fields = append(d.Fields, f)
			}
		}
	}
	return d, d.Validate()
}

// tarIndex returns the index of the tar a describes.
func tarIndex(ctx context.Context, a object.Attrs, o Options) (*webdataset.Shard, error) {
	if o.Index != nil {
		if b, ok := o.Index.Load(a.Object); ok {
			if x, err := webdataset.UnmarshalShard(b, a.Size); err == nil {
				return x, nil
			}
		}
	}
	if o.Records == nil {
		return nil, fmt.Errorf("%w: %s has no saved index and no Source to index it from", ErrConfig, a.Object)
	}
	ls, err := o.Records.Acquire(ctx, a.Object)
	if err != nil {
		return nil, fmt.Errorf("loader: acquire %s: %w", a.Object, err)
	}
	defer ls.Release()
	bl, ok := ls.(BytesLease)
	if !ok {
		return nil, fmt.Errorf("%w: the Source's leases do not lend bytes: cannot index %s", ErrConfig, a.Object)
	}
	x, err := webdataset.Index(bl.Bytes())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDataset, a.Object, err)
	}
	if x.ObjectSize() != a.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes; %d were listed", ErrDataset, a.Object, x.ObjectSize(), a.Size)
	}
	if o.Index != nil {
		b, _ := x.MarshalBinary()
		if err := o.Index.Store(a.Object, b); err != nil {
			return nil, fmt.Errorf("loader: save the index of %s: %w", a.Object, err)
		}
	}
	return x, nil
}

// validateRecords checks a WebDataset dataset.
func (d Dataset) validateRecords() error {
	if len(d.Names) != 1 || len(d.Specs) != 0 {
		return fmt.Errorf("%w: a WebDataset shard is one tar object, with no array specs", ErrDataset)
	}
	for i, n := range d.Fields {
		if n == "" || slices.Contains(d.Fields[:i], n) {
			return fmt.Errorf("%w: field name %q is empty or repeated", ErrDataset, n)
		}
	}
	return nil
}

// acquireRecords leases shard gi's tar and returns it with its index,
// checked against the dataset.
func (l *Loader) acquireRecords(ctx context.Context, gi int) (Lease, []byte, *webdataset.Shard, error) {
	sh := l.ds.Groups[gi]
	o := sh.Objects[0]
	ls, err := l.src.Acquire(ctx, o)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loader: acquire shard %d (%s): %w", gi, o, err)
	}
	bl, ok := ls.(BytesLease)
	if !ok {
		ls.Release()
		return nil, nil, nil, fmt.Errorf("%w: the Source's leases do not lend bytes: cannot read %s", ErrConfig, o)
	}
	b, x := bl.Bytes(), sh.Index
	if x == nil {
		if x, err = webdataset.Index(b); err != nil {
			ls.Release()
			return nil, nil, nil, fmt.Errorf("%w: shard %d (%s): %w", ErrDataset, gi, o, err)
		}
	}
	if x.ObjectSize() != int64(len(b)) || x.NumSamples() != sh.Rows {
		ls.Release()
		return nil, nil, nil, fmt.Errorf("%w: shard %d (%s) is %d bytes; its index describes %d bytes with %d samples, the dataset %d samples",
			ErrDataset, gi, o, len(b), x.ObjectSize(), x.NumSamples(), sh.Rows)
	}
	populate(ls, b)
	return ls, b, x, nil
}

// fixedFields reports whether WebDataset fields are gathered into
// fixed buffers from Config.NewBuffer (see Config.FieldBytes).
func (l *Loader) fixedFields() bool { return l.cfg.NewBuffer != nil && !l.cfg.RecordViews }

// fieldBuffers allocates s's field buffers from Config.NewBuffer, in
// Dataset.Fields order, offsets then data, when fixedFields.
func (l *Loader) fieldBuffers(s *slot) error {
	if !l.fixedFields() {
		return nil
	}
	if l.fieldBytes == nil {
		sizes, err := l.ds.FieldBytes(l.cfg.BatchSize)
		if err != nil {
			return err
		}
		for j := range sizes {
			if l.cfg.FieldBytes > 0 {
				sizes[j] = l.cfg.FieldBytes
			}
		}
		l.fieldBytes = sizes
	}
	n := l.cfg.BatchSize + 1
	for j, name := range l.ds.Fields {
		offs, err := l.newBuffer(8 * n)
		if err != nil {
			return fmt.Errorf("loader: field %q: offsets buffer of %d bytes: %w", name, 8*n, err)
		}
		data, err := l.newBuffer(l.fieldBytes[j])
		if err != nil {
			return fmt.Errorf("loader: field %q: data buffer of %d bytes: %w", name, l.fieldBytes[j], err)
		}
		if !aligned(offs, 8) {
			return fmt.Errorf("%w: NewBuffer's offsets buffer for field %q is not 8-byte aligned", ErrConfig, name)
		}
		f := &s.batch.Fields[j]
		f.Name = name
		// The offsets are int64s in the host's byte order (little-endian
		// on every platform the loader runs on).
		f.Offsets = unsafe.Slice((*int64)(unsafe.Pointer(unsafe.SliceData(offs))), n)[:0]
		f.Data = data[:0:l.fieldBytes[j]]
	}
	return nil
}

// FieldBytes returns, for each of a WebDataset dataset's fields, batch ×
// its largest member in the shards' indexes: the most bytes the field can
// hold in a batch of batch samples. Every shard must have its Index.
func (d Dataset) FieldBytes(batch int) ([]int, error) {
	largest := make([]int64, len(d.Fields))
	for gi, g := range d.Groups {
		if g.Index == nil {
			return nil, fmt.Errorf("%w: shard %d (%s) has no index: set Config.FieldBytes", ErrConfig, gi, g.Objects[0])
		}
		for i := range g.Index.NumSamples() {
			for _, f := range g.Index.Sample(i).Fields {
				if j := slices.Index(d.Fields, f.Name); j >= 0 {
					largest[j] = max(largest[j], f.Size)
				}
			}
		}
	}
	out := make([]int, len(largest))
	for j, n := range largest {
		if n > 0 && int64(batch) > (1<<46)/n {
			return nil, fmt.Errorf("%w: field %q: %d samples of up to %d bytes", ErrConfig, d.Fields[j], batch, n)
		}
		out[j] = int(max(int64(batch)*n, 1))
	}
	return out, nil
}

// copyRecords fills s's fields: copies into its buffers (Arrow's binary
// layout), or, with Config.RecordViews, views of the mappings. With
// fixedFields, a field that outgrows its buffer fails the batch.
func (l *Loader) copyRecords(s *slot) error {
	var copied int64
	fixed := l.fixedFields()
	for j, name := range l.ds.Fields {
		f := &s.batch.Fields[j]
		f.Name = name
		if l.cfg.RecordViews {
			f.Views = f.Views[:0]
		} else {
			f.Offsets, f.Data = append(f.Offsets[:0], 0), f.Data[:0]
		}
		for i, p := range s.picks {
			g := s.groups[p.g]
			v, ok := g.tar.Sample(p.row).Field(name)
			var b []byte
			if ok {
				b = g.tarBytes[v.Offset : v.Offset+v.Size : v.Offset+v.Size]
			}
			if l.cfg.RecordViews {
				f.Views = append(f.Views, b)
				continue
			}
			if fixed && len(b) > cap(f.Data)-len(f.Data) {
				return fmt.Errorf("%w: batch %d of epoch %d, field %q: sample %d (id %d) brings it past %d bytes",
					ErrFieldBytes, s.batch.Index, s.batch.Epoch, name, i, s.batch.IDs[i], cap(f.Data))
			}
			f.Data = append(f.Data, b...)
			f.Offsets = append(f.Offsets, int64(len(f.Data)))
		}
		copied += int64(len(f.Data))
	}
	l.counters.gathered.Add(copied)
	return nil
}
