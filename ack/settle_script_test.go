package ack

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// settle.lua applies an outcome only for the delivery this consumer holds
// and the job's state names: ack removes the job and the last error it had,
// rejoin and failure put it back in its bucket due at now+delay (capped at
// the year 9999), a failure with its new header and error, a park stamps it
// into unack, a death into dead with its reason, trimming the dead set to
// its bound with the trimmed jobs' envelopes and reasons; a stale token (the
// same consumer fetched the job again) and a delivery the reaper took are
// dropped, writing only the removal of the member this consumer held. A
// rerun finds the member gone: it answers 0 and writes nothing more.
// A failure's error is stored with its time (the Redis clock). With
// retention on, an ack keeps the job's record (when, by whom, its trace,
// its envelope) in the done set until now+retention, trimming expired
// records and those past the cap, oldest first, and a failure keeps the
// job's nine earlier failures after it.
func TestSettleScript(t *testing.T) {
	var base int64 // the server's clock when a case is seeded, unix ms
	type ks func(k keys.Bucket, stamp string) []testutil.Entry
	held := func(k keys.Bucket, es ...testutil.Entry) []testutil.Entry {
		return append(es, testutil.ZSet(k.InFlight("c"), "7:j=1"), testutil.Hash(k.State(), "j=7@c"))
	}
	cases := []struct {
		name    string
		seed    func(k keys.Bucket) []testutil.Entry
		outcome []any // id, token, op, delay, header, reason, last error (lateness: unknown)
		reply   int64
		stamped string // the ZSET the job is stamped into, if any: unack, dead, errors (its trace) or done
		want    ks
		keep    []any // retention ms and cap; nil for none
	}{
		{"AckFreesTheDeliverysSlots", func(k keys.Bucket) []testutil.Entry {
			// A lease in the topic's and in its key value's running sets,
			// beside another delivery's.
			lp := k.LimitPrefix()
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.LimitRunning(), "7@c\nj=1", "8@d\nk=2"),
				testutil.Hash(lp+"keyof", "7@c\nj=hot", "8@d\nk=hot"), testutil.ZSet(k.LimitKeyRunning("hot"), "7@c\nj=1", "8@d\nk=2"))
		}, []any{"j", "7", "a", 0, "", "", ""}, 1, "", func(k keys.Bucket, _ string) []testutil.Entry {
			lp := k.LimitPrefix()
			return []testutil.Entry{testutil.ZSet(k.LimitRunning(), "8@d\nk=2"), testutil.Hash(lp+"keyof", "8@d\nk=hot"),
				testutil.ZSet(k.LimitKeyRunning("hot"), "8@d\nk=2")}
		}, nil},
		{"StaleDeliveryFreesItsSlotToo", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.InFlight("c"), "6:j=1"), testutil.Hash(k.State(), "j=7@c"),
				testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.LimitRunning(), "6@c\nj=1", "7@c\nj=2")}
		}, []any{"j", "6", "a", 0, "", "", ""}, 0, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.State(), "j=7@c"), testutil.Hash(k.Pool(), "j=h\nb"),
				testutil.ZSet(k.LimitRunning(), "7@c\nj=2")}
		}, nil},
		{"AckRemovesTheJobAndItsLastError", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb", "k=F"), testutil.Hash(k.Errors(), "j=e"))
		}, []any{"j", "7", "a", 0, "", "", "-"}, 1, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "k=F")}
		}, nil},
		{"RejoinIsDueAtTheCap", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"))
		}, []any{"j", "7", "r", maxDue, "", "", ""}, 1, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.Scheduled(), "j="+maxDue)}
		}, nil},
		{"FailureKeepsItsHeaderAndError", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"))
		}, []any{"j", "7", "f", maxDue, "H\n", "", "boom"}, 1, "errors", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=H\nb"), testutil.ZSet(k.Scheduled(), "j="+maxDue),
				testutil.Hash(k.Errors(), "j=\x1f"+stamp+"@c,4:boom")}
		}, nil},
		{"FailureKeepsItsEarlierFailures", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.Hash(k.Errors(), "j=\x1f5@d,3:old"))
		}, []any{"j", "7", "f", maxDue, "", "", "boom"}, 1, "errors", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.Scheduled(), "j="+maxDue),
				testutil.Hash(k.Errors(), "j=\x1f"+stamp+"@c,4:boom\x1f5@d,3:old")}
		}, nil},
		{"FailureKeepsNineEarlierWithoutRetention", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.Hash(k.Errors(), "j="+traceOf(10)))
		}, []any{"j", "7", "f", maxDue, "", "", "boom"}, 1, "errors", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.Scheduled(), "j="+maxDue),
				testutil.Hash(k.Errors(), "j=\x1f"+stamp+"@c,4:boom"+strings.TrimSuffix(traceOf(10), "\x1f1,2:e1"))}
		}, nil},
		{"FailureWithRetentionKeepsNineEarlier", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.Hash(k.Errors(), "j="+traceOf(10)))
		}, []any{"j", "7", "f", maxDue, "", "", "boom"}, 1, "errors", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.Scheduled(), "j="+maxDue),
				testutil.Hash(k.Errors(), "j=\x1f"+stamp+"@c,4:boom"+strings.TrimSuffix(traceOf(10), "\x1f1,2:e1"))}
		}, []any{60000, 10}},
		{"AckWithRetentionKeepsItsRecord", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.Hash(k.Errors(), "j=\x1f5,1:e"))
		}, []any{"j", "7", "a", 0, "", "", "-"}, 1, "done", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.Done(), "j="+plus(stamp, 60000)),
				testutil.Hash(k.DoneJobs(), "j="+stamp+"|1|6\nc\x1f5,1:eh\nb")}
		}, []any{60000, 10}},
		{"RetentionTrimsExpiredThenOldestPastItsCap", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.Done(), "gone=1", "soon="+plus(fmt.Sprint(base), 1000)),
				testutil.Hash(k.DoneJobs(), "gone=G", "soon=S"))
		}, []any{"j", "7", "a", 0, "", "", ""}, 1, "done", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.Done(), "j="+plus(stamp, 3600000)),
				testutil.Hash(k.DoneJobs(), "j="+stamp+"|1|0\nch\nb")}
		}, []any{3600000, 1}},
		{"ParkStampsUnAck", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"))
		}, []any{"j", "7", "u", 0, "", "", ""}, 1, "unack", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.UnAck(), "j="+stamp)}
		}, nil},
		{"DeathTrimsTheDeadSet", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb", "old=O"), testutil.ZSet(k.Dead(), "old=1"),
				testutil.Hash(k.Reasons(), "old=x"), testutil.Hash(k.Errors(), "old=y"))
		}, []any{"j", "7", "d", 0, "", "why", ""}, 1, "dead", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.Dead(), "j="+stamp),
				testutil.Hash(k.Reasons(), "j=why")}
		}, nil},
		{"StaleTokenOfTheSameConsumerIsDropped", func(k keys.Bucket) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.InFlight("c"), "6:j=0"))
		}, []any{"j", "6", "a", 0, "", "", ""}, 0, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return held(k, testutil.Hash(k.Pool(), "j=h\nb"))
		}, nil},
		{"DeliveryTheReaperTookIsDropped", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.Hash(k.State(), "j=8@d")}
		}, []any{"j", "7", "a", 0, "", "", ""}, 0, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=h\nb"), testutil.Hash(k.State(), "j=8@d")}
		}, nil},
	}
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			serverMs := func() int64 {
				tm, err := c.Time(ctx).Result()
				require.NoError(t, err)
				return tm.UnixMilli()
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got, want := testutil.Prefix(t), testutil.Prefix(t)
					k, kw := keys.ForBucket(got, "t", 0), keys.ForBucket(want, "t", 0)
					// History counters go under a third prefix, same slot:
					// their key names the minute.
					hist := keys.ForBucket(testutil.Prefix(t), "t", 0).HistoryPrefix()
					base = serverMs()
					testutil.Seed(t, c, tc.seed(k)...)
					run := func() []any {
						keep := tc.keep
						if keep == nil {
							keep = []any{0, 1}
						}
						args := append([]any{keys.WakeChannel(got), "t#0", 1, "c"}, keep...)
						args = append(append(append(args, 0), tc.outcome...), "")
						v, err := settleScript.Run(ctx, c, settleKeys(k, hist), args...).Slice()
						require.NoError(t, err)
						return v
					}
					before := serverMs()
					require.Equal(t, []any{tc.reply}, run())
					after := serverMs() + 1
					stamp := ""
					if tc.stamped != "" {
						key := k.UnAck()
						switch tc.stamped {
						case "dead":
							key = k.Dead()
						case "done":
							key = k.Done()
						}
						var s float64
						if tc.stamped == "errors" {
							v, err := c.HGet(ctx, k.Errors(), "j").Result()
							require.NoError(t, err)
							fs := pool.ParseTrace(v)
							require.NotEmpty(t, fs, v)
							s = float64(fs[0].At.UnixMilli())
						} else {
							var err error
							s, err = c.ZScore(ctx, key, "j").Result()
							require.NoError(t, err)
							if tc.stamped == "done" {
								s -= float64(tc.keep[0].(int))
							}
						}
						require.True(t, int64(s) >= before && int64(s) <= after, "stamp %v outside [%d, %d]", s, before, after)
						stamp = fmt.Sprint(int64(s))
					}
					testutil.Seed(t, c, tc.want(kw, stamp)...)
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got))
					require.Equal(t, []any{int64(0)}, run(), "rerun after a lost reply")
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got), "rerun after a lost reply")
				})
			}
		})
	}
}

