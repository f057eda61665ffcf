package redeq_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// env is what one test needs: a backend, a client over it, its settings.
type env struct {
	be  testutil.Backend
	rdb redis.UniversalClient
	cfg config.Config
	c   *redeq.Client
}

// eachReal is each on the real servers only.
func eachReal(t *testing.T, f func(t *testing.T, e *env)) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			f(t, setup(t, be, testutil.Config(t)))
		})
	}
}

// each runs f once per backend, each with a fresh prefix and client.
func each(t *testing.T, f func(t *testing.T, e *env)) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			f(t, setup(t, be, testutil.Config(t)))
		})
	}
}

// eachBeside is each with the backends' runs side by side (t.Parallel),
// for a test that waits seconds on the clock per backend and shares
// nothing with the other backends' runs but the deployment's server.
func eachBeside(t *testing.T, f func(t *testing.T, e *env)) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, be, testutil.Config(t)))
		})
	}
}

// eachRealBeside is eachReal with the backends' runs side by side (see
// eachBeside).
func eachRealBeside(t *testing.T, f func(t *testing.T, e *env)) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, be, testutil.Config(t)))
		})
	}
}

// setup returns a client over be with cfg, shut down at the end of the test.
func setup(t *testing.T, be testutil.Backend, cfg config.Config) *env {
	t.Helper()
	rdb := be.New(t)
	c, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return &env{be: be, rdb: rdb, cfg: c.Config(), c: c}
}

// another returns a second client (its own connection) over the same
// deployment and prefix, standing for another service instance.
func (e *env) another(t *testing.T, mod func(*config.Config)) *redeq.Client {
	t.Helper()
	cfg := e.cfg
	if mod != nil {
		mod(&cfg)
	}
	c, err := redeq.New(e.be.New(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}

// hooked is another client with e's config whose connection runs hooks.
func (e *env) hooked(t *testing.T, hooks ...redis.Hook) *redeq.Client {
	t.Helper()
	rdb := e.be.New(t)
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	c, err := redeq.New(rdb, e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}
