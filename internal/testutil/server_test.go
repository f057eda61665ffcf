package testutil_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestStartServerNeverTakesAnotherProcesssServer: a server whose port
// another process's redis-server holds when it starts (another test binary
// took the port since it was found free) moves to another port, whether
// that other server wants a password or not; a server that wants the
// password it was given starts on its own port. Either way the server a
// test gets is the process it started.
func TestStartServerNeverTakesAnotherProcesssServer(t *testing.T) {
	ctx := context.Background()
	ownProcess := func(t *testing.T, s *testutil.Server, password string) {
		t.Helper()
		c := s.Client(&redis.Options{Password: password})
		info, err := c.Info(ctx, "server").Result()
		require.NoError(t, err)
		require.Contains(t, info, "process_id:"+strconv.Itoa(s.Pid())+"\r\n")
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"open", nil},
		{"password", []string{"--requirepass", "another-secret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := testutil.StartServer(t, tc.args...)
			picks := 0
			s := testutil.StartServerPicking(t, func(tb testing.TB) int {
				picks++
				if picks == 1 {
					return other.Port
				}
				return testutil.FreePort(tb)
			})
			require.Equal(t, 2, picks, "a second port was tried")
			require.NotEqual(t, other.Port, s.Port)
			ownProcess(t, s, "")
		})
	}
	t.Run("own password", func(t *testing.T) {
		s := testutil.StartServer(t, "--requirepass", "own-secret")
		ownProcess(t, s, "own-secret")
	})
}