// settle.lua counts, in the bucket's history key of this minute, the
// outcomes it applies and the failures among them, and each delivery's
// lateness (passed on by its consumer from the fetch) in the minute the
// delivery was fetched, its in-flight member's score; a delivery with no
// known lateness or one already settled is not counted, a dropped outcome
// counts its lateness but no outcome, and every key it creates expires.
// An ack reads no envelope: one whose job left the pool still clears its
// delivery.
func TestSettleRecordsHistory(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			if be.Name == "miniredis" {
				t.Skip("miniredis has no BITFIELD: settle records no history there (TestSettleScript runs on it)")
			}
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			tm, err := c.Time(ctx).Result()
			require.NoError(t, err)
			now := tm.UnixMilli()
			if now%60000 > 55000 {
				time.Sleep(time.Duration(60000-now%60000+10) * time.Millisecond) // all in one minute
				tm, err = c.Time(ctx).Result()
				require.NoError(t, err)
				now = tm.UnixMilli()
			}
			earlier := now - 120000 // fetched two minutes ago
			testutil.Seed(t, c,
				testutil.Hash(k.Pool(), "a=1|1|0|0||||\nb", "f=1|1|0|0||||\nb"),
				testutil.ZSet(k.InFlight("c"), fmt.Sprintf("1:a=%d", now), fmt.Sprintf("2:f=%d", earlier),
					fmt.Sprintf("3:g=%d", now), fmt.Sprintf("4:x=%d", now)),
				testutil.Hash(k.State(), "a=1@c", "f=2@c", "g=3@c", "x=9@d"))
			// Three plain acks in three values each, then two outcomes in
			// eight (an ack among them): the replies come in that order.
			args := []any{keys.WakeChannel(prefix), "t#0", 10, "c", 0, 1, 3,
				"a", "1", 3000, // 3 s late: the 2..5 s counter, this minute
				"g", "3", "", // not in the pool, lateness unknown
				"x", "4", 1, // the reaper gave it to d: dropped
				"f", "2", "f", 60000, "1|1|1|0||||\n", "", "boom", 120000, // over every bound, two minutes ago
				"y", "5", "a", 0, "", "", "", 1, // settled before: not counted
			}
			v, err := settleScript.Run(ctx, c, settleKeys(k, k.HistoryPrefix()), args...).Slice()
			require.NoError(t, err)
			require.Equal(t, []any{int64(1), int64(1), int64(0), int64(1), int64(0)}, v)
			require.Zero(t, c.Exists(ctx, k.InFlight("c")).Val(), "every member of this consumer left")
			require.Equal(t, map[string]string{"x": "9@d"}, c.HGetAll(ctx, k.State()).Val())

			read := func(minute int64) [keys.HistoryFields]int64 {
				var got [keys.HistoryFields]int64
				v, err := c.Get(ctx, k.History(minute)).Result()
				require.NoError(t, err, "minute %d written", minute)
				for i := range got {
					if len(v) >= 4*(i+1) {
						got[i] = int64(binary.BigEndian.Uint32([]byte(v[4*i:])))
					}
				}
				ttl := c.TTL(ctx, k.History(minute)).Val()
				require.Greater(t, ttl, 80*time.Minute)
				require.LessOrEqual(t, ttl, time.Duration(keys.HistoryTTLSeconds)*time.Second)
				return got
			}
			cur, old := read(now/60000), read(earlier/60000)
			require.EqualValues(t, 3, cur[keys.HistProcessed], "applied now: a, f and g")
			require.EqualValues(t, 1, cur[keys.HistFailed])
			require.Equal(t, int64(5000), keys.HistLateBoundsMs[11])
			require.EqualValues(t, 1, cur[keys.HistLate+11], "a: 3 s late, over 2 s, at most 5 s (%v)", cur)
			require.EqualValues(t, 1, cur[keys.HistLate], "x: 1 ms late, counted though dropped (%v)", cur)
			var late int64
			for i := keys.HistLate; i < keys.HistoryFields; i++ {
				late += cur[i]
			}
			require.EqualValues(t, 2, late, "this minute: a and x")
			require.Zero(t, old[keys.HistProcessed], "outcomes count when applied, lateness when fetched")
			require.EqualValues(t, 1, old[keys.HistoryFields-1], "f: 2 min late, over every bound, two minutes ago (%v)", old)
		})
	}
}

