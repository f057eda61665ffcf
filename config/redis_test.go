package config_test

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
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
)

func TestRedisValidate(t *testing.T) {
	cases := []struct {
		name string
		r    config.RedisConfig
		want string // "" when valid
	}{
		{"empty: New takes a client", config.RedisConfig{}, ""},
		{"url", config.RedisConfig{URL: "redis://app@localhost:6379/2"}, ""},
		{"rediss with a CA", config.RedisConfig{URL: "rediss://localhost:6379", TLS: config.TLSConfig{CAFile: "ca.pem"}}, ""},
		{"cluster", config.RedisConfig{Addrs: []string{"a:7000", "b:7000"}}, ""},
		{"sentinel", config.RedisConfig{Addrs: []string{"a:26379"}, MasterName: "mymaster", DB: 1}, ""},
		{"both", config.RedisConfig{URL: "redis://a:1", Addrs: []string{"a:1"}},
			"config: Redis.Addrs is set together with Redis.URL: set one"},
		{"neither", config.RedisConfig{Username: "app"},
			"config: Redis.URL is empty, and so is Redis.Addrs: set one to say where Redis is"},
		{"bad address", config.RedisConfig{Addrs: []string{"a:1", "localhost"}}, `config: Redis.Addrs[1] "localhost" is not host:port`},
		{"bad scheme", config.RedisConfig{URL: "http://u:secret@a:1"}, "config: Redis.URL http://u:xxxxx@a:1: redis: invalid URL scheme: http"},
		{"sentinel by url", config.RedisConfig{URL: "redis://a:1", MasterName: "m"}, "config: Redis.MasterName needs Redis.Addrs"},
		{"user twice", config.RedisConfig{URL: "redis://a:1", Username: "app"}, "config: Redis.Username is set together with Redis.URL"},
		{"db in a cluster", config.RedisConfig{Addrs: []string{"a:1", "b:1"}, DB: 3}, "config: Redis.DB 3: a cluster has only database 0"},
		{"negative db", config.RedisConfig{Addrs: []string{"a:1"}, DB: -1}, "config: Redis.DB -1 must not be negative"},
		{"cert without key", config.RedisConfig{Addrs: []string{"a:1"}, TLS: config.TLSConfig{CertFile: "c.pem"}},
			"config: Redis.TLS.CertFile and Redis.TLS.KeyFile go together"},
		{"tls over redis://", config.RedisConfig{URL: "redis://a:1", TLS: config.TLSConfig{CAFile: "ca.pem"}},
			"config: Redis.TLS is set but Redis.URL uses redis://: use rediss://"},
		{"two passwords", config.RedisConfig{URL: "redis://u:p@a:1", PasswordEnv: "PW"}, "config: Redis.PasswordEnv is set and Redis.URL holds a password too"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			c.Redis = tc.r
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), "secret")
		})
	}
}

func TestLoadRedis(t *testing.T) {
	p := write(t, `
redis:
  addrs: [10.0.0.1:7000, 10.0.0.2:7000]
  username: app
  password_env: REDIS_PASSWORD
  tls: {ca_file: /etc/redis/ca.pem, server_name: redis.internal}
`)
	c, err := config.Load(p)
	require.NoError(t, err)
	require.Equal(t, config.RedisConfig{Addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000"}, Username: "app", PasswordEnv: "REDIS_PASSWORD",
		TLS: config.TLSConfig{CAFile: "/etc/redis/ca.pem", ServerName: "redis.internal"}}, c.Redis)

	_, err = config.Load(write(t, "redis:\n  url: redis://a:1\n  adrs: [b:1]\n"))
	require.ErrorContains(t, err, "adrs")
	_, err = config.Load(write(t, "redis:\n  url: redis://a:1\n  addrs: [b:1]\n"))
	require.ErrorContains(t, err, "redeq.yaml: redis.addrs: is set together with redis.url: set one")

	t.Setenv("REDEQ_REDIS_ADDRS", "h1:7000, h2:7000,h3:7000")
	t.Setenv("REDEQ_REDIS_TLS_SERVER_NAME", "other")
	c, err = config.Load(p)
	require.NoError(t, err)
	require.Equal(t, []string{"h1:7000", "h2:7000", "h3:7000"}, c.Redis.Addrs)
	require.Equal(t, "other", c.Redis.TLS.ServerName)

}

func TestLoadRedisEnvOnly(t *testing.T) {
	t.Setenv("REDEQ_REDIS_URL", "rediss://app:from-env@redis.internal:6380/1")
	t.Setenv("REDEQ_REDIS_TLS_CA_FILE", "/etc/ca.pem")
	c, err := config.Load("")
	require.NoError(t, err, "a password given through the environment is fine")
	require.Equal(t, "rediss://app:from-env@redis.internal:6380/1", c.Redis.URL)
	require.Equal(t, "/etc/ca.pem", c.Redis.TLS.CAFile)
	require.Equal(t, "rediss://app:xxxxx@redis.internal:6380/1", c.Redis.Address())
}

