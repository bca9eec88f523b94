package scripts_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestTLS: the stores work over rediss:// against a server whose certificate
// is signed by a private CA, with the CA given the way docs/security.md documents
// (rueidis.ParseURL, then ClientOption.TLSConfig.RootCAs, then NewClaims &
// co.); and they fail closed: no connection without the CA (OpenClaims with
// the system roots), with a different CA, with a wrong password, or in clear
// text to the TLS port.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caPool := newTestCA(t, dir, "ca")
	_, otherPool := newTestCA(t, dir, "other-ca")
	ca.issue(t, dir, "server", net.ParseIP("127.0.0.1"))
	tlsPort := freeLoopbackPort(t)
	srv := newServer(t, redisproc.Options{Password: "tls-secret", Args: []string{
		"--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", filepath.Join(dir, "server.crt"),
		"--tls-key-file", filepath.Join(dir, "server.key"),
		"--tls-ca-cert-file", filepath.Join(dir, "ca.crt"),
		"--tls-auth-clients", "no",
	}})
	tlsURL := "rediss://:tls-secret@127.0.0.1:" + strconv.Itoa(tlsPort)

	// connect is the documented way to trust a private CA.
	connect := func(url string, roots *x509.CertPool) (rueidis.Client, error) {
		opt, err := rueidis.ParseURL(url)
		if err != nil {
			return nil, err
		}
		if opt.TLSConfig != nil {
			opt.TLSConfig.RootCAs = roots
		}
		return rueidis.NewClient(opt)
	}

	t.Run("private CA", func(t *testing.T) {
		c, err := connect(tlsURL, caPool)
		if err != nil {
			t.Fatalf("rediss:// with the server's CA: %v", err)
		}
		defer c.Close()
		for _, k := range reliabilityStores {
			t.Run(k.name, func(t *testing.T) {
				wl := k.workload(c, uniquePrefix(t), nil)
				res := runLoad(t, wl, loadOpts{workers: 4, ops: 50, d: 10 * time.Second}, nil)
				if res.nerrs > 0 {
					t.Errorf("%d of %d operations failed over TLS: %v", res.nerrs, res.ops, res.errs)
				}
				wl.Check(t, c)
			})
		}
	})

	t.Run("fails closed", func(t *testing.T) {
		if s, err := store.OpenClaims(tlsURL); err == nil {
			s.Close()
			t.Error("OpenClaims trusted a certificate from a private CA the system does not know")
		} else if !strings.Contains(err.Error(), "certificate") {
			t.Errorf("OpenClaims with an unknown CA: %v, want a certificate error", err)
		}
		if c, err := connect(tlsURL, otherPool); err == nil {
			c.Close()
			t.Error("a client trusting another CA connected")
		}
		if c, err := connect("rediss://:wrong@127.0.0.1:"+strconv.Itoa(tlsPort), caPool); err == nil {
			c.Close()
			t.Error("a wrong password connected over TLS")
		}
		if c, err := connect("redis://:tls-secret@127.0.0.1:"+strconv.Itoa(tlsPort), nil); err == nil {
			c.Close()
			t.Error("a clear-text client connected to the TLS port")
		}
		if c, err := connect(strings.Replace(srv.URL(), "redis://", "redis://:wrong@", 1), nil); err == nil {
			c.Close()
			t.Error("a wrong password connected in clear text")
		}
	})
}

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newTestCA creates a self-signed CA, writes it to dir/name.crt and returns
// it and a pool that trusts it.
func newTestCA(t *testing.T, dir, name string) (*testCA, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redisonce test " + name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".crt"), "CERTIFICATE", der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key}, pool
}

// issue writes a server certificate for ip signed by ca to dir/name.crt and
// its key to dir/name.key.
func (ca *testCA) issue(t *testing.T, dir, name string, ip net.IP) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: ip.String()},
		IPAddresses:  []net.IP{ip},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".crt"), "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".key"), "EC PRIVATE KEY", kder)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freeLoopbackPort returns a loopback port that was free a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