// traceOf is a trace of n failures, newest first, at times n..1 ms.
func traceOf(n int) string {
	var b strings.Builder
	for i := n; i >= 1; i-- {
		fmt.Fprintf(&b, "\x1f%d,2:e%d", i, i%10)
	}
	return b.String()
}

// plus is the decimal ms, plus d.
func plus(ms string, d int64) string {
	n, _ := strconv.ParseInt(ms, 10, 64)
	return strconv.FormatInt(n+d, 10)
}

// TestSettleTrimsBoundedRecords: an ack with retention trims at most 512
// expired records a call, however many there are, so a bucket whose done
// set grew large while idle costs each settle a bounded amount; the
// records it keeps are the ones trimmed last.
func TestSettleTrimsBoundedRecords(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			k := keys.ForBucket(testutil.Prefix(t), "t", 0)
			old := make([]string, 0, 600)
			recs := make([]string, 0, 600)
			for i := range 600 {
				old = append(old, fmt.Sprintf("o%03d=%d", i, i+1))
				recs = append(recs, fmt.Sprintf("o%03d=R", i))
			}
			testutil.Seed(t, c, testutil.ZSet(k.Done(), old...), testutil.Hash(k.DoneJobs(), recs...),
				testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.InFlight("c"), "7:j=1"), testutil.Hash(k.State(), "j=7@c"))
			v, err := settleScript.Run(ctx, c, settleKeys(k, k.HistoryPrefix()),
				keys.WakeChannel("x"), "t#0", 1, "c", 60000, 10000, 0, "j", "7", "a", 0, "", "", "", "").Slice()
			require.NoError(t, err)
			require.Equal(t, []any{int64(1)}, v)
			left, err := c.ZRange(ctx, k.Done(), 0, -1).Result()
			require.NoError(t, err)
			require.Len(t, left, 600-512+1)
			require.Equal(t, "o512", left[0], "the lowest expiry first")
			require.Equal(t, "j", left[len(left)-1])
			require.EqualValues(t, 600-512+1, c.HLen(ctx, k.DoneJobs()).Val())
			require.Greater(t, c.PTTL(ctx, k.Done()).Val(), time.Duration(0), "the set expires when idle")
		})
	}
}

