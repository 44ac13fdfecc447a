package npy

import (
	"strings"
	"unicode/utf8"
)

// simpleEscapes maps the character after a backslash to the byte it
// stands for, for the one-character escapes of Python string literals.
var simpleEscapes = [256]byte{
	'\\': '\\', '\'': '\'', '"': '"',
	'a': '\a', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v',
}

// str parses a single- or double-quoted Python string literal without
// prefixes, as repr writes it: one-character escapes and \x, \u and \U
// escapes are decoded; octal escapes, line breaks inside the string and
// unknown escapes are errors.
func (p *parser) str() (literal, error) {
	quote := p.src[p.pos]
	p.pos++
	start := p.pos
	var sb *strings.Builder // nil until the first escape
	for p.pos < len(p.src) {
		c := p.src[p.pos]
		switch {
		case c == quote:
			var s string
			if sb == nil {
				s = p.text(p.src[start:p.pos])
			} else {
				s = sb.String()
			}
			p.pos++
			return literal{kind: kindString, str: s}, nil
		case c == '\n' || c == '\r':
			return literal{}, p.errorf("line break inside a string")
		case c == '\\':
			if sb == nil {
				sb = &strings.Builder{}
				sb.WriteString(p.text(p.src[start:p.pos]))
			}
			if err := p.escape(sb); err != nil {
				return literal{}, err
			}
		default:
			if sb != nil {
				sb.WriteString(p.text(p.src[p.pos : p.pos+1]))
			}
			p.pos++
		}
	}
	return literal{}, p.errorf("unterminated string")
}

// escape decodes the escape sequence at p.pos (a backslash) into sb.
func (p *parser) escape(sb *strings.Builder) error {
	if p.pos+1 >= len(p.src) {
		return p.errorf("unterminated string")
	}
	c := p.src[p.pos+1]
	if b := simpleEscapes[c]; b != 0 {
		sb.WriteByte(b)
		p.pos += 2
		return nil
	}
	var n int
	switch c {
	case 'x':
		n = 2
	case 'u':
		n = 4
	case 'U':
		n = 8
	default:
		return p.errorf("unsupported escape \\%c", c)
	}
	if p.pos+2+n > len(p.src) {
		return p.errorf("truncated \\%c escape", c)
	}
	r := rune(0)
	for _, h := range p.src[p.pos+2 : p.pos+2+n] {
		d, ok := hexDigit(h)
		if !ok {
			return p.errorf("malformed \\%c escape", c)
		}
		r = r<<4 | rune(d)
	}
	if r > utf8.MaxRune {
		return p.errorf("escape \\%c beyond Unicode", c)
	}
	sb.WriteRune(r) // surrogates become U+FFFD
	p.pos += 2 + n
	return nil
}

// hexDigit returns the value of the hexadecimal digit c.
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
