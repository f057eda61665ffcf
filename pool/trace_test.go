package pool_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/pool"
)

// A trace reads as its failures, newest first, each with its time; an
// entry stored before failures carried a time is one failure at an
// unknown time; a malformed tail is dropped, never misread; at most
// MaxFailures are read; an error may hold any byte, the separators too.
func TestParseTrace(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	require.Nil(t, pool.ParseTrace(""))
	require.Equal(t, []pool.Failure{{Error: "old style"}}, pool.ParseTrace("old style"))
	require.Equal(t, []pool.Failure{{At: at(5), Error: "a,b:\x1fc"}, {At: at(3), Error: ""}},
		pool.ParseTrace("\x1f5,6:a,b:\x1fc\x1f3,0:"))
	require.Equal(t, []pool.Failure{{At: at(5), Error: "boom"}}, pool.ParseTrace("\x1f5,4:boom\x1f3,99:short"))
	require.Equal(t, []pool.Failure{{At: at(5), Error: "boom"}}, pool.ParseTrace("\x1f5,4:boom\x1fx,1:e"))
	require.Equal(t, pool.MaxFailures, len(pool.ParseTrace(strings.Repeat("\x1f1,1:e", 20))))
	require.Equal(t, "boom", pool.LastErrorOf("\x1f5,4:boom\x1f3,1:e"))
	require.Equal(t, "", pool.LastErrorOf(""))
}

// JobOfHead reads a job's fields from its envelope's header line alone:
// those JobOf gives, but no body and no headers.
func TestJobOfHead(t *testing.T) {
	env := pool.Encode(pool.Header{CreatedMs: 7, Attempt: 2, MaxRetries: 4, Intervals: []int64{60000}, HeadersLen: 0}, []byte("body"))
	full, err := pool.JobOf("t", "j", env)
	require.NoError(t, err)
	line := env[:strings.IndexByte(string(env), '\n')+1]
	head, err := pool.JobOfHead("t", "j", line)
	require.NoError(t, err)
	require.Empty(t, head.Body)
	full.Body = head.Body
	require.Equal(t, full, head)
	_, err = pool.JobOfHead("t", "j", []byte("2|x\n"))
	require.ErrorIs(t, err, pool.ErrCorrupt)
}
