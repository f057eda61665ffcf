package ready

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// limitJobs seeds ready jobs of bucket k: id -> the value of header
// "tenant" ("" for none), in order.
func limitJobs(t *testing.T, c redis.UniversalClient, k keys.Bucket, jobs ...[2]string) {
	t.Helper()
	ctx := context.Background()
	for _, j := range jobs {
		job := &pool.Job{ID: j[0]}
		if j[1] != "" {
			job.Headers = map[string]string{"tenant": j[1]}
		}
		h := pool.Header{CreatedMs: 1}
		if len(job.Headers) > 0 {
			h.HeadersLen = len(pool.AppendHeaders(nil, job.Headers))
		}
		env := append(pool.AppendHeader(nil, h), pool.AppendHeaders(nil, job.Headers)...)
		require.NoError(t, c.HSet(ctx, k.Pool(), j[0], string(env)).Err())
		require.NoError(t, c.HSet(ctx, k.State(), j[0], "r").Err())
		require.NoError(t, c.RPush(ctx, k.Ready(), j[0]).Err())
	}
}

func ids(items []Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// partnerLease seeds, under a fresh prefix, a lease of job "held" counted
// per value P of header partner (its delivery still under way when live)
// and a ready job "a" of tenant x; it returns the prefix and the bucket.
func partnerLease(t *testing.T, c redis.UniversalClient, live bool) (string, keys.Bucket) {
	t.Helper()
	p := testutil.Prefix(t)
	k := keys.ForBucket(p, "t", 0)
	state := []string{keys.LimitKeyHeaderField + "=partner"}
	if live {
		state = append(state, "held=1@c")
	}
	testutil.Seed(t, c, testutil.ZSet(k.LimitRunning(), "1@c\nheld=1"),
		testutil.Hash(k.LimitKeyOf(), "1@c\nheld=P"),
		testutil.ZSet(k.LimitKeyRunning("P"), "1@c\nheld=1"),
		testutil.Hash(k.State(), state...))
	limitJobs(t, c, k, [2]string{"a", "x"})
	return p, k
}

// lease is the lease fetch.lua records for delivery it to consumer cid.
func lease(it Item, cid string) string { return it.Token + "@" + cid + "\n" + it.ID }

// TestFetchUnderLimits: fetch.lua with limits (limits.lua) takes no more
// jobs than the topic's slots and rate allow, records one lease per
// delivery, frees leases whose delivery no longer owns its job when it
// finds the limit reached, and per key value parks the jobs of a value at
// its limit so that the others are taken; a slot freed (here by
// release.lua) brings the parked jobs back, oldest first.
func TestFetchUnderLimits(t *testing.T) {
	ctx := context.Background()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			fetch := func(t *testing.T, prefix, spec string, want int) Batch {
				t.Helper()
				b, err := FetchLimited(ctx, c, prefix, "t", 0, "c", want, false, spec, true)
				require.NoError(t, err)
				return b
			}
			t.Run("TakesOnlyFreeSlots", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"a", ""}, [2]string{"b", ""}, [2]string{"c", ""})
				spec := Limits{MaxRunning: 2}.Spec()
				got := fetch(t, p, spec, 10)
				require.Equal(t, []string{"a", "b"}, ids(got.Items))
				leases, err := c.ZRange(ctx, k.LimitRunning(), 0, -1).Result()
				require.NoError(t, err)
				require.ElementsMatch(t, []string{lease(got.Items[0], "c"), lease(got.Items[1], "c")}, leases)
				// A rerun, as after a lost reply, takes nothing more: the
				// limit counts the deliveries the lost reply carried.
				again := fetch(t, p, spec, 10)
				require.Empty(t, again.Items)
				require.Equal(t, int64(1), c.LLen(ctx, k.Ready()).Val())
				// Releasing one (a lost reply given back) frees its slot.
				n, err := ReleaseMembers(ctx, c, p, "t", 0, "c", []string{got.Items[0].Member()})
				require.NoError(t, err)
				require.Equal(t, 1, n)
				require.Equal(t, []string{"a"}, ids(fetch(t, p, spec, 10).Items), "the freed slot, to the job given back first")
			})
			t.Run("FreesLeasesOfDeliveriesThatNoLongerOwnTheirJob", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				// Two leases of deliveries whose jobs were deleted, and one of
				// a job the same consumer fetched again since (token 9 now).
				testutil.Seed(t, c, testutil.ZSet(k.LimitRunning(), "1@c\ngone1=1", "2@c\ngone2=2", "3@c\nx=3"),
					testutil.Hash(k.State(), "x=9@c"))
				limitJobs(t, c, k, [2]string{"a", ""}, [2]string{"b", ""})
				got := fetch(t, p, Limits{MaxRunning: 3}.Spec(), 10)
				require.Equal(t, []string{"a", "b"}, ids(got.Items))
				require.Equal(t, int64(2), c.ZCard(ctx, k.LimitRunning()).Val())
			})
			t.Run("StaleLeaseOfAnotherHeaderHoldsNothing", func(t *testing.T) {
				// A lease counted per partner whose delivery is gone (its
				// job's state names no delivery, its in-flight member is
				// gone) does not hold a fetch per tenant back: the fetch
				// frees it, takes the job, and notes its own header.
				p, k := partnerLease(t, c, false)
				got := fetch(t, p, Limits{MaxRunning: 1, Key: "tenant"}.Spec(), 10)
				require.Equal(t, []string{"a"}, ids(got.Items))
				require.Equal(t, "tenant", c.HGet(ctx, k.State(), keys.LimitKeyHeaderField).Val())
				require.Equal(t, int64(1), c.ZCard(ctx, k.LimitRunning()).Val(), "its own lease alone")
			})
			t.Run("LiveLeaseOfAnotherHeaderHoldsTheFetch", func(t *testing.T) {
				// The same lease of a delivery still under way (its job's
				// state names it) holds the fetch per tenant back: it takes
				// nothing and tells the consumer to look again soon.
				p, k := partnerLease(t, c, true)
				got := fetch(t, p, Limits{MaxRunning: 1, Key: "tenant"}.Spec(), 10)
				require.Empty(t, got.Items)
				require.Positive(t, got.Wait, "%+v", got)
				require.Equal(t, int64(1), c.LLen(ctx, k.Ready()).Val(), "the job stays ready")
			})
			t.Run("RateTellsWhenItAllowsMore", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"a", ""}, [2]string{"b", ""}, [2]string{"c", ""})
				spec := Limits{Rate: 2, Per: time.Minute}.Spec()
				require.Equal(t, []string{"a", "b"}, ids(fetch(t, p, spec, 10).Items))
				held := fetch(t, p, spec, 10)
				require.Empty(t, held.Items)
				require.True(t, held.More)
				require.InDelta(t, float64(time.Minute), float64(held.Wait), float64(5*time.Second))
			})
			t.Run("ParksTheJobsOfAKeyAtItsLimit", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"h1", "hot"}, [2]string{"h2", "hot"}, [2]string{"h3", "hot"},
					[2]string{"o1", "x"}, [2]string{"n1", ""})
				spec := Limits{MaxRunning: 1, Key: "tenant"}.Spec()
				got := fetch(t, p, spec, 10)
				require.Equal(t, []string{"h1", "o1", "n1"}, ids(got.Items), "one of each value, jobs without the header as value \"\"")
				require.Equal(t, []string{"h2", "h3"}, c.LRange(ctx, k.LimitPark("hot"), 0, -1).Val())
				require.Equal(t, int64(0), c.LLen(ctx, k.Ready()).Val())
				require.Empty(t, fetch(t, p, spec, 10).Items, "parked jobs are not read again while their value is full")
				// Its slot freed, the hot value's next job comes back.
				_, err := ReleaseMembers(ctx, c, p, "t", 0, "c", []string{got.Items[0].Member()})
				require.NoError(t, err)
				next := fetch(t, p, spec, 10)
				// The parked job goes first (the value has one slot); the one
				// given back waits behind the value's other parked job.
				require.Equal(t, []string{"h2"}, ids(next.Items))
				require.Equal(t, []string{"h3", "h1"}, c.LRange(ctx, k.LimitPark("hot"), 0, -1).Val())
				_, err = ReleaseMembers(ctx, c, p, "t", 0, "c", []string{next.Items[0].Member()})
				require.NoError(t, err)
				require.Equal(t, []string{"h3"}, ids(fetch(t, p, spec, 10).Items))
				require.Equal(t, []string{"h1", "h2"}, c.LRange(ctx, k.LimitPark("hot"), 0, -1).Val())
			})
			t.Run("RateParkedKeyComesBackAtItsTime", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"h1", "hot"}, [2]string{"h2", "hot"}, [2]string{"o1", "x"})
				spec := Limits{Rate: 1, Per: time.Minute, Key: "tenant"}.Spec()
				got := fetch(t, p, spec, 10)
				require.Equal(t, []string{"h1", "o1"}, ids(got.Items))
				require.InDelta(t, float64(time.Minute), float64(got.Wait), float64(5*time.Second), "when the parked value may go")
				at := c.ZScore(ctx, k.LimitParked(), "hot").Val()
				require.Greater(t, at, float64(time.Now().Add(50*time.Second).UnixMilli()))
			})
			t.Run("ParkedBacklogIsReadInBoundedSteps", func(t *testing.T) {
				// 100,000 ids parked for one value: a fetch once a slot is
				// free gives back only what the value may run.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"h0", "hot"})
				pipe := c.Pipeline()
				for i := 1; i <= 100_000; i += 1000 {
					chunk := make([]any, 0, 1000)
					for j := i; j < i+1000; j++ {
						chunk = append(chunk, fmt.Sprint("h", j))
					}
					pipe.RPush(ctx, k.LimitPark("hot"), chunk...)
				}
				pipe.ZAdd(ctx, k.LimitParked(), redis.Z{Score: 0, Member: "hot"})
				_, err := pipe.Exec(ctx)
				require.NoError(t, err)
				got := fetch(t, p, Limits{MaxRunning: 2, Key: "tenant"}.Spec(), 256)
				// The fetch reads 2 + 256 parked entries, all stale (no job):
				// dropped, none given back. h0 waits behind the rest, and the
				// value stays due, for the next fetch to read on.
				require.Empty(t, ids(got.Items))
				require.Equal(t, int64(100_000-258+1), c.LLen(ctx, k.LimitPark("hot")).Val())
				require.Equal(t, "h0", c.LIndex(ctx, k.LimitPark("hot"), -1).Val())
				require.Equal(t, time.Millisecond, got.Wait, "the value is due: fetch again at once")
			})
			t.Run("SameConsumerTwiceHoldsTwoLeases", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"j", ""})
				spec := Limits{MaxRunning: 2}.Spec()
				first := fetch(t, p, spec, 1)
				require.Len(t, first.Items, 1)
				// The job comes back (the reaper took it back meanwhile) and
				// the same consumer takes it again: a delivery of its own.
				require.NoError(t, c.HSet(ctx, k.State(), "j", "r").Err())
				require.NoError(t, c.RPush(ctx, k.Ready(), "j").Err())
				second := fetch(t, p, spec, 1)
				require.Len(t, second.Items, 1)
				require.NotEqual(t, first.Items[0].Token, second.Items[0].Token)
				leases := c.ZRange(ctx, k.LimitRunning(), 0, -1).Val()
				require.ElementsMatch(t, []string{lease(first.Items[0], "c"), lease(second.Items[0], "c")}, leases)
				// Releasing the stale one frees its lease only.
				_, err := ReleaseMembers(ctx, c, p, "t", 0, "c", []string{first.Items[0].Member()})
				require.NoError(t, err)
				require.Equal(t, []string{lease(second.Items[0], "c")}, c.ZRange(ctx, k.LimitRunning(), 0, -1).Val())
				require.Equal(t, second.Items[0].Token+"@c", c.HGet(ctx, k.State(), "j").Val())
			})
			t.Run("AnErrorWritesNothing", func(t *testing.T) {
				// The limits are read before any write: a spec the script
				// cannot read fails the fetch and leaves every key as it was.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"a", "x"})
				testutil.Seed(t, c, testutil.ZSet(k.LimitRunning(), "1@d\nz=1"))
				before := testutil.DumpUnder(t, c, p)
				_, err := FetchLimited(ctx, c, p, "t", 0, "c", 10, false, "bad", true)
				require.ErrorContains(t, err, "bad limit spec")
				require.Equal(t, before, testutil.DumpUnder(t, c, p))
			})
			t.Run("UnparkPushesBeforeItTrims", func(t *testing.T) {
				// The parked ids go to the ready list before they leave
				// their park list: a fetch that fails at the push (here the
				// ready key holds a STRING) loses none of them, and a fetch
				// that succeeds next gives them back.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"h1", "hot"}, [2]string{"h2", "hot"}, [2]string{"h3", "hot"})
				spec := Limits{MaxRunning: 5, Key: "tenant"}.Spec()
				require.NoError(t, c.Del(ctx, k.Ready()).Err())
				require.NoError(t, c.RPush(ctx, k.LimitPark("hot"), "h1", "h2", "h3").Err())
				require.NoError(t, c.ZAdd(ctx, k.LimitParked(), redis.Z{Score: 0, Member: "hot"}).Err())
				require.NoError(t, c.Set(ctx, k.Ready(), "not a list", 0).Err())
				_, err := FetchLimited(ctx, c, p, "t", 0, "c", 10, false, spec, true)
				require.ErrorContains(t, err, "WRONGTYPE")
				require.Equal(t, []string{"h1", "h2", "h3"}, c.LRange(ctx, k.LimitPark("hot"), 0, -1).Val(), "no parked id is lost")
				require.NoError(t, c.Del(ctx, k.Ready()).Err())
				got := fetch(t, p, spec, 10)
				require.Equal(t, []string{"h1", "h2", "h3"}, ids(got.Items))
				require.Zero(t, c.Exists(ctx, k.LimitPark("hot"), k.LimitParked()).Val())
			})
			t.Run("FetchWithoutLimitsGivesParkedIdsBack", func(t *testing.T) {
				// Ids parked under a limit per key value wait for no slot a
				// fetch without limits guards: it gives them back, oldest
				// first, and takes them; the stale ones are dropped.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"h0", "hot"}, [2]string{"h1", "hot"}, [2]string{"h2", "hot"})
				spec := Limits{MaxRunning: 1, Key: "tenant"}.Spec()
				require.Equal(t, []string{"h0"}, ids(fetch(t, p, spec, 10).Items))
				require.Equal(t, []string{"h1", "h2"}, c.LRange(ctx, k.LimitPark("hot"), 0, -1).Val())
				require.NoError(t, c.RPush(ctx, k.LimitPark("hot"), "gone").Err())
				require.Equal(t, []string{"h1", "h2"}, ids(fetch(t, p, "", 10).Items))
				require.Zero(t, c.Exists(ctx, k.LimitPark("hot"), k.LimitParked()).Val())
				require.False(t, c.HExists(ctx, k.State(), keys.LimitParkedField).Val(), "the flag is cleared")
			})
			t.Run("GiveBackSweepsEveryValue", func(t *testing.T) {
				// 20 values with parked ids, under a limit per tenant: a
				// fetch per another header gives them back 8 values a
				// fetch, in byte order, and the sweep ends: then the flag
				// names its limits. It takes nothing while deliveries
				// counted per tenant hold their slots (their values are
				// not of its header); once they end, every id is read
				// under its limits.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				var jobs [][2]string
				for i := range 20 {
					jobs = append(jobs, [2]string{fmt.Sprintf("a%02d", i), fmt.Sprintf("v%02d", i)}, [2]string{fmt.Sprintf("b%02d", i), fmt.Sprintf("v%02d", i)})
				}
				limitJobs(t, c, k, jobs...)
				old := Limits{MaxRunning: 1, Key: "tenant"}.Spec()
				held := fetch(t, p, old, 256).Items
				require.Len(t, held, 20, "one per tenant")
				require.Equal(t, int64(20), c.ZCard(ctx, k.LimitParked()).Val())
				require.Equal(t, old, c.HGet(ctx, k.State(), keys.LimitParkedField).Val())
				spec := Limits{MaxRunning: 3, Key: "partner"}.Spec()
				var got []string
				for range 5 {
					b := fetch(t, p, spec, 256)
					got = append(got, ids(b.Items)...)
					if c.HGet(ctx, k.State(), keys.LimitParkedField).Val() == spec {
						break
					}
				}
				require.Equal(t, spec, c.HGet(ctx, k.State(), keys.LimitParkedField).Val(), "the sweep ended")
				require.Empty(t, got, "the per-tenant deliveries hold their slots")
				require.Equal(t, int64(20), c.LLen(ctx, k.Ready()).Val(), "every parked id is back")
				members := make([]string, len(held))
				for i, it := range held {
					members[i] = it.Member()
				}
				n, err := ReleaseMembers(ctx, c, p, "t", 0, "c", members)
				require.NoError(t, err)
				require.Equal(t, 20, n)
				// The jobs have no partner header: value "", 3 at once.
				require.Len(t, fetch(t, p, spec, 256).Items, 3)
				require.Zero(t, c.LLen(ctx, k.Ready()).Val())
				require.Equal(t, int64(37), c.LLen(ctx, k.LimitPark("")).Val(), "the others wait for a slot of value \"\"")
				require.Equal(t, []string{""}, c.ZRange(ctx, k.LimitParked(), 0, -1).Val())
			})
			t.Run("WithoutLimitsNoLimitKey", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"a", "x"})
				got := fetch(t, p, "", 10)
				require.Len(t, got.Items, 1)
				for _, key := range testutil.Keys(t, c, p) {
					require.False(t, strings.Contains(key, ":limit:"), key)
				}
			})
		})
	}
}

