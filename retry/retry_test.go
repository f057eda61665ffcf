package retry_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/retry"
)

func TestPolicy(t *testing.T) {
	defs := []time.Duration{time.Second, time.Minute}
	p := retry.For(0, nil, 3, defs)
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: time.Minute, 3: time.Minute} {
		d, ok := p.Next(attempt)
		require.True(t, ok)
		require.Equal(t, want, d, "attempt %d", attempt)
	}
	_, ok := p.Next(4)
	require.False(t, ok, "three retries, then give up")

	own := retry.For(5, []time.Duration{time.Hour}, 3, defs)
	d, ok := own.Next(5)
	require.True(t, ok)
	require.Equal(t, time.Hour, d)

	_, ok = retry.For(-1, nil, 3, defs).Next(1)
	require.False(t, ok, "-1 never retries")
}

func TestSkip(t *testing.T) {
	cause := errors.New("bad input")
	err := retry.Skip(cause)
	require.ErrorIs(t, err, retry.ErrSkipRetry)
	require.ErrorIs(t, err, cause)
	require.ErrorIs(t, retry.Skip(nil), retry.ErrSkipRetry)
}
