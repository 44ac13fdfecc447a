package webdataset

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// blockSize is the tar block size: headers and data are padded to it.
const blockSize = 512

// maxMetaSize bounds a pax or GNU long-name entry; tar writers keep them
// small, and the bound keeps hostile entries from costing much.
const maxMetaSize = 1 << 20

// Offsets of the ustar header fields used here.
const (
	offName     = 0   // [100]
	offSize     = 124 // [12]
	offChecksum = 148 // [8]
	offTypeflag = 156
	offMagic    = 257 // [6] "ustar\x00" (POSIX) or "ustar " (GNU)
	offVersion  = 263 // [2]
	offPrefix   = 345 // [155], POSIX ustar only
)

// pending holds what pax and GNU entries say about the next header.
type pending struct {
	name    string
	hasName bool
	size    int64
	hasSize bool
	active  bool // a pax or GNU long-name entry was seen
}

// scan reads the tar headers of b and returns its regular-file members in
// order, calling nothing per member but an append.
func scan(b []byte) ([]Member, error) {
	var members []Member
	var next pending
	for off := 0; ; {
		rest := len(b) - off
		if rest == 0 {
			if next.active {
				return nil, fmt.Errorf("%w: the archive ends after a pax or GNU entry at byte %d", ErrTruncated, off-blockSize)
			}
			return members, nil // no end-of-archive blocks: tolerated
		}
		if rest < blockSize {
			return nil, fmt.Errorf("%w: %d bytes at byte %d, less than a header", ErrTruncated, rest, off)
		}
		h := b[off : off+blockSize]
		if isZero(h) {
			// End of archive: a second zero block, or nothing, must follow.
			if rest >= 2*blockSize && !isZero(b[off+blockSize:off+2*blockSize]) {
				return nil, fmt.Errorf("%w: a lone zero block at byte %d", ErrHeader, off)
			}
			if next.active {
				return nil, fmt.Errorf("%w: the archive ends after a pax or GNU entry at byte %d", ErrTruncated, off)
			}
			return members, nil
		}
		if err := checkSum(h); err != nil {
			return nil, fmt.Errorf("header at byte %d: %w", off, err)
		}
		size, err := parseNumber(h[offSize : offSize+12])
		if err != nil {
			return nil, fmt.Errorf("%w: header at byte %d: size: %v", ErrHeader, off, err)
		}
		flag := h[offTypeflag]
		name := next.name
		if !next.hasName {
			name = headerName(h)
		}
		if flag == 0 && strings.HasSuffix(name, "/") {
			flag = '5' // an old-style directory, as tar reads it
		}
		switch flag {
		case '0', 0, '7':
			if next.hasSize {
				size = next.size
			}
		case '1', '2', '3', '4', '5', '6':
			// Links, devices, directories and FIFOs have no data,
			// whatever their size field says.
			size = 0
		}
		data := off + blockSize
		if size > int64(len(b)-data) {
			return nil, fmt.Errorf("%w: entry at byte %d has %d bytes of data, the object has %d after its header",
				ErrTruncated, off, size, len(b)-data)
		}
		n := int(size)
		end := data + n
		if pad := n % blockSize; pad != 0 {
			if len(b)-end < blockSize-pad {
				return nil, fmt.Errorf("%w: entry at byte %d lacks the padding after its %d bytes", ErrTruncated, off, n)
			}
			end += blockSize - pad
		}
		switch flag {
		case '0', 0, '7': // regular file ('7': contiguous file)
			if name == "" {
				return nil, fmt.Errorf("%w: file at byte %d has an empty name", ErrHeader, off)
			}
			members = append(members, Member{Name: name, Offset: int64(data), Size: size})
			next = pending{}
		case '1', '2', '3', '4', '5', '6':
			next = pending{}
		case 'x':
			next.active = true
			if err := parsePax(b[data:data+n], &next, off); err != nil {
				return nil, err
			}
		case 'L':
			name, err := longName(b[data:data+n], off)
			if err != nil {
				return nil, err
			}
			next.name, next.hasName, next.active = name, true, true
		case 'g', 'K', 'V':
			// Global pax headers, GNU long link names and volume labels
			// do not affect member names or sizes.
		case 'S', 'M':
			return nil, fmt.Errorf("%w: GNU %s entry at byte %d", ErrUnsupported,
				map[byte]string{'S': "sparse", 'M': "multi-volume"}[flag], off)
		default:
			// Other types (GNU dump directories, vendor extensions) are
			// skipped with their data.
			next = pending{}
		}
		off = end
	}
}

// isZero reports whether the block is all zero bytes.
func isZero(h []byte) bool {
	for i := 0; i < len(h); i += 8 {
		if h[i]|h[i+1]|h[i+2]|h[i+3]|h[i+4]|h[i+5]|h[i+6]|h[i+7] != 0 {
			return false
		}
	}
	return true
}