// rateLog is the start log of bucket k's topic-wide rate (limits.lua's
// p..'rlog').
func rateLog(k keys.Bucket) string { return k.LimitPrefix() + "rlog" }

// TestRateLogHoldsOneEntryPerFetch: fetch.lua under a rate records the
// starts of a fetch as one entry of the start log, whatever the number of
// jobs it took, and counts every start of the period: a rate of 7 a
// minute takes 5 and then 2 jobs, then none until the oldest entry leaves
// the period. Its four script questions: an error halfway records no
// start; a rerun after a lost reply counts the first run's starts; a log
// of 100,000 expired entries goes at once, and one of 100,000 whose last
// few are within the period is trimmed to them exactly, in at most 64
// LINDEX steps (a bad entry is an error, and takes no job); the same job
// taken twice is two starts. The previous version's ZSET of one member per start: its
// members are counted, the mirrored ones once; until the namespace is at
// the start log's format ("mirror") every start is written there too,
// whether or not it holds starts, so that a client of that version counts
// them; after it ("log") nothing is, and fetches of both modes side by
// side (the switch window) count each start once; a bad mode is an error
// that writes nothing.
func TestRateLogHoldsOneEntryPerFetch(t *testing.T) {
	ctx := context.Background()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			fetch := func(t *testing.T, prefix, spec string, want int) Batch {
				t.Helper()
				b, err := FetchLimited(ctx, c, prefix, "t", 0, "c", want, false, spec, true)
				require.NoError(t, err)
				return b
			}
			jobs := func(n int) [][2]string {
				var out [][2]string
				for i := range n {
					out = append(out, [2]string{fmt.Sprint("j", i), ""})
				}
				return out
			}
			spec := Limits{Rate: 7, Per: time.Minute}.Spec()
			t.Run("OneEntryPerFetch", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(10)...)
				require.Len(t, fetch(t, p, spec, 5).Items, 5)
				require.Len(t, fetch(t, p, spec, 5).Items, 2, "7 a minute")
				held := fetch(t, p, spec, 5)
				require.Empty(t, held.Items)
				require.InDelta(t, float64(time.Minute), float64(held.Wait), float64(5*time.Second))
				entries := c.LRange(ctx, rateLog(k), 0, -1).Val()
				require.Len(t, entries, 2)
				require.Regexp(t, `^\d+:0:5:0:0:\d+$`, entries[0])
				require.Regexp(t, `^\d+:5:2:0:0:\d+$`, entries[1])
				require.Zero(t, c.Exists(ctx, k.LimitPrefix()+"rate").Val(), "no member per start")
				// The log expires two periods after its first start, and
				// a start within the period leaves the expiry alone.
				exp := func(e string) string { return e[strings.LastIndex(e, ":")+1:] }
				require.Equal(t, exp(entries[0]), exp(entries[1]))
				ttl := c.PTTL(ctx, rateLog(k)).Val()
				require.Greater(t, ttl, 110*time.Second)
				require.LessOrEqual(t, ttl, 2*time.Minute)
			})
			t.Run("ExpiredEntriesLeave", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(10)...)
				now := time.Now().UnixMilli()
				// 6 starts long gone, 4 within the minute.
				require.NoError(t, c.RPush(ctx, rateLog(k), fmt.Sprintf("%d:0:6:0:0:%d", now-120_000, now), fmt.Sprintf("%d:6:4:0:0:%d", now-1000, now+119_000)).Err())
				require.Len(t, fetch(t, p, spec, 10).Items, 3)
				entries := c.LRange(ctx, rateLog(k), 0, -1).Val()
				require.Len(t, entries, 2)
				require.Regexp(t, fmt.Sprintf(`^\d+:10:3:0:0:%d$`, now+119_000), entries[1], "the expiry, over a period away, stays")
			})
			t.Run("AnErrorRecordsNoStart", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(3)...)
				require.NoError(t, c.RPush(ctx, rateLog(k), fmt.Sprintf("%d:0:1:0:0:%d", time.Now().UnixMilli(), time.Now().UnixMilli()+120_000)).Err())
				// The envelopes cannot be read: the fetch fails after the
				// rate was checked, and before it records anything.
				require.NoError(t, c.Del(ctx, k.Pool()).Err())
				require.NoError(t, c.Set(ctx, k.Pool(), "not a hash", 0).Err())
				before := testutil.DumpUnder(t, c, p)
				_, err := FetchLimited(ctx, c, p, "t", 0, "c", 3, false, spec, true)
				require.ErrorContains(t, err, "WRONGTYPE")
				require.Equal(t, before, testutil.DumpUnder(t, c, p))
			})
			t.Run("RerunCountsTheFirstRun", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(10)...)
				tight := Limits{Rate: 3, Per: time.Minute}.Spec()
				require.Len(t, fetch(t, p, tight, 2).Items, 2)
				// The same call again, as go-redis resends it after a lost
				// reply: the first run's two starts count.
				require.Len(t, fetch(t, p, tight, 2).Items, 1)
				require.Empty(t, fetch(t, p, tight, 2).Items)
			})
			t.Run("SameJobTwiceIsTwoStarts", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, [2]string{"j", ""}, [2]string{"other", ""})
				tight := Limits{Rate: 2, Per: time.Minute}.Spec()
				require.Len(t, fetch(t, p, tight, 1).Items, 1)
				// The job comes back (recovered) and the same consumer
				// takes it again: a start of its own.
				require.NoError(t, c.HSet(ctx, k.State(), "j", "r").Err())
				require.NoError(t, c.LPush(ctx, k.Ready(), "j").Err())
				require.Equal(t, []string{"j"}, ids(fetch(t, p, tight, 1).Items))
				require.Empty(t, fetch(t, p, tight, 1).Items, "two starts of two allowed")
			})
			longLog := func(t *testing.T, k keys.Bucket, n int, ms func(i int) int64) {
				t.Helper()
				pipe := c.Pipeline()
				for i := 0; i < n; i += 1000 {
					chunk := make([]any, 0, 1000)
					for j := i; j < min(n, i+1000); j++ {
						chunk = append(chunk, fmt.Sprintf("%d:%d:1:0:0:%d", ms(j), j, time.Now().UnixMilli()+120_000))
					}
					pipe.RPush(ctx, rateLog(k), chunk...)
				}
				_, err := pipe.Exec(ctx)
				require.NoError(t, err)
			}
			t.Run("LogOfExpiredEntriesGoesAtOnce", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(10)...)
				old := time.Now().UnixMilli() - 120_000
				longLog(t, k, 100_000, func(int) int64 { return old })
				// The newest entry is expired: so is the whole log, which
				// goes; none of it is counted.
				require.Len(t, fetch(t, p, Limits{Rate: 10, Per: time.Minute}.Spec(), 10).Items, 10)
				require.Equal(t, int64(1), c.LLen(ctx, rateLog(k)).Val(), "one entry: this fetch's")
				require.Regexp(t, `^\d+:0:10:0:0:\d+$`, c.LIndex(ctx, rateLog(k), 0).Val())
			})
			t.Run("LongLogIsTrimmedExactly", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(10)...)
				old, now := time.Now().UnixMilli()-120_000, time.Now().UnixMilli()
				// 99,990 expired entries, then 10 within the minute: the
				// first within it is found by halving, and only the 10
				// are counted.
				longLog(t, k, 100_000, func(i int) int64 {
					if i >= 99_990 {
						return now
					}
					return old
				})
				require.Len(t, fetch(t, p, Limits{Rate: 13, Per: time.Minute}.Spec(), 10).Items, 3)
				require.Equal(t, int64(11), c.LLen(ctx, rateLog(k)).Val())
				require.Regexp(t, `^\d+:99990:1:0:0:\d+$`, c.LIndex(ctx, rateLog(k), 0).Val())
				require.Regexp(t, `^\d+:100000:3:0:0:\d+$`, c.LIndex(ctx, rateLog(k), -1).Val())
				require.Empty(t, fetch(t, p, Limits{Rate: 13, Per: time.Minute}.Spec(), 10).Items)
			})
			t.Run("BadEntryIsAnError", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(3)...)
				old := time.Now().UnixMilli() - 120_000
				longLog(t, k, 1000, func(int) int64 { return old })
				require.NoError(t, c.RPush(ctx, rateLog(k), "garbage", fmt.Sprintf("%d:1000:1:0:0:%d", time.Now().UnixMilli(), time.Now().UnixMilli()+120_000)).Err())
				_, err := FetchLimited(ctx, c, p, "t", 0, "c", 3, false, spec, true)
				require.ErrorContains(t, err, "bad rate log entry garbage")
				require.Equal(t, int64(3), c.LLen(ctx, k.Ready()).Val(), "no job taken")
			})
			t.Run("ClockSteppedBackKeepsTheLogInOrder", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(3)...)
				ahead := time.Now().UnixMilli() + 5000
				require.NoError(t, c.RPush(ctx, rateLog(k), fmt.Sprintf("%d:0:1:0:0:%d", ahead, ahead+120_000)).Err())
				require.Len(t, fetch(t, p, spec, 1).Items, 1)
				// Written under a clock 5 s behind the newest entry: at its
				// time, so that the log stays in order.
				require.Regexp(t, fmt.Sprintf(`^%d:1:1:0:0:\d+$`, ahead), c.LIndex(ctx, rateLog(k), -1).Val())
			})
			fetchMode := func(t *testing.T, prefix, spec string, want int, startLog bool) Batch {
				t.Helper()
				b, err := FetchLimited(ctx, c, prefix, "t", 0, "c", want, false, spec, startLog)
				require.NoError(t, err)
				return b
			}
			t.Run("PreviousVersionBesideCountsEveryStart", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				old := k.LimitPrefix() + "rate"
				limitJobs(t, c, k, jobs(10)...)
				now := float64(time.Now().UnixMilli())
				// A client of the previous version started two jobs.
				require.NoError(t, c.ZAdd(ctx, old, redis.Z{Score: now, Member: "1@o\nx"}, redis.Z{Score: now, Member: "2@o\ny"}).Err())
				require.NoError(t, c.PExpire(ctx, old, time.Minute).Err())
				tight := Limits{Rate: 4, Per: time.Minute}.Spec()
				got := fetchMode(t, p, tight, 1, false)
				require.Len(t, got.Items, 1)
				// It counts this start: its ZSET holds it as it holds its own.
				require.ElementsMatch(t, []string{"1@o\nx", "2@o\ny", lease(got.Items[0], "c")}, c.ZRange(ctx, old, 0, -1).Val())
				require.Regexp(t, `^\d+:0:1:0:1:\d+$`, c.LIndex(ctx, rateLog(k), -1).Val())
				require.Len(t, fetchMode(t, p, tight, 5, false).Items, 1, "2 of theirs, 2 of ours")
				// Their starts leave the period; only mirrored ones are left
				// there: counted once, and the new starts still go there
				// (the namespace is not at the start log's format: a client
				// of the previous version may still run, and counts them).
				require.NoError(t, c.ZRem(ctx, old, "1@o\nx", "2@o\ny").Err())
				require.Len(t, fetchMode(t, p, tight, 5, false).Items, 2)
				require.Len(t, c.ZRange(ctx, old, 0, -1).Val(), 4)
				require.Regexp(t, `^\d+:2:2:2:2:\d+$`, c.LIndex(ctx, rateLog(k), -1).Val())
				require.Empty(t, fetchMode(t, p, tight, 5, false).Items)
			})
			t.Run("EmptyZSetIsWrittenUntilTheSwitch", func(t *testing.T) {
				// No start of the previous version's is in the period:
				// its ZSET gets this fetch's starts anyway, so that such a
				// client joining now counts them.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				old := k.LimitPrefix() + "rate"
				limitJobs(t, c, k, jobs(10)...)
				got := fetchMode(t, p, Limits{Rate: 4, Per: time.Minute}.Spec(), 3, false)
				require.Len(t, got.Items, 3)
				require.Len(t, c.ZRange(ctx, old, 0, -1).Val(), 3)
				ttl := c.PTTL(ctx, old).Val()
				require.Greater(t, ttl, 50*time.Second)
				require.LessOrEqual(t, ttl, time.Minute)
			})
			t.Run("SwitchWindowCountsOnce", func(t *testing.T) {
				// Clients pick the switch up at their next announcement:
				// fetches of both modes side by side count every start once.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				old := k.LimitPrefix() + "rate"
				limitJobs(t, c, k, jobs(10)...)
				tight := Limits{Rate: 6, Per: time.Minute}.Spec()
				require.Len(t, fetchMode(t, p, tight, 2, false).Items, 2)
				require.Len(t, fetchMode(t, p, tight, 2, true).Items, 2)
				require.Len(t, c.ZRange(ctx, old, 0, -1).Val(), 2, "the log mode writes nothing there")
				require.Len(t, fetchMode(t, p, tight, 5, false).Items, 2, "6 a minute, whatever the mode")
				require.Empty(t, fetchMode(t, p, tight, 5, true).Items)
				require.Empty(t, fetchMode(t, p, tight, 5, false).Items)
			})
			t.Run("LogModeStillReadsTheZSet", func(t *testing.T) {
				// After the switch a ZSET left by the previous version (no
				// such client is alive, but its starts are in the period)
				// is still counted, and nothing is written there.
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				old := k.LimitPrefix() + "rate"
				limitJobs(t, c, k, jobs(10)...)
				now := float64(time.Now().UnixMilli())
				require.NoError(t, c.ZAdd(ctx, old, redis.Z{Score: now, Member: "1@o\nx"}, redis.Z{Score: now, Member: "2@o\ny"}).Err())
				require.NoError(t, c.PExpire(ctx, old, time.Minute).Err())
				require.Len(t, fetchMode(t, p, Limits{Rate: 4, Per: time.Minute}.Spec(), 5, true).Items, 2)
				require.Len(t, c.ZRange(ctx, old, 0, -1).Val(), 2)
				require.Regexp(t, `^\d+:0:2:0:0:\d+$`, c.LIndex(ctx, rateLog(k), -1).Val())
			})
			t.Run("BadModeIsAnError", func(t *testing.T) {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				limitJobs(t, c, k, jobs(1)...)
				before := testutil.DumpUnder(t, c, p)
				err := fetchScript.Run(ctx, c, []string{k.Ready(), k.InFlight("c"), k.Pool(), k.State(), k.Errors(), k.Due(), k.LimitPrefix()},
					1, "c", Quarantine, "0", 0, spec, "both").Err()
				require.ErrorContains(t, err, "bad start log mode both")
				require.Equal(t, before, testutil.DumpUnder(t, c, p))
			})
		})
	}
}

