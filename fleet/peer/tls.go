package peer

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"time"
)

// TLSServerName is the name every member's certificate carries and every
// client verifies: members are told apart by their keys, not their names
// or addresses (a pod's address changes).
const TLSServerName = "cacheagent-peer"

// caLabel is the HKDF label of the fleet CA's key seed.
const caLabel = "cacheagent-peer-tls-ca-v1"

// caValidity is the fixed validity window of the fleet CA certificate,
// so every member builds the same one.
var caNotBefore, caNotAfter = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// TLS is one member's TLS configuration for the data plane, keyed from the
// fleet's data-plane key: a CA whose Ed25519 key is derived from the key
// (every member derives the same one; nobody without the key can), and a
// leaf certificate with a fresh key, signed by that CA, that this member
// presents both as a server and as a client. So both ends of every peer
// connection prove they hold the fleet key, and answers, not only
// requests, are authenticated and encrypted: a man in the middle can
// neither read nor forge the bytes a peer serves (CRC32C, which readers
// check, is not a MAC). Requests are still signed (see Authentication):
// the MAC's replay protection holds under TLS too.
type TLS struct {
	// Server is the peer server's configuration (tls.NewListener): TLS
	// 1.3, a client certificate from the fleet CA required.
	Server *tls.Config
	// Client is the Source's (Config.TLS): TLS 1.3, the server's
	// certificate verified against the fleet CA for TLSServerName.
	Client *tls.Config
}

// NewTLS returns the TLS configuration of the member named name for the
// data-plane key key (at least MinKeyLen bytes; ErrBadKey otherwise).
func NewTLS(key []byte, name string) (*TLS, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	seed, err := hkdf.Key(sha256.New, key, nil, caLabel, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("peer: tls: derive the CA key: %w", err)
	}
	caKey := ed25519.NewKeyFromSeed(seed)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cacheagent fleet CA"},
		NotBefore:             caNotBefore,
		NotAfter:              caNotAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("peer: tls: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("peer: tls: CA certificate: %w", err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("peer: tls: leaf key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("peer: tls: serial: %w", err)
	}
	now := time.Now()
	leafTmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{TLSServerName},
		NotBefore:    now.Add(-24 * time.Hour), // clocks of members may differ
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, pub, caKey)
	if err != nil {
		return nil, fmt.Errorf("peer: tls: leaf certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert := tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: priv}
	return &TLS{
		Server: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    pool,
		},
		Client: &tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{cert},
			RootCAs:      pool,
			ServerName:   TLSServerName,
		},
	}, nil
}