// checkSum checks the header checksum: the sum of the header bytes with the
// checksum field taken as spaces, as unsigned or (old tars) signed bytes.
func checkSum(h []byte) error {
	want, err := parseNumber(h[offChecksum : offChecksum+8])
	if err != nil {
		return fmt.Errorf("%w: checksum field: %v", ErrChecksum, err)
	}
	u := int64(8 * ' ')
	for _, c := range h[:offChecksum] {
		u += int64(c)
	}
	for _, c := range h[offChecksum+8:] {
		u += int64(c)
	}
	if want == u {
		return nil
	}
	s := int64(8 * ' ')
	for i, c := range h {
		if i < offChecksum || i >= offChecksum+8 {
			s += int64(int8(c))
		}
	}
	if want != s {
		return fmt.Errorf("%w: header says %d, bytes sum to %d", ErrChecksum, want, u)
	}
	return nil
}

// parseNumber parses a numeric header field: octal digits surrounded by
// spaces and NULs, or, if the high bit of the first byte is set, a
// big-endian base-256 number (GNU), which must not be negative.
func parseNumber(f []byte) (int64, error) {
	if len(f) > 0 && f[0]&0x80 != 0 {
		if f[0] == 0xff {
			return 0, fmt.Errorf("negative base-256 number")
		}
		v := int64(f[0] & 0x7f)
		for _, c := range f[1:] {
			if v > math.MaxInt64>>8 {
				return 0, fmt.Errorf("base-256 number overflows")
			}
			v = v<<8 | int64(c)
		}
		return v, nil
	}
	f = bytes.TrimLeft(f, " \x00")
	if i := bytes.IndexAny(f, " \x00"); i >= 0 {
		if len(bytes.Trim(f[i:], " \x00")) != 0 {
			return 0, fmt.Errorf("bad octal field %q", f)
		}
		f = f[:i]
	}
	if len(f) == 0 {
		return 0, nil
	}
	var v int64
	for _, c := range f {
		if c < '0' || c > '7' {
			return 0, fmt.Errorf("bad octal field %q", f)
		}
		if v > math.MaxInt64>>3 {
			return 0, fmt.Errorf("octal field %q overflows", f)
		}
		v = v<<3 | int64(c-'0')
	}
	return v, nil
}

// cString returns f up to its first NUL.
func cString(f []byte) []byte {
	if i := bytes.IndexByte(f, 0); i >= 0 {
		return f[:i]
	}
	return f
}

// headerName returns the name of a header, joined to the prefix field in
// POSIX ustar headers (GNU headers use that space for other fields).
func headerName(h []byte) string {
	name := cString(h[offName : offName+100])
	if string(h[offMagic:offMagic+6]) == "ustar\x00" && string(h[offVersion:offVersion+2]) == "00" {
		if p := cString(h[offPrefix : offPrefix+155]); len(p) > 0 {
			return string(p) + "/" + string(name)
		}
	}
	return string(name)
}

// longName returns the name a GNU 'L' entry at byte off holds.
func longName(d []byte, off int) (string, error) {
	if len(d) > maxMetaSize {
		return "", fmt.Errorf("%w: GNU long name at byte %d is %d bytes", ErrHeader, off, len(d))
	}
	name := cString(d)
	if len(name) == 0 {
		return "", fmt.Errorf("%w: GNU long name at byte %d is empty", ErrHeader, off)
	}
	return string(name), nil
}

// parsePax parses the records "LEN KEY=VALUE\n" of a pax 'x' entry at
// byte off into p: path and size; other keys are ignored, except that
// GNU sparse files are unsupported.
func parsePax(d []byte, p *pending, off int) error {
	if len(d) > maxMetaSize {
		return fmt.Errorf("%w: pax header at byte %d is %d bytes", ErrHeader, off, len(d))
	}
	for len(d) > 0 {
		sp := bytes.IndexByte(d, ' ')
		if sp <= 0 || sp > 7 {
			return fmt.Errorf("%w: pax record at byte %d has no length", ErrHeader, off)
		}
		n, err := strconv.Atoi(string(d[:sp]))
		if err != nil || n <= sp+1 || n > len(d) || d[n-1] != '\n' || d[0] == '0' {
			return fmt.Errorf("%w: pax record at byte %d has a bad length %q", ErrHeader, off, d[:sp])
		}
		rec := d[sp+1 : n-1]
		d = d[n:]
		eq := bytes.IndexByte(rec, '=')
		if eq <= 0 {
			return fmt.Errorf("%w: pax record at byte %d has no key", ErrHeader, off)
		}
		key, val := string(rec[:eq]), rec[eq+1:]
		switch {
		case key == "path":
			if len(val) == 0 || bytes.IndexByte(val, 0) >= 0 {
				return fmt.Errorf("%w: pax path at byte %d is empty or holds a NUL", ErrHeader, off)
			}
			p.name, p.hasName = string(val), true
		case key == "size":
			v, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil || v < 0 {
				return fmt.Errorf("%w: pax size %q at byte %d", ErrHeader, val, off)
			}
			p.size, p.hasSize = v, true
		case len(key) > 11 && key[:11] == "GNU.sparse.":
			return fmt.Errorf("%w: GNU sparse file (pax key %s) at byte %d", ErrUnsupported, key, off)
		}
	}
	return nil
}