// A fetch asked for more ids than it may take (256), or for no whole
// number of them, fails before it reads or writes anything, with limits
// of every kind or none: every list it reads and unpacks is bounded by
// that number.
func TestFetchRefusesMoreThanItMayTake(t *testing.T) {
	ctx := context.Background()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			for _, spec := range []string{"", Limits{MaxRunning: 2}.Spec(), Limits{Rate: 2, Per: time.Minute}.Spec(), Limits{MaxRunning: 1, Key: "tenant"}.Spec()} {
				p := testutil.Prefix(t)
				k := keys.ForBucket(p, "t", 0)
				var seed [][2]string
				for i := range 300 {
					seed = append(seed, [2]string{fmt.Sprint("j", i), fmt.Sprint("t", i%3)})
				}
				limitJobs(t, c, k, seed...)
				before := testutil.DumpUnder(t, c, p)
				for _, asked := range []any{257, 100000, -1, "1.5", "x"} {
					err := fetchScript.Run(ctx, c, []string{k.Ready(), k.InFlight("c"), k.Pool(), k.State(), k.Errors(), k.Due(), k.LimitPrefix()},
						asked, "c", Quarantine, "0", 0, spec, "log").Err()
					require.ErrorContains(t, err, "want a whole number from 0 to 256", "limits %q, %v ids asked", spec, asked)
					require.Equal(t, before, testutil.DumpUnder(t, c, p), "limits %q, %v ids asked: nothing written", spec, asked)
				}
			}
		})
	}
}
