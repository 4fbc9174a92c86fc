package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"
)

// ServingCertificate issues a TLS server certificate for the control plane's
// own listeners (15012, the webhooks) from this CA, with a fresh ECDSA P-256
// key, so that clients trusting the mesh root (istio-ca-root-cert) trust it.
// Each name is a DNS name or an IP literal (for an API server that calls a
// webhook by address). ttl ≤ 0 means DefaultCertTTL, capped as Sign caps
// it; like Sign it refuses (ErrCANotValid) when the CA's chain is not valid
// now. RotatingServingCert re-issues before NotAfter.
func (a *Authority) ServingCertificate(names []string, ttl time.Duration) (*tls.Certificate, error) {
	if len(names) == 0 {
		return nil, errors.New("ca: a serving certificate needs at least one name")
	}
	var (
		dnsNames []string
		ips      []net.IP
	)
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, n)
		}
	}
	if ttl <= 0 {
		ttl = a.opts.DefaultCertTTL
	}
	notBefore, notAfter, err := a.leafValidity(time.Now(), ttl)
	if err != nil {
		return nil, fmt.Errorf("ca: serving certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		DNSNames:              dnsNames,
		IPAddresses:           ips,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.signer)
	if err != nil {
		return nil, fmt.Errorf("ca: sign serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	chain := [][]byte{der}
	for _, c := range a.chain {
		chain = append(chain, c.Raw)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}
