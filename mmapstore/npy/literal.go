package npy

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// maxDepth bounds the nesting of tuples and lists in a header, so hostile
// input cannot exhaust the stack.
const maxDepth = 32

// kind is the type of a parsed Python literal.
type kind uint8

const (
	kindString kind = iota + 1
	kindInt
	kindBool
	kindTuple
	kindList
)

// literal is one Python literal from an npy header: a string, an int, True
// or False, or a tuple or list of literals.
type literal struct {
	kind  kind
	str   string    // kindString: the decoded value
	num   int       // kindInt: the value, unless big
	big   bool      // kindInt: the value does not fit in an int
	flag  bool      // kindBool
	items []literal // kindTuple, kindList
	// start and end delimit the literal's source text in the header,
	// parentheses around it included.
	start, end int
}

// dict holds the three entries an npy header dict must have.
type dict struct {
	descr, fortranOrder, shape literal
	seen                       [3]bool // descr, fortran_order, shape
}

// dictKeys are the keys of a header dict, in the order of dict.seen.
var dictKeys = [3]string{"descr", "fortran_order", "shape"}

// parser is a strict recursive-descent parser for the subset of Python
// literal syntax numpy writes in headers. It never panics: every index is
// checked against len(src).
type parser struct {
	src    []byte
	pos    int
	latin1 bool // strings are Latin-1 (versions 1 and 2), not UTF-8
	depth  int
}

// errorf returns an error wrapping ErrHeader that names the byte offset
// within the header.
func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: byte %d: %s", ErrHeader, p.pos, fmt.Sprintf(format, args...))
}

// parseDict parses a whole header: a dict literal with exactly the keys
// 'descr', 'fortran_order' and 'shape', optionally surrounded by whitespace.
func parseDict(src []byte, latin1 bool) (dict, error) {
	p := &parser{src: src, latin1: latin1}
	var d dict
	if !p.consume('{') {
		return d, p.errorf("header does not start with '{'")
	}
	for {
		if p.consume('}') {
			break
		}
		if err := p.entry(&d); err != nil {
			return d, err
		}
		if !p.consume(',') && !p.peek('}') {
			return d, p.errorf("expected ',' or '}' after a dict entry")
		}
	}
	p.skipSpace()
	if p.pos != len(p.src) {
		return d, p.errorf("unexpected %q after the header dict", p.src[p.pos])
	}
	for i, k := range dictKeys {
		if !d.seen[i] {
			return d, fmt.Errorf("%w: key '%s' is missing", ErrHeader, k)
		}
	}
	return d, nil
}

// entry parses one "key: value" pair of the header dict into d.
func (p *parser) entry(d *dict) error {
	p.skipSpace()
	if !p.peek('\'') && !p.peek('"') {
		return p.errorf("dict key is not a string")
	}
	key, err := p.value()
	if err != nil {
		return err
	}
	if !p.consume(':') {
		return p.errorf("expected ':' after dict key")
	}
	val, err := p.value()
	if err != nil {
		return err
	}
	dst := [3]*literal{&d.descr, &d.fortranOrder, &d.shape}
	for i, k := range dictKeys {
		if key.str != k {
			continue
		}
		if d.seen[i] {
			return fmt.Errorf("%w: duplicate key %q", ErrHeader, k)
		}
		d.seen[i] = true
		*dst[i] = val
		return nil
	}
	return fmt.Errorf("%w: unexpected key %q", ErrHeader, key.str)
}

// skipSpace advances past Python whitespace.
func (p *parser) skipSpace() {
	for p.pos < len(p.src) {
		switch p.src[p.pos] {
		case ' ', '\t', '\n', '\r', '\f':
			p.pos++
		default:
			return
		}
	}
}

// peek reports whether the next byte is c, without consuming it.
func (p *parser) peek(c byte) bool {
	return p.pos < len(p.src) && p.src[p.pos] == c
}

// consume skips whitespace and then c, reporting whether c was there.
func (p *parser) consume(c byte) bool {
	p.skipSpace()
	if p.peek(c) {
		p.pos++
		return true
	}
	return false
}