// TestLoadRefusesPasswordInFile: the file may be committed or shown; the
// password must come from the environment.
func TestLoadRefusesPasswordInFile(t *testing.T) {
	p := write(t, "redis:\n  url: redis://app:hunter2@localhost:6379\n")
	_, err := config.Load(p)
	require.ErrorContains(t, err, p+": redis.url: holds a password: keep it out of the file and name the variable that holds it in redis.password_env")
	require.NotContains(t, err.Error(), "hunter2")

	t.Setenv("REDEQ_REDIS_URL", "redis://app:from-env@localhost:6379")
	_, err = config.Load(p)
	require.NoError(t, err, "the environment overrides the file's url")
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func TestRedisNewClient(t *testing.T) {
	addr := closedAddr(t)
	single := func(t *testing.T, rdb redis.UniversalClient) *redis.Options {
		c, ok := rdb.(*redis.Client)
		require.True(t, ok, "got %T", rdb)
		return c.Options()
	}
	cluster := func(t *testing.T, rdb redis.UniversalClient) *redis.ClusterOptions {
		c, ok := rdb.(*redis.ClusterClient)
		require.True(t, ok, "got %T", rdb)
		return c.Options()
	}
	build := func(t *testing.T, r config.RedisConfig) redis.UniversalClient {
		rdb, err := r.NewClient()
		require.NoError(t, err)
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}

	t.Run("url", func(t *testing.T) {
		o := single(t, build(t, config.RedisConfig{URL: "redis://app@" + addr + "/3?dial_timeout=2s"}))
		require.Equal(t, addr, o.Addr)
		require.Equal(t, "app", o.Username)
		require.Equal(t, 3, o.DB)
		require.Equal(t, 2*time.Second, o.DialTimeout)
		require.Nil(t, o.TLSConfig)
	})
	t.Run("one address", func(t *testing.T) {
		o := single(t, build(t, config.RedisConfig{Addrs: []string{addr}, DB: 2, Username: "app"}))
		require.Equal(t, addr, o.Addr)
		require.Equal(t, 2, o.DB)
	})
	t.Run("cluster", func(t *testing.T) {
		o := cluster(t, build(t, config.RedisConfig{Addrs: []string{addr, "127.0.0.1:1"}}))
		require.Equal(t, []string{addr, "127.0.0.1:1"}, o.Addrs)
		cluster(t, build(t, config.RedisConfig{Addrs: []string{addr}, Cluster: true}))
		o = cluster(t, build(t, config.RedisConfig{URL: "redis://" + addr + "?addr=127.0.0.1:1"}))
		require.Equal(t, []string{addr, "127.0.0.1:1"}, o.Addrs)
	})
	t.Run("sentinel", func(t *testing.T) {
		o := single(t, build(t, config.RedisConfig{Addrs: []string{addr}, MasterName: "mymaster", DB: 1}))
		require.Equal(t, "FailoverClient", o.Addr, "go-redis's mark of a Sentinel-backed client")
		require.Equal(t, 1, o.DB)
	})
	t.Run("password from the environment", func(t *testing.T) {
		r := config.RedisConfig{URL: "redis://app@" + addr, PasswordEnv: "REDEQ_TEST_REDIS_PASSWORD"}
		_, err := r.NewClient()
		require.EqualError(t, err, "config: redis.password_env: the variable REDEQ_TEST_REDIS_PASSWORD is not set")
		t.Setenv("REDEQ_TEST_REDIS_PASSWORD", "s3cret")
		require.Equal(t, "s3cret", single(t, build(t, r)).Password)
		r = config.RedisConfig{Addrs: []string{addr, addr}, PasswordEnv: "REDEQ_TEST_REDIS_PASSWORD"}
		require.Equal(t, "s3cret", cluster(t, build(t, r)).Password)
	})
	t.Run("invalid", func(t *testing.T) {
		_, err := config.RedisConfig{}.NewClient()
		require.EqualError(t, err, "config: redis: neither url nor addrs is set")
		_, err = config.RedisConfig{URL: "redis://a:1", Addrs: []string{"b:1"}}.NewClient()
		require.EqualError(t, err, "config: redis.addrs: is set together with redis.url: set one")
	})
}

func TestTLSFromFiles(t *testing.T) {
	dir := t.TempDir()
	caFile, certFile, keyFile := writeCerts(t, dir)

	tc := config.TLSConfig{CAFile: caFile, CertFile: certFile, KeyFile: keyFile, ServerName: "redis.internal"}
	cfg, err := tc.Build()
	require.NoError(t, err)
	require.NotNil(t, cfg.RootCAs)
	require.Len(t, cfg.Certificates, 1)
	require.Equal(t, "redis.internal", cfg.ServerName)
	require.False(t, cfg.InsecureSkipVerify)

	off, err := config.TLSConfig{}.Build()
	require.NoError(t, err)
	require.Nil(t, off)
	on, err := config.TLSConfig{Enabled: true}.Build()
	require.NoError(t, err)
	require.NotNil(t, on, "enabled alone means the system's roots")
	require.Nil(t, on.RootCAs)

	// A rediss URL keeps its host as the server name under the files' roots.
	rdb, err := config.RedisConfig{URL: "rediss://localhost:6380", TLS: config.TLSConfig{CAFile: caFile}}.NewClient()
	require.NoError(t, err)
	defer rdb.Close()
	o := rdb.(*redis.Client).Options()
	require.Equal(t, "localhost", o.TLSConfig.ServerName)
	require.NotNil(t, o.TLSConfig.RootCAs)

	_, err = config.TLSConfig{CAFile: filepath.Join(dir, "missing.pem")}.Build()
	require.ErrorContains(t, err, "config: redis.tls.ca_file: open ")
	garbage := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("not a certificate"), 0o600))
	_, err = config.TLSConfig{CAFile: garbage}.Build()
	require.EqualError(t, err, "config: redis.tls.ca_file: "+garbage+" holds no PEM certificate")
	_, err = config.TLSConfig{CertFile: certFile, KeyFile: caFile}.Build()
	require.ErrorContains(t, err, "config: redis.tls.cert_file, redis.tls.key_file: ")
}

// writeCerts writes a CA and a client certificate signed by it, and
// returns their file names.
func writeCerts(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "app"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600))
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return caFile, certFile, keyFile
}
