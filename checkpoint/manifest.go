package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cacheagent/cacheagent/object"
)

// ManifestName is the object a committed checkpoint's manifest is, under
// its prefix: written last, so a prefix with one is complete.
const ManifestName = "cacheagent-checkpoint.json"

// manifestFormat is the Manifest's format tag.
const manifestFormat = "cacheagent-checkpoint/1"

// Limits of a manifest, and of a checkpoint.
const (
	// MaxFiles is the most files a checkpoint holds.
	MaxFiles = 1 << 20
	// maxManifest bounds a manifest read from the bucket.
	maxManifest = 256 << 20
)

// reservedDir holds a save's part objects while they are composed, under
// the checkpoint's prefix; no file of a checkpoint may lie in it.
const reservedDir = ".cacheagent/"

// Manifest says what a committed checkpoint is: its files, each with the
// size, CRC32C and generation of its object under the prefix, who wrote it
// and when. It is the object ManifestName under the prefix, written last
// with ifGenerationMatch=0, so there is at most one.
type Manifest struct {
	// Format is "cacheagent-checkpoint/1".
	Format string `json:"format"`
	// URI is the checkpoint's prefix, gs://BUCKET/PREFIX/.
	URI string `json:"uri"`
	// Save identifies the save that wrote it (its objects' metadata say
	// the same).
	Save string `json:"save"`
	// Node is the agent that saved it.
	Node string `json:"node"`
	// Created is when the save was taken.
	Created time.Time `json:"created"`
	// Files are the checkpoint's files, by name.
	Files []File `json:"files"`
}

// File is one file of a checkpoint.
type File struct {
	// Name is the file's path in the saved directory, '/'-separated; its
	// object is the prefix followed by it.
	Name string `json:"name"`
	// Size is its length in bytes; CRC32C the Castagnoli CRC of its bytes.
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
	// Generation is its object's generation (0 before the upload).
	Generation int64 `json:"generation,omitempty"`
}

// Bytes returns the checkpoint's total size.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Encode returns m as JSON.
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// ParseManifest parses and checks a manifest: its format, a gs:// prefix
// URI ending in '/', and files with valid, unique names (see CheckName),
// non-negative sizes and positive generations. Errors wrap ErrManifest.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%w: %d bytes", ErrManifest, len(b))
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrManifest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the manifest", ErrManifest)
	}
	if m.Format != manifestFormat {
		return nil, fmt.Errorf("%w: format %.40q, want %q", ErrManifest, m.Format, manifestFormat)
	}
	u, err := object.ParsePrefix(m.URI)
	if err != nil || !strings.HasSuffix(u.Path, "/") {
		return nil, fmt.Errorf("%w: uri %.200q is not a gs://BUCKET/PREFIX/", ErrManifest, m.URI)
	}
	if len(m.Files) > MaxFiles {
		return nil, fmt.Errorf("%w: %d files, at most %d", ErrManifest, len(m.Files), MaxFiles)
	}
	names := make([]string, len(m.Files))
	for i, f := range m.Files {
		if err := CheckName(u, f.Name); err != nil {
			return nil, fmt.Errorf("%w: file %d: %w", ErrManifest, i, err)
		}
		if f.Size < 0 || f.Generation <= 0 {
			return nil, fmt.Errorf("%w: file %.200q: size %d, generation %d", ErrManifest, f.Name, f.Size, f.Generation)
		}
		names[i] = f.Name
	}
	slices.Sort(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			return nil, fmt.Errorf("%w: file %.200q listed twice", ErrManifest, names[i])
		}
	}
	return &m, nil
}

// CheckName reports whether name can be a file of a checkpoint under
// prefix u: a clean relative '/'-separated path of valid UTF-8 without
// control characters, not the manifest, not under the reserved
// ".cacheagent/" directory, whose object name GCS accepts (at most 1024
// bytes with the prefix). Errors wrap object.ErrInvalidName.
func CheckName(u object.URI, name string) error {
	var why string
	switch {
	case name == "":
		why = "empty"
	case !utf8.ValidString(name) || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		why = "not printable UTF-8"
	case path.Clean(name) != name || strings.HasPrefix(name, "/") || name == "." || name == ".." ||
		strings.HasPrefix(name, "../"):
		why = "not a clean relative path"
	case name == ManifestName || strings.HasPrefix(name, reservedDir):
		why = "reserved"
	case len(u.Path)+len(name) > 1024:
		why = "longer than GCS allows with the prefix"
	default:
		return nil
	}
	return fmt.Errorf("file name %.200q: %s: %w", name, why, object.ErrInvalidName)
}