// Settle sends plain acks (acks of jobs with no last error stored) in
// fewer arguments than the other outcomes, and still answers each outcome
// in the order given: a plain ack and an outcome of another kind each
// apply for the delivery that owns its job and only for it.
func TestSettleAnswersMixedOutcomesInTheirOrder(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			testutil.Seed(t, c,
				testutil.Hash(k.Pool(), "p=1|1|0|0||||\nb", "q=1|1|0|0||||\nb", "r=1|1|0|0||||\nb", "s=1|1|1|0||||\nb"),
				testutil.ZSet(k.InFlight("c"), "1:p=1", "2:q=1", "3:r=1", "4:s=1"),
				testutil.Hash(k.State(), "p=1@c", "q=2@c", "r=9@d", "s=4@c"),
				testutil.Hash(k.Errors(), "s=\x1f1@c,4:boom"))
			s := NewSettler(c, prefix, "c", 10)
			applied, err := s.Settle(ctx, "t", 0, []Outcome{
				{ID: "q", Token: "2", Op: OpRejoin, Delay: time.Hour, Late: -1}, // goes on: eight values
				{ID: "r", Token: "3", Op: OpAck},                                // plain, another consumer's now
				{ID: "p", Token: "1", Op: OpAck, Late: 5 * time.Millisecond},    // plain
				{ID: "s", Token: "4", Op: OpAck, HadError: true},                // clears its last error: eight values
			})
			require.NoError(t, err)
			require.Equal(t, []bool{true, false, true, true}, applied)
			pool, err := c.HKeys(ctx, k.Pool()).Result()
			require.NoError(t, err)
			require.ElementsMatch(t, []string{"q", "r"}, pool, "p and s acked, q rejoined, r left to its owner")
			require.Equal(t, []string{"q"}, c.ZRange(ctx, k.Scheduled(), 0, -1).Val())
			require.Equal(t, map[string]string{"r": "9@d"}, c.HGetAll(ctx, k.State()).Val())
			require.Zero(t, c.Exists(ctx, k.Errors()).Val(), "the ack of s cleared its last error")
			require.Zero(t, c.Exists(ctx, k.InFlight("c")).Val(), "every member of this consumer left")
		})
	}
}

