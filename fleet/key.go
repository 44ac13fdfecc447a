package fleet

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Key errors. Test them with errors.Is.
var (
	// ErrNoKey reports a fleet without key_file and without insecure: true.
	ErrNoKey = errors.New("fleet mode needs a shared key: set key_file " +
		"(openssl rand -hex 32 > fleet.key), or insecure: true to run without one")
	// ErrBadKey reports a key file whose contents are not the hex form of
	// 16, 24 or 32 bytes.
	ErrBadKey = errors.New("fleet: bad key: want the hex form of 16, 24 or 32 bytes " +
		"(openssl rand -hex 32)")
	// ErrKeyPermissions reports a key file that users other than its owner
	// may write: whoever can change the key can join the fleet.
	ErrKeyPermissions = errors.New("fleet: key file is writable by group or others (chmod 600 or 400)")
)

// maxKeyFile bounds what is read of a key file: 32 bytes in hex is 64
// characters, and the rest can only be whitespace.
const maxKeyFile = 4 << 10

// ParseKey parses the contents of a key file: the hex form (either case) of
// 16, 24 or 32 bytes, with leading and trailing whitespace ignored, as
// `openssl rand -hex 16`, `-hex 24` or `-hex 32` writes it. Anything else
// fails with ErrBadKey. The result is the secret the fleet's keys are
// derived from.
func ParseKey(b []byte) ([]byte, error) {
	b = bytes.TrimSpace(b)
	switch len(b) {
	case 32, 48, 64:
	default:
		return nil, fmt.Errorf("%w: got %d characters", ErrBadKey, len(b))
	}
	secret := make([]byte, len(b)/2)
	if _, err := hex.Decode(secret, b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadKey, err)
	}
	return secret, nil
}

// Keys are what a fleet member derives from its key file: memberlist's
// gossip key and the peer data plane's key (Peer). Load them once with
// LoadKeys and give them to Start (Options.Keys) and to the data plane.
type Keys struct {
	gossip, peer  []byte
	file          string
	worldReadable bool
}

// LoadKeys reads and parses the key file at path (ParseKey) and derives the
// fleet's keys from its secret. A file that group or others may write
// fails with ErrKeyPermissions; one that others may read is accepted (a
// Kubernetes Secret volume's default mode is 0644) and reported by Start as
// a warning.
func LoadKeys(path string) (*Keys, error) {
	secret, worldReadable, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	return &Keys{gossip: gossipKey(secret), peer: PeerKey(secret), file: path, worldReadable: worldReadable}, nil
}

// Peer returns the peer data plane's key (PeerKeySize bytes).
func (k *Keys) Peer() []byte { return k.peer }

// readKeyFile reads and parses the key file at path and reports whether
// others may read it.
func readKeyFile(path string) (secret []byte, worldReadable bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, fmt.Errorf("fleet: key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, false, fmt.Errorf("fleet: key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, false, fmt.Errorf("fleet: key file %s: not a regular file: %w", path, ErrBadKey)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, false, fmt.Errorf("%w: %s has mode %v", ErrKeyPermissions, path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile))
	if err != nil {
		return nil, false, fmt.Errorf("fleet: key file %s: %w", path, err)
	}
	secret, err = ParseKey(b)
	if err != nil {
		return nil, false, fmt.Errorf("key file %s: %w", path, err)
	}
	return secret, fi.Mode().Perm()&fs.FileMode(0o004) != 0, nil
}

// Labels of the keys derived from the secret: each use has its own key, so
// a key recovered from one protocol does not open the other.
const (
	gossipLabel = "cacheagent fleet gossip v1"
	peerLabel   = "cacheagent fleet peer v1"
)

// PeerKeySize is the length of the data plane's key.
const PeerKeySize = 32

// PeerKey derives the peer data plane's key from a fleet secret (ParseKey):
// HKDF-SHA256 with its own label, so it differs from the gossip key. Peers
// authenticate their requests with it (Fleet.Key returns it).
func PeerKey(secret []byte) []byte { return derive(secret, peerLabel, PeerKeySize) }

// gossipKey derives memberlist's encryption key, as long as the secret
// (16, 24 or 32 bytes: AES-128, -192 or -256).
func gossipKey(secret []byte) []byte { return derive(secret, gossipLabel, len(secret)) }

// derive returns n bytes of HKDF-SHA256 of secret for label.
func derive(secret []byte, label string, n int) []byte {
	k, err := hkdf.Key(sha256.New, secret, nil, label, n)
	if err != nil { // only for n beyond 255*32 bytes
		panic(fmt.Sprintf("fleet: derive %d bytes: %v", n, err))
	}
	return k
}
