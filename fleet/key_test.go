package fleet

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	hex16 := "000102030405060708090a0b0c0d0e0f"
	hex24 := hex16 + "1011121314151617"
	hex32 := hex24 + "18191a1b1c1d1e1f"
	tests := []struct {
		name, in string
		wantLen  int // 0: want ErrBadKey
	}{
		{"16 bytes", hex16, 16},
		{"24 bytes", hex24, 24},
		{"32 bytes", hex32, 32},
		{"openssl's newline", hex32 + "\n", 32},
		{"CRLF and spaces", "  " + hex16 + " \r\n", 16},
		{"upper case", strings.ToUpper(hex32), 32},
		{"empty", "", 0},
		{"whitespace only", " \n\t", 0},
		{"15 bytes", hex16[:30], 0},
		{"odd length", hex16 + "0", 0},
		{"64 bytes", hex32 + hex32, 0},
		{"not hex", strings.Repeat("zz", 16), 0},
		{"inner space", hex16[:16] + " " + hex16[17:], 0},
		{"base64 of 16 bytes", "AAECAwQFBgcICQoLDA0ODw==", 0},
		{"two lines", hex16 + "\n" + hex16, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey([]byte(tt.in))
			if tt.wantLen == 0 {
				if !errors.Is(err, ErrBadKey) {
					t.Errorf("ParseKey(%q) = %x, %v; want ErrBadKey", tt.in, got, err)
				}
				return
			}
			if err != nil || len(got) != tt.wantLen {
				t.Fatalf("ParseKey(%q) = %x, %v; want %d bytes", tt.in, got, err, tt.wantLen)
			}
			if want, _ := hex.DecodeString(strings.TrimSpace(tt.in)); !bytes.Equal(got, want) {
				t.Errorf("ParseKey(%q) = %x; want %x", tt.in, got, want)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{"000102030405060708090a0b0c0d0e0f\n", "", "zz", strings.Repeat("ab", 24), " \t" + strings.Repeat("AB", 32)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		secret, err := ParseKey(b)
		if err != nil {
			if !errors.Is(err, ErrBadKey) {
				t.Fatalf("ParseKey(%q) = %v; want ErrBadKey", b, err)
			}
			return
		}
		switch len(secret) {
		case 16, 24, 32:
		default:
			t.Fatalf("ParseKey(%q) = %d bytes; want 16, 24 or 32", b, len(secret))
		}
		if got, want := hex.EncodeToString(secret), strings.ToLower(string(bytes.TrimSpace(b))); got != want {
			t.Fatalf("ParseKey(%q) = %s; want the trimmed input %s", b, got, want)
		}
	})
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(keyB+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		mode          os.FileMode
		err           error
		worldReadable bool
	}{
		{0o600, nil, false},
		{0o400, nil, false},
		{0o640, nil, false},
		{0o644, nil, true}, // a Kubernetes Secret volume's default
		{0o620, ErrKeyPermissions, false},
		{0o602, ErrKeyPermissions, false},
	} {
		p := write("key-"+tt.mode.String(), tt.mode)
		secret, readable, err := readKeyFile(p)
		if !errors.Is(err, tt.err) || (err == nil && (len(secret) != 16 || readable != tt.worldReadable)) {
			t.Errorf("readKeyFile(mode %v) = %x, %v, %v; want 16 bytes, world-readable %v, error %v",
				tt.mode, secret, readable, err, tt.worldReadable, tt.err)
		}
	}
	if _, err := LoadKeys(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadKeys(missing) = %v; want fs.ErrNotExist", err)
	}
	if _, err := LoadKeys(dir); !errors.Is(err, ErrBadKey) {
		t.Errorf("LoadKeys(a directory) = %v; want ErrBadKey", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("secret\n"), 0o600)
	if _, err := LoadKeys(bad); !errors.Is(err, ErrBadKey) || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadKeys(not hex) = %v; want ErrBadKey naming the file", err)
	}
}

// TestDerivedKeys checks that the gossip and peer keys differ from each
// other and from the secret, have their sizes, and depend on the secret.
func TestDerivedKeys(t *testing.T) {
	for _, n := range []int{16, 24, 32} {
		secret := bytes.Repeat([]byte{7}, n)
		g, p := gossipKey(secret), PeerKey(secret)
		if len(g) != n || len(p) != PeerKeySize {
			t.Errorf("%d-byte secret: gossip key %d bytes, peer key %d; want %d and %d", n, len(g), len(p), n, PeerKeySize)
		}
		if bytes.Equal(g, secret) || bytes.Equal(g, p[:n]) || bytes.Equal(p[:n], secret) {
			t.Errorf("%d-byte secret: derived keys equal each other or the secret", n)
		}
		if !bytes.Equal(p, PeerKey(bytes.Clone(secret))) {
			t.Errorf("PeerKey is not deterministic")
		}
		other := bytes.Repeat([]byte{8}, n)
		if bytes.Equal(PeerKey(other), p) || bytes.Equal(gossipKey(other), g) {
			t.Errorf("%d-byte secrets 7… and 8… derive the same keys", n)
		}
	}
}
