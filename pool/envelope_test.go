package pool_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/pool"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	cases := []pool.Header{
		{CreatedMs: 1764423531000},
		{CreatedMs: 1, Attempt: 3, Recoveries: 2, MaxRetries: -1, Intervals: []int64{1000, 60000}, Broadcast: true},
		{CreatedMs: 5, MaxRetries: 7},
	}
	for _, h := range cases {
		body := []byte("line one\nline two|with|bars\x00")
		got, gotBody, err := pool.Decode(pool.Encode(h, body))
		require.NoError(t, err)
		require.Equal(t, h, got)
		require.Equal(t, body, gotBody)
	}
	// A default job's header is short: the body dominates.
	env := pool.Encode(pool.Header{CreatedMs: 1764423531000}, make([]byte, 100))
	require.Equal(t, 123, len(env))
}

func TestDecodeRejectsCorrupt(t *testing.T) {
	for _, env := range []string{
		"", "no header", "2|1|0|0|||\nbody", "1|x|0|0|||\n", "1|1|0|0||\n", "1|1|-1|0|||\n",
		"1|1|0|0|-2||\n", "1|1|0|0||0|\n", "1|1|0|0||1,,2|\n", "1|1|0|0|||z\n",
	} {
		_, _, err := pool.Decode([]byte(env))
		require.ErrorIs(t, err, pool.ErrCorrupt, "%q", env)
	}
}

func TestJobOf(t *testing.T) {
	h := pool.Header{CreatedMs: 1000, Attempt: 2, Intervals: []int64{1500}}
	job, err := pool.JobOf("t", "id", pool.Encode(h, []byte("b")))
	require.NoError(t, err)
	require.Equal(t, 2, job.Attempt)
	require.Equal(t, []time.Duration{1500 * time.Millisecond}, job.RetryIntervals)
	require.Equal(t, time.UnixMilli(1000), job.CreatedAt)
	_, err = pool.JobOf("t", "id", []byte("junk"))
	require.ErrorIs(t, err, pool.ErrCorrupt)
}

func TestRounding(t *testing.T) {
	require.EqualValues(t, 2, pool.DurationMs(1001*time.Microsecond))
	require.EqualValues(t, 1, pool.DurationMs(time.Millisecond))
	require.EqualValues(t, 0, pool.DurationMs(0))
	require.EqualValues(t, 1001, pool.UnixMs(time.UnixMicro(1_000_001)))
	require.EqualValues(t, 1000, pool.UnixMs(time.UnixMicro(1_000_000)))
}

// FuzzDecode: no input makes the decoder panic, and what it accepts it
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("1|1764423531000|0|0|||\nbody"))
	f.Add([]byte("1|1|3|2|-1|1000,60000|b\n\x00"))
	f.Fuzz(func(t *testing.T, env []byte) {
		h, body, err := pool.Decode(env)
		if err != nil {
			return
		}
		again := pool.Encode(h, body)
		h2, body2, err := pool.Decode(again)
		require.NoError(t, err)
		require.Equal(t, h, h2)
		require.Equal(t, body, body2)
	})
}

// FuzzParseIntAgreesWithStrconv: the header's numbers are read as
// strconv.ParseInt reads them in base 10: the same values, the same
// inputs refused.
func FuzzParseIntAgreesWithStrconv(f *testing.F) {
	for _, s := range []string{"0", "7", "-1", "+3", "007", "", "-", "+", " 1", "1 ", "1e3", "0x10",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "99999999999999999999", "00000000000000000000", "12a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := strconv.ParseInt(s, 10, 64)
		got, ok := pool.ParseInt([]byte(s))
		require.Equal(t, err == nil, ok, "accepted %q", s)
		if ok {
			require.Equal(t, want, got, "value of %q", s)
		}
	})
}

// FuzzValidate: validation never panics, and what it accepts has a topic
// and id within bounds.
func FuzzValidate(f *testing.F) {
	f.Add("orders", "42", int64(time.Second), 3, 100)
	f.Add("a{b", "", int64(-1), -2, 0)
	f.Fuzz(func(t *testing.T, topic, id string, delay int64, retries, bodyLen int) {
		if bodyLen < 0 || bodyLen > 4096 {
			bodyLen = 0
		}
		job := &pool.Job{Topic: topic, ID: id, Delay: time.Duration(delay), MaxRetries: retries, Body: make([]byte, bodyLen)}
		if pool.Validate(job, 1024) == nil {
			require.NotEmpty(t, job.Topic)
			require.LessOrEqual(t, len(job.Topic), 200)
			require.LessOrEqual(t, len(job.ID), 200)
			require.GreaterOrEqual(t, job.Delay, time.Duration(0))
			require.LessOrEqual(t, len(job.Body), 1024)
		}
	})
}