// settle.lua refuses arguments that are not 7 values, then 3 per plain ack
// and 8 per other outcome (at most 256 outcomes), or a delay that is no
// whole number, before any write.
func TestSettleScriptRefusesMiscountedArguments(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			k := keys.ForBucket(testutil.Prefix(t), "t", 0)
			testutil.Seed(t, c, testutil.Hash(k.Pool(), "j=h\nb"), testutil.ZSet(k.InFlight("c"), "7:j=1"), testutil.Hash(k.State(), "j=7@c"))
			ks := settleKeys(k, k.HistoryPrefix())
			fixed := []any{keys.WakeChannel("x"), "t#0", 1, "c", 0, 1}
			many := []any{300}
			for i := range 300 {
				many = append(many, fmt.Sprintf("m%d", i), "1", "")
			}
			for name, rest := range map[string][]any{
				"no count":             {},
				"count not a number":   {"x", "j", "7", ""},
				"negative count":       {"-1", "j", "7", ""},
				"one plain ack short":  {1, "j", "7"},
				"plain ack and a tail": {1, "j", "7", "", "extra"},
				"outcome short":        {0, "j", "7", "a", 0, "", "", ""},
				"delay no number":      {1, "j", "7", "", "j", "7", "r", "soon", "", "", "", ""},
				"more than 256":        many,
			} {
				_, err := settleScript.Run(ctx, c, ks, append(append([]any{}, fixed...), rest...)...).Result()
				require.ErrorContains(t, err, "settle.lua", name)
			}
			require.Equal(t, map[string]string{"j": "7@c"}, c.HGetAll(ctx, k.State()).Val(), "nothing written")
			require.Equal(t, []string{"7:j"}, c.ZRange(ctx, k.InFlight("c"), 0, -1).Val())
			require.Equal(t, []string{"j"}, c.HKeys(ctx, k.Pool()).Val())
		})
	}
}

// settleKeys are settle.lua's keys for consumer c in bucket k, with the
// history prefix hist.
func settleKeys(k keys.Bucket, hist string) []string {
	return []string{k.Pool(), k.InFlight("c"), k.Scheduled(), k.UnAck(), k.Dead(),
		k.Reasons(), k.State(), k.Errors(), hist, k.Done(), k.DoneJobs(), k.LimitPrefix(), k.Ready()}
}
