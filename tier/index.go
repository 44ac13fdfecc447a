package tier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"golang.org/x/sys/unix"
)

// formatVersion is the version of the index's on-disk format (see the package
// doc). Bump it when the key or record encoding changes incompatibly, and
// teach checkFormat to migrate the older versions it can.
//
// Version 2 added the record flags flagShm and flagHotPin, version 3 the flag
// flagPacked (an object stored in a segment file, at an offset). An older
// index is a valid newer one (it never sets the new flags), so migrating it
// only restamps the version; an older build then refuses the index with
// ErrFormat instead of dropping the entries whose flags it does not know.
const formatVersion = 3

// formatKey holds the format version as a uvarint. Meta keys start with NUL,
// which no entry key does (buckets are non-empty and contain no NUL).
var formatKey = []byte("\x00format")

// record is the persisted part of an entry.
type record struct {
	gen     int64
	size    int64
	blocks  int64
	crc     uint32
	hasCRC  bool
	pinned  bool
	inShm   bool  // a copy is in the shm tier (two-tier mode)
	hotPin  bool  // pinned in the shm tier too (implies pinned)
	updated int64 // unix ns; 0 if unknown
	checked int64 // unix ns of the last Stat that confirmed gen
	access  int64 // unix ns of the last use
	// packed objects live in segment file seg at offset off (a multiple
	// of the page size) instead of a file of their own.
	packed bool
	seg    uint64
	off    int64
}

// Record flag bits.
const (
	flagCRC    = 1 << 0
	flagPinned = 1 << 1
	flagShm    = 1 << 2 // format version 2
	flagHotPin = 1 << 3 // format version 2
	flagPacked = 1 << 4 // format version 3
	flagsKnown = flagCRC | flagPinned | flagShm | flagHotPin | flagPacked
)

// appendRecord appends r's encoding: flags byte (see the flag bits), varint gen, uvarint size,
// uvarint blocks, 4-byte little-endian CRC32C (only if flagCRC), varint
// updated, varint checked, varint access, and (only if flagPacked) uvarint
// segment and uvarint offset.
func appendRecord(b []byte, r record) []byte {
	var flags byte
	if r.hasCRC {
		flags |= flagCRC
	}
	if r.pinned {
		flags |= flagPinned
	}
	if r.inShm {
		flags |= flagShm
	}
	if r.hotPin {
		flags |= flagHotPin
	}
	if r.packed {
		flags |= flagPacked
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, r.gen)
	b = binary.AppendUvarint(b, uint64(r.size))
	b = binary.AppendUvarint(b, uint64(r.blocks))
	if r.hasCRC {
		b = binary.LittleEndian.AppendUint32(b, r.crc)
	}
	b = binary.AppendVarint(b, r.updated)
	b = binary.AppendVarint(b, r.checked)
	b = binary.AppendVarint(b, r.access)
	if r.packed {
		b = binary.AppendUvarint(b, r.seg)
		b = binary.AppendUvarint(b, uint64(r.off))
	}
	return b
}

// errBadRecord means an index value does not decode.
var errBadRecord = errors.New("tier: malformed index record")

// decodeRecord decodes what appendRecord wrote. It never panics.
func decodeRecord(b []byte) (record, error) {
	var r record
	if len(b) == 0 || b[0]&^flagsKnown != 0 {
		return r, errBadRecord
	}
	d := decoder{b: b[1:]}
	r.hasCRC, r.pinned = b[0]&flagCRC != 0, b[0]&flagPinned != 0
	r.inShm, r.hotPin = b[0]&flagShm != 0, b[0]&flagHotPin != 0
	if r.hotPin && !r.pinned {
		return record{}, errBadRecord
	}
	r.gen = d.varint()
	size, blocks := d.uvarint(), d.uvarint()
	if r.hasCRC {
		r.crc = d.uint32()
	}
	r.updated, r.checked, r.access = d.varint(), d.varint(), d.varint()
	var off uint64
	if r.packed = b[0]&flagPacked != 0; r.packed {
		r.seg, off = d.uvarint(), d.uvarint()
	}
	if d.bad || len(d.b) != 0 || size > 1<<62 || blocks > 1<<62 || off > 1<<62 || (r.packed && off%pageSize != 0) {
		return record{}, errBadRecord
	}
	r.off = int64(off)
	r.size, r.blocks = int64(size), int64(blocks)
	return r, nil
}

// decoder reads varints from b, setting bad instead of panicking.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.bad, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) uint32() uint32 {
	if len(d.b) < 4 {
		d.bad, d.b = true, nil
		return 0
	}
	v := binary.LittleEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

// index is the badger database under Dir/index. It is the durable record of
// what is cached; the Cache serialises writes (see Cache.idxMu).
type index struct {
	db  *badger.DB
	dir string
}

