package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisConfig is the Redis connection that redeq.Open makes, so that one
// file starts a service. Set exactly one of URL and Addrs:
//
//	url: rediss://app@redis.internal:6379/0     # one server (rediss: TLS)
//	addrs: [10.0.0.1:7000, 10.0.0.2:7000]         # a cluster's seed nodes
//	addrs: [10.0.0.5:26379] + master_name          # Sentinel
//
// A password is never part of the file: PasswordEnv names the environment
// variable that holds it.
type RedisConfig struct {
	// URL is one server, redis://[user@]host[:port][/db] or rediss:// for
	// TLS, or unix:///path/to/redis.sock; go-redis options may follow as
	// query parameters (?dial_timeout=3s&pool_size=20). With Cluster, or
	// with addr= parameters naming more seed nodes, it is a cluster (see
	// redis.ParseClusterURL).
	URL string `yaml:"url"`
	// Addrs are host:port addresses: one is a single server, several are a
	// cluster's seed nodes, and with MasterName they are Sentinels.
	Addrs []string `yaml:"addrs"`
	// Cluster makes a single address or URL a cluster seed, such as a
	// managed cluster's configuration endpoint. Defaults to false.
	Cluster bool `yaml:"cluster"`
	// MasterName is the Sentinel name of the master: Addrs are then the
	// Sentinels' addresses.
	MasterName string `yaml:"master_name"`
	// Username is the ACL user (with Addrs; a URL carries its own).
	Username string `yaml:"username"`
	// PasswordEnv names the environment variable holding the password,
	// read when the client is built. Unset means no password; naming a
	// variable that is not set is an error.
	PasswordEnv string `yaml:"password_env"`
	// DB is the database of a single server or Sentinel master, 0 or more
	// (with Addrs; a URL carries it in its path). Clusters have only 0.
	// Defaults to 0.
	DB int `yaml:"db"`
	// TLS secures the connection; any of its fields turns it on.
	TLS TLSConfig `yaml:"tls"`
}

// TLSConfig is how the Redis connection speaks TLS. It is on when any
// field is set, or when the URL's scheme is rediss.
type TLSConfig struct {
	// Enabled turns TLS on with the system's roots and no client
	// certificate, when no other field is needed.
	Enabled bool `yaml:"enabled"`
	// CAFile holds the PEM certificates that sign the server's; empty
	// means the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile hold the client's PEM certificate and key, for
	// servers that check clients (tls-auth-clients). Both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the server's certificate must carry; empty
	// means the host of the address dialled.
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any server certificate. For tests only:
	// it gives up protection against a man in the middle.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// On reports whether TLS is asked for.
func (t TLSConfig) On() bool { return t != TLSConfig{} }

// IsZero reports whether no connection is configured.
func (r RedisConfig) IsZero() bool { return reflect.ValueOf(r).IsZero() }

// isCluster reports whether r describes a Redis Cluster.
func (r RedisConfig) isCluster() bool {
	if r.Cluster || len(r.Addrs) > 1 && r.MasterName == "" {
		return true
	}
	if u, err := url.Parse(r.URL); r.URL != "" && err == nil {
		return u.Query().Has("addr")
	}
	return false
}

// Address describes where r connects, for messages: the URL without its
// password, or the addresses.
func (r RedisConfig) Address() string {
	if r.URL != "" {
		if u, err := url.Parse(r.URL); err == nil {
			return u.Redacted()
		}
		return "(unparsable url)"
	}
	s := strings.Join(r.Addrs, ",")
	if r.MasterName != "" {
		s = "master " + r.MasterName + " via sentinels " + s
	}
	return s
}

func urlHasPassword(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return false
	}
	_, ok := u.User.Password()
	return ok
}

// problems reports the invalid fields of r through bad. An empty r is
// valid: New takes a client built by the caller.
func (r RedisConfig) problems(bad func(field, format string, args ...any), name func(string) string) {
	if r.IsZero() {
		return
	}
	switch {
	case r.URL == "" && len(r.Addrs) == 0:
		bad("Redis.URL", "is empty, and so is %s: set one to say where Redis is", name("Redis.Addrs"))
	case r.URL != "" && len(r.Addrs) > 0:
		bad("Redis.Addrs", "is set together with %s: set one", name("Redis.URL"))
	case r.URL != "":
		r.urlProblems(bad, name)
	default:
		for i, a := range r.Addrs {
			if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
				bad(fmt.Sprintf("Redis.Addrs[%d]", i), "%q is not host:port", a)
			}
		}
	}
	if r.MasterName != "" && r.Cluster {
		bad("Redis.MasterName", "is set together with %s: Sentinel or cluster, not both", name("Redis.Cluster"))
	}
	if r.DB < 0 {
		bad("Redis.DB", "%d must not be negative", r.DB)
	} else if r.DB > 0 && r.isCluster() {
		bad("Redis.DB", "%d: a cluster has only database 0", r.DB)
	}
	if r.PasswordEnv != "" && strings.ContainsAny(r.PasswordEnv, "= \t\n\x00") {
		bad("Redis.PasswordEnv", "%q is not an environment variable name", r.PasswordEnv)
	}
	if (r.TLS.CertFile == "") != (r.TLS.KeyFile == "") {
		bad("Redis.TLS.CertFile", "and %s go together: set both or neither", name("Redis.TLS.KeyFile"))
	}
}

