package redeq_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// roundTrip adds a job through c, runs it with a listener and checks it
// was acked: the whole path works on this connection.
func roundTrip(t *testing.T, c *redeq.Client) {
	t.Helper()
	ctx := context.Background()
	l := newListener("secure", nil)
	startWith(t, c, l)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "secure", ID: "a", Body: []byte("x"), Delay: 20 * time.Millisecond}))
	testutil.Eventually(t, 5*time.Second, "job ran", func() bool { return l.count() == 1 && stats(t, c, "secure").Pool == 0 })
}

// TestACLUser: a user allowed only redeq's keys and channels under one
// prefix, and no dangerous commands, can run everything; a wrong password
// is an error from Add, not silence.
func TestACLUser(t *testing.T) {
	cfg := testutil.Config(t)
	srv := testutil.StartServer(t, "--requirepass", "admin-secret")
	admin := srv.Client(&redis.Options{Password: "admin-secret"})
	ctx := context.Background()
	rule := []any{"ACL", "SETUSER", "app", "on", ">app-secret", "resetkeys", "~" + cfg.Prefix + ":*",
		"resetchannels", "&" + cfg.Prefix + ":*", "-@all", "+@read", "+@write", "+@scripting", "+@pubsub",
		"+@connection", "+time", "-@dangerous"}
	require.NoError(t, admin.Do(ctx, rule...).Err())

	// requirepass: the default user with its password.
	def, err := redeq.New(srv.Client(&redis.Options{Password: "admin-secret"}), testutil.Config(t))
	require.NoError(t, err)
	require.NoError(t, def.Add(ctx, &redeq.Job{Topic: "secure", ID: "d", Delay: time.Hour}))
	got, err := def.Get(ctx, "secure", "d")
	require.NoError(t, err)
	require.Equal(t, "d", got.ID)
	anon, err := redeq.New(srv.Client(nil), testutil.Config(t))
	require.NoError(t, err)
	require.ErrorContains(t, anon.Add(ctx, &redeq.Job{Topic: "secure", ID: "e"}), "NOAUTH")

	c, err := redeq.New(srv.Client(&redis.Options{Username: "app", Password: "app-secret"}), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	roundTrip(t, c)

	bad, err := redeq.New(srv.Client(&redis.Options{Username: "app", Password: "wrong"}), cfg)
	require.NoError(t, err)
	err = bad.Add(ctx, &redeq.Job{Topic: "secure", ID: "b"})
	require.Error(t, err)
	require.NotErrorIs(t, err, redeq.ErrInvalidJob)

	other := cfg
	other.Prefix = "elsewhere"
	outside, err := redeq.New(srv.Client(&redis.Options{Username: "app", Password: "app-secret"}), other)
	require.NoError(t, err)
	require.ErrorContains(t, outside.Add(ctx, &redeq.Job{Topic: "secure", ID: "c"}), "NOPERM")
}

// TestTLS: a server that only speaks TLS, with certificates made here;
// redeq works through the client's TLS options.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, certFile, keyFile := makeCerts(t, dir)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o600))
	tlsPort := testutil.FreePort(t)
	srv := testutil.StartServer(t, "--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", certFile,
		"--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no")
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
	rdb := srv.Client(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}})
	c, err := redeq.New(rdb, testutil.Config(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	roundTrip(t, c)

	// Plain text to the TLS port fails loudly.
	plain, err := redeq.New(srv.Client(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second}), testutil.Config(t))
	require.NoError(t, err)
	require.Error(t, plain.Add(context.Background(), &redeq.Job{Topic: "secure", ID: "p"}))
}

// makeCerts writes a CA and a server certificate for localhost and
// 127.0.0.1, and returns the CA in PEM and the server's file names.
func makeCerts(t *testing.T, dir string) (caPEM []byte, certFile, keyFile string) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redeq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
}
