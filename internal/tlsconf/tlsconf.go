// Package tlsconf builds the TLS settings shared by the daemons: the apiserver's server side
// (certificate and key files, reloaded when they change so a rotated certificate is served without
// a restart) and the agents' and SDK's client side (trust a private CA instead of the system roots).
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Server returns a server configuration serving the certificate in certFile (PEM, leaf first,
// then intermediates) with the key in keyFile. Both files are read now, so a bad pair is an error
// at start-up, and again whenever either file's modification time changes.
func Server(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: both a certificate and a key file are needed")
	}
	r := &reloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		return r.get()
	}}, nil
}

// Listen wraps ln in TLS when certFile or keyFile is set, and returns ln unchanged when neither is.
func Listen(ln net.Listener, certFile, keyFile string) (net.Listener, error) {
	if certFile == "" && keyFile == "" {
		return ln, nil
	}
	cfg, err := Server(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, cfg), nil
}

type reloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	certMod, keyMod   time.Time
	cert              *tls.Certificate
}

func (r *reloader) get() (*tls.Certificate, error) {
	cs, err := os.Stat(r.certFile)
	if err != nil {
		return nil, fmt.Errorf("tls certificate: %w", err)
	}
	ks, err := os.Stat(r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls key: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && cs.ModTime().Equal(r.certMod) && ks.ModTime().Equal(r.keyMod) {
		return r.cert, nil
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			// Mid-rotation (one file written, not yet the other): keep serving the old pair.
			return r.cert, nil
		}
		return nil, fmt.Errorf("tls: load %s and %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.certMod, r.keyMod = &c, cs.ModTime(), ks.ModTime()
	return r.cert, nil
}

// Pool reads the PEM certificates in caFile into a pool.
func Pool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ca file: %w", err)
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("ca file %s: no PEM certificate in it", caFile)
	}
	return p, nil
}

// Transport returns an HTTP transport that trusts only the CA certificates in caFile, or the
// system roots when caFile is "".
func Transport(caFile string) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	if caFile == "" {
		return t, nil
	}
	p, err := Pool(caFile)
	if err != nil {
		return nil, err
	}
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: p}
	return t, nil
}

// Client returns an HTTP client with the given timeout over Transport(caFile).
func Client(caFile string, timeout time.Duration) (*http.Client, error) {
	t, err := Transport(caFile)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t, Timeout: timeout}, nil
}