// badgerOptions tunes badger for a small index and little memory: one
// process writes short records, reads them all at start-up and rarely after.
func badgerOptions(dir string, log *slog.Logger) badger.Options {
	return badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		WithLoggingLevel(badger.WARNING).
		WithMetricsEnabled(false).
		WithSyncWrites(false). // data files are fsynced; a lost record only orphans a file (see punch.go)
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithNumGoroutines(2).
		WithNumCompactors(2).
		WithMemTableSize(1 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(2 << 20).
		WithBaseLevelSize(8 << 20).
		WithValueLogFileSize(8 << 20).
		WithValueThreshold(1 << 10). // records are ~50 bytes: all stay in the LSM tree
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithCompactL0OnClose(true)
}

// openIndex opens (or creates) the index and checks its format version.
func openIndex(dir string, log *slog.Logger) (*index, error) {
	db, err := badger.Open(badgerOptions(dir, log))
	if err != nil {
		return nil, fmt.Errorf("tier: open index %s: %w", dir, err)
	}
	x := &index{db: db, dir: dir}
	if err := x.checkFormat(log); err != nil {
		db.Close()
		return nil, err
	}
	return x, nil
}

// checkFormat stamps a new index with formatVersion, migrates an older
// version it knows, and refuses one written by a newer (or unknown) format.
func (x *index) checkFormat(log *slog.Logger) error {
	return x.db.Update(func(txn *badger.Txn) error {
		stamp := binary.AppendUvarint(nil, formatVersion)
		item, err := txn.Get(formatKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return txn.Set(formatKey, stamp)
		}
		if err != nil {
			return fmt.Errorf("tier: read index format: %w", err)
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return fmt.Errorf("tier: read index format: %w", err)
		}
		ver, n := binary.Uvarint(v)
		switch {
		case n <= 0 || n != len(v):
			return fmt.Errorf("%w: unreadable version %x", ErrFormat, v)
		case ver == 1 || ver == 2: // its records are valid version 3 records
			log.Info("tier: migrating the index format", "from", ver, "to", formatVersion)
			return txn.Set(formatKey, stamp)
		case ver != formatVersion:
			return fmt.Errorf("%w: index has format version %d, this build reads versions 1 to %d",
				ErrFormat, ver, formatVersion)
		}
		return nil
	})
}

// put writes one record.
func (x *index) put(key string, r record) error {
	err := x.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(key), appendRecord(nil, r))
	})
	if err != nil {
		return fmt.Errorf("tier: index put: %w", err)
	}
	return nil
}

// putBatch writes records[i] under keys[i].
func (x *index) putBatch(keys []string, recs []record) error {
	if len(keys) == 0 {
		return nil
	}
	wb := x.db.NewWriteBatch()
	defer wb.Cancel()
	for i, k := range keys {
		if err := wb.Set([]byte(k), appendRecord(nil, recs[i])); err != nil {
			return fmt.Errorf("tier: index batch put: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("tier: index batch put: %w", err)
	}
	return nil
}

// deleteBatch deletes keys.
func (x *index) deleteBatch(keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	wb := x.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete([]byte(k)); err != nil {
			return fmt.Errorf("tier: index batch delete: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("tier: index batch delete: %w", err)
	}
	return nil
}

// scan calls fn for every entry key (meta keys skipped) with its value; both
// slices are valid only during the call.
func (x *index) scan(fn func(key, val []byte)) error {
	err := x.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false // records live in the LSM tree: Value reads them in place, no copy
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) > 0 && k[0] == 0 {
				continue
			}
			if err := item.Value(func(v []byte) error { fn(k, v); return nil }); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tier: scan index: %w", err)
	}
	return nil
}

// sync makes every write so far durable (the index is written without
// syncs; see badgerOptions). badger's Sync syncs the log of the memtable
// taking writes, not that of one it rotated out and has not yet written to
// a table (which may hold earlier writes): those logs (*.mem, mapped
// files) are synced here too. One created or removed meanwhile holds only
// later writes, or its writes are in a table already.
func (x *index) sync() error {
	if err := x.db.Sync(); err != nil {
		return fmt.Errorf("tier: sync index: %w", err)
	}
	logs, err := filepath.Glob(filepath.Join(x.dir, "*.mem"))
	if err != nil {
		return fmt.Errorf("tier: sync index: %w", err)
	}
	for _, p := range logs {
		if err := syncFile(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("tier: sync index: %w", err)
		}
	}
	return nil
}

// syncFile fdatasyncs the file at p.
func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fdatasync(int(f.Fd()))
}

// close closes the database.
func (x *index) close() error {
	if err := x.db.Close(); err != nil {
		return fmt.Errorf("tier: close index: %w", err)
	}
	return nil
}

// badgerLogger routes badger's warnings and errors to slog and drops the rest.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}

func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}