// value parses one literal after optional whitespace.
func (p *parser) value() (literal, error) {
	p.skipSpace()
	if p.pos >= len(p.src) {
		return literal{}, p.errorf("unexpected end of header")
	}
	start := p.pos
	var (
		v   literal
		err error
	)
	switch c := p.src[p.pos]; {
	case c == '\'' || c == '"':
		v, err = p.str()
	case c == '(':
		v, err = p.sequence(')', kindTuple)
	case c == '[':
		v, err = p.sequence(']', kindList)
	case c == '-' || isDigit(c):
		v, err = p.integer()
	case isNameStart(c):
		v, err = p.name()
	default:
		return literal{}, p.errorf("unexpected %q", c)
	}
	if err != nil {
		return literal{}, err
	}
	v.start, v.end = start, p.pos
	return v, nil
}

// sequence parses a tuple or a list. A parenthesised single value without
// a comma is that value, as in Python: (3) is the int 3, (3,) a tuple.
func (p *parser) sequence(closing byte, k kind) (literal, error) {
	if p.depth++; p.depth > maxDepth {
		return literal{}, p.errorf("nesting deeper than %d", maxDepth)
	}
	defer func() { p.depth-- }()
	p.pos++ // the opening bracket
	// One allocation covers shapes of up to four dimensions.
	v := literal{kind: k, items: make([]literal, 0, 4)}
	comma := false
	for !p.consume(closing) {
		item, err := p.value()
		if err != nil {
			return literal{}, err
		}
		v.items = append(v.items, item)
		if p.consume(',') {
			comma = true
			continue
		}
		if !p.peek(closing) {
			return literal{}, p.errorf("expected ',' or %q", closing)
		}
	}
	if k == kindTuple && len(v.items) == 1 && !comma {
		return v.items[0], nil
	}
	return v, nil
}

// integer parses a decimal int with an optional minus sign. Versions 1 and
// 2 may come from Python 2, whose long ints carry an 'L' suffix.
func (p *parser) integer() (literal, error) {
	v := literal{kind: kindInt}
	neg := p.src[p.pos] == '-'
	if neg {
		p.pos++
	}
	digits := p.pos
	for p.pos < len(p.src) && isDigit(p.src[p.pos]) {
		d := int(p.src[p.pos] - '0')
		if v.num > (math.MaxInt-d)/10 {
			v.big = true
		} else {
			v.num = v.num*10 + d
		}
		p.pos++
	}
	switch n := p.pos - digits; {
	case n == 0:
		return literal{}, p.errorf("expected digits")
	case n > 1 && p.src[digits] == '0':
		return literal{}, p.errorf("integer with a leading zero")
	}
	if p.latin1 && (p.peek('L') || p.peek('l')) {
		p.pos++
	}
	if p.pos < len(p.src) && (isNameStart(p.src[p.pos]) || isDigit(p.src[p.pos]) || p.src[p.pos] == '.') {
		return literal{}, p.errorf("malformed number")
	}
	if neg {
		v.num = -v.num
	}
	return v, nil
}

// name parses True or False; no other names are literals.
func (p *parser) name() (literal, error) {
	start := p.pos
	for p.pos < len(p.src) && (isNameStart(p.src[p.pos]) || isDigit(p.src[p.pos])) {
		p.pos++
	}
	switch string(p.src[start:p.pos]) {
	case "True":
		return literal{kind: kindBool, flag: true}, nil
	case "False":
		return literal{kind: kindBool}, nil
	}
	name := p.src[start:p.pos]
	p.pos = start
	return literal{}, p.errorf("unexpected name %q", name)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isNameStart(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c >= 0x80
}

// text decodes raw header bytes to a Go string: Latin-1 in versions 1 and
// 2, UTF-8 (already validated) in version 3.
func (p *parser) text(b []byte) string {
	if !p.latin1 {
		return string(b)
	}
	return latin1(b)
}

// latin1 converts Latin-1 bytes to a UTF-8 string.
func latin1(b []byte) string {
	ascii := true
	for _, c := range b {
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(2 * len(b))
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}
