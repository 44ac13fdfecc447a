package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cacheagent/cacheagent/mmapstore/array"
)

// dtypes maps safetensors dtype names to element types.
var dtypes = map[string]array.DType{
	"BOOL": array.Bool,
	"I8":   array.Int8,
	"I16":  array.Int16,
	"I32":  array.Int32,
	"I64":  array.Int64,
	"U8":   array.Uint8,
	"U16":  array.Uint16,
	"U32":  array.Uint32,
	"U64":  array.Uint64,
	"F16":  array.Float16,
	"BF16": array.BFloat16,
	"F32":  array.Float32,
	"F64":  array.Float64,
}

// decodeObject decodes the JSON object text into its members. Keys are
// exact (no case folding), and a repeated key, which encoding/json would
// silently merge, is an error. JSON null decodes to a nil map.
func decodeObject(text []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(text, &m); err != nil {
		return nil, err
	}
	if m != nil && countMembers(text) != len(m) {
		return nil, errors.New("repeated key")
	}
	return m, nil
}

// countMembers returns the number of members of the JSON object text,
// which must be valid JSON: the colons at depth 1 outside strings.
func countMembers(text []byte) int {
	n, depth := 0, 0
	inString, escaped := false, false
	for _, c := range text {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			n++
		}
	}
	return n
}

// parseMetadata decodes the __metadata__ object: strings to strings. JSON
// null means no metadata.
func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	m, err := decodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: __metadata__: %w", ErrHeader, err)
	}
	if m == nil {
		return nil, nil
	}
	md := make(map[string]string, len(m))
	for k, v := range m {
		var s *string
		if err := json.Unmarshal(v, &s); err != nil || s == nil {
			return nil, fmt.Errorf("%w: __metadata__ %q: value is not a string", ErrHeader, k)
		}
		md[k] = *s
	}
	return md, nil
}

// entry is the decoded header entry of one tensor.
type entry struct {
	name       string
	dtype      array.DType
	shape      []int
	begin, end int // data_offsets, relative to the data section
}

// parseEntry decodes and checks the header entry of tensor name, whose
// data must lie within a data section of dataLen bytes. Keys other than
// dtype, shape and data_offsets are ignored, as the reference
// implementation does.
func parseEntry(name string, raw json.RawMessage, dataLen int) (entry, error) {
	m, err := decodeObject(raw)
	if err != nil || m == nil {
		return entry{}, fmt.Errorf("%w: tensor %q: not a JSON object without repeated keys", ErrHeader, name)
	}
	var (
		e       = entry{name: name}
		dtype   string
		offsets []uint64
	)
	fields := [...]struct {
		key string
		dst any
	}{{"dtype", &dtype}, {"shape", &e.shape}, {"data_offsets", &offsets}}
	for _, f := range fields {
		v, ok := m[f.key]
		if !ok || string(v) == "null" {
			return entry{}, fmt.Errorf("%w: tensor %q: %s is missing", ErrHeader, name, f.key)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return entry{}, fmt.Errorf("%w: tensor %q: %s: %w", ErrHeader, name, f.key, err)
		}
	}
	if err := e.check(dtype, offsets, dataLen); err != nil {
		return entry{}, err
	}
	return e, nil
}

// check validates the decoded fields of e and stores the element type and
// offsets.
func (e *entry) check(dtype string, offsets []uint64, dataLen int) error {
	d, ok := dtypes[dtype]
	if !ok {
		return fmt.Errorf("%w %q: tensor %q", ErrUnsupportedDType, dtype, e.name)
	}
	e.dtype = d
	for i, dim := range e.shape {
		if dim < 0 {
			return fmt.Errorf("%w: tensor %q: dimension %d is negative (%d)", ErrHeader, e.name, i, dim)
		}
	}
	if len(offsets) != 2 {
		return fmt.Errorf("%w: tensor %q: data_offsets has %d values, want 2", ErrHeader, e.name, len(offsets))
	}
	begin, end := offsets[0], offsets[1]
	if begin > end || end > uint64(dataLen) {
		return fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] outside the %d-byte data section",
			ErrOffsets, e.name, begin, end, dataLen)
	}
	e.begin, e.end = int(begin), int(end)
	size, ok := array.DataSize(d, e.shape)
	if !ok || size != e.end-e.begin {
		return fmt.Errorf("%w: tensor %q: shape %v of %s does not fit data_offsets [%d, %d]",
			ErrOffsets, e.name, e.shape, dtype, begin, end)
	}
	return nil
}