func (r RedisConfig) urlProblems(bad func(field, format string, args ...any), name func(string) string) {
	u, err := url.Parse(r.URL)
	if err != nil {
		// url.Parse's error quotes the URL, password included.
		bad("Redis.URL", "is not a URL")
		return
	}
	if r.isCluster() {
		_, err = redis.ParseClusterURL(r.URL)
	} else {
		_, err = redis.ParseURL(r.URL)
	}
	if err != nil {
		bad("Redis.URL", "%s: %v", u.Redacted(), err)
		return
	}
	if r.MasterName != "" {
		bad("Redis.MasterName", "needs %s (the Sentinels), not %s", name("Redis.Addrs"), name("Redis.URL"))
	}
	if r.Username != "" {
		bad("Redis.Username", "is set together with %s: put the user in the URL (redis://user@host)", name("Redis.URL"))
	}
	if r.DB != 0 {
		bad("Redis.DB", "is set together with %s: put the database in the URL's path (redis://host/%d)", name("Redis.URL"), r.DB)
	}
	if _, ok := u.User.Password(); ok && r.PasswordEnv != "" {
		bad("Redis.PasswordEnv", "is set and %s holds a password too: keep one", name("Redis.URL"))
	}
	if r.TLS.On() && u.Scheme != "rediss" {
		bad("Redis.TLS", "is set but %s uses %s://: use rediss://", name("Redis.URL"), u.Scheme)
	}
}

// NewClient returns a client for r: a cluster client for several Addrs or
// Cluster, a Sentinel-backed client with MasterName, a single-server
// client otherwise. It reads the password from the variable PasswordEnv
// names and the TLS files now. It connects lazily: the first command
// dials (redeq.Open pings at once). The caller closes the client.
func (r RedisConfig) NewClient() (redis.UniversalClient, error) {
	if r.IsZero() {
		return nil, fmt.Errorf("config: %s: neither url nor addrs is set", fieldKey("Redis"))
	}
	var errs []error
	r.problems(func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Key: fieldKey(field), Reason: fmt.Sprintf(format, args...), keyed: true})
	}, yamlKey)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	password, err := r.password()
	if err != nil {
		return nil, err
	}
	tlsCfg, err := r.TLS.Build()
	if err != nil {
		return nil, err
	}
	switch {
	case r.URL != "" && r.isCluster():
		o, err := redis.ParseClusterURL(r.URL)
		if err != nil {
			return nil, err
		}
		if password != "" {
			o.Password = password
		}
		o.TLSConfig = mergeTLS(o.TLSConfig, tlsCfg)
		return redis.NewClusterClient(o), nil
	case r.URL != "":
		o, err := redis.ParseURL(r.URL)
		if err != nil {
			return nil, err
		}
		if password != "" {
			o.Password = password
		}
		o.TLSConfig = mergeTLS(o.TLSConfig, tlsCfg)
		return redis.NewClient(o), nil
	default:
		return redis.NewUniversalClient(&redis.UniversalOptions{
			Addrs:         r.Addrs,
			IsClusterMode: r.Cluster,
			MasterName:    r.MasterName,
			Username:      r.Username,
			Password:      password,
			DB:            r.DB,
			TLSConfig:     tlsCfg,
		}), nil
	}
}

func (r RedisConfig) password() (string, error) {
	if r.PasswordEnv == "" {
		return "", nil
	}
	p, ok := os.LookupEnv(r.PasswordEnv)
	if !ok {
		return "", fmt.Errorf("config: %s: the variable %s is not set", fieldKey("Redis.PasswordEnv"), r.PasswordEnv)
	}
	return p, nil
}

// mergeTLS lays the file settings over what a rediss:// URL set (its
// server name and minimum version).
func mergeTLS(fromURL, files *tls.Config) *tls.Config {
	switch {
	case files == nil:
		return fromURL
	case fromURL == nil:
		return files
	}
	out := files.Clone()
	if out.ServerName == "" {
		out.ServerName = fromURL.ServerName
	}
	return out
}

// Build returns the tls.Config t describes, nil when TLS is off. It reads
// the CA and the client certificate from their files.
func (t TLSConfig) Build() (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, //nolint:gosec // the operator asked for it
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %w", fieldKey("Redis.TLS.CAFile"), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config: %s: %s holds no PEM certificate", fieldKey("Redis.TLS.CAFile"), t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		if t.CertFile == "" || t.KeyFile == "" {
			return nil, fmt.Errorf("config: %s and %s go together: set both or neither",
				fieldKey("Redis.TLS.CertFile"), fieldKey("Redis.TLS.KeyFile"))
		}
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("config: %s, %s: %w", fieldKey("Redis.TLS.CertFile"), fieldKey("Redis.TLS.KeyFile"), err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
