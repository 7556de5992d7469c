package mtls

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// EncodeCertificatesPEM returns the certificates as concatenated PEM
// "CERTIFICATE" blocks, in order.
func EncodeCertificatesPEM(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// ParseCertificatesPEM parses one or more PEM "CERTIFICATE" blocks. Other
// block types are an error, as is input with no certificate.
func ParseCertificatesPEM(b []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for i := 0; ; i++ {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("mtls: PEM block %d is %q, want CERTIFICATE", i, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("mtls: PEM block %d: %w", i, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("mtls: no PEM CERTIFICATE block found")
	}
	if len(bytes.TrimSpace(b)) > 0 {
		return nil, fmt.Errorf("mtls: %d bytes after the last PEM certificate are not PEM", len(bytes.TrimSpace(b)))
	}
	return certs, nil
}

// EncodePrivateKeyPEM returns key as a PKCS#8 "PRIVATE KEY" PEM block.
func EncodePrivateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("mtls: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParsePrivateKeyPEM parses a PEM private key: PKCS#8 "PRIVATE KEY", SEC 1
// "EC PRIVATE KEY" or PKCS#1 "RSA PRIVATE KEY".
func ParsePrivateKeyPEM(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("mtls: no PEM block in private key")
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("mtls: PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("mtls: parse %s: %w", block.Type, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("mtls: private key of type %T cannot sign", key)
	}
	return signer, nil
}

// NewKey generates the ECDSA P-256 key a workload or the CA uses.
func NewKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mtls: generate ECDSA P-256 key: %w", err)
	}
	return k, nil
}

// NewCSR returns a PEM "CERTIFICATE REQUEST" for key whose only SAN is the
// URI id, the form the mesh CA signs.
func NewCSR(key crypto.Signer, id spiffeid.ID) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URL()}}, key)
	if err != nil {
		return nil, fmt.Errorf("mtls: create CSR for %s: %w", id, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ParseCSR parses a certificate request given as PEM ("CERTIFICATE REQUEST")
// or DER and checks its signature.
func ParseCSR(b []byte) (*x509.CertificateRequest, error) {
	der := b
	if block, _ := pem.Decode(b); block != nil {
		if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
			return nil, fmt.Errorf("mtls: CSR PEM block is %q, want CERTIFICATE REQUEST", block.Type)
		}
		der = block.Bytes
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("mtls: parse CSR: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("mtls: CSR signature: %w", err)
	}
	return csr, nil
}
