package config_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
)

func TestDurabilityDefaultsOff(t *testing.T) {
	c := config.Default()
	require.Zero(t, c.WaitReplicas, "writes do not wait for replicas unless asked")
	require.Equal(t, time.Second, c.WaitTimeout)
}

func TestDurabilityValidate(t *testing.T) {
	cases := []struct {
		mod   func(*config.Config)
		field string
		want  string
	}{
		{func(c *config.Config) { c.WaitReplicas = -1 }, "WaitReplicas", "WaitReplicas -1 is out of range 0..16 (0 is off)"},
		{func(c *config.Config) { c.WaitReplicas = 17 }, "WaitReplicas", "WaitReplicas 17 is out of range"},
		{func(c *config.Config) { c.WaitTimeout = -time.Second }, "WaitTimeout", "WaitTimeout -1s must be positive"},
		{func(c *config.Config) { c.WaitTimeout = 2 * time.Minute }, "WaitTimeout", "WaitTimeout 2m0s is above the maximum 1m0s"},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mod(&c)
		err := c.Validate()
		require.ErrorContains(t, err, tc.want)
		var fe *config.FieldError
		require.True(t, errors.As(err, &fe))
		require.Equal(t, tc.field, fe.Field)
	}
	c := config.Default()
	c.WaitReplicas, c.WaitTimeout = 2, 250*time.Millisecond
	require.NoError(t, c.Validate())
}

func TestDurabilityLoad(t *testing.T) {
	c, err := config.Load(write(t, "wait_replicas: 1\nwait_timeout: 500ms\n"))
	require.NoError(t, err)
	require.Equal(t, 1, c.WaitReplicas)
	require.Equal(t, 500*time.Millisecond, c.WaitTimeout)
	_, err = config.Load(write(t, "wait_replicas: 99\n"))
	require.ErrorContains(t, err, "wait_replicas: 99 is out of range")

	t.Setenv("REDEQ_WAIT_REPLICAS", "2")
	c, err = config.Load("")
	require.NoError(t, err)
	require.Equal(t, 2, c.WaitReplicas)
}
