package ready

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed fetch.lua
	fetchSource string
	fetchScript = script.New(fetchSource)
	//go:embed fetch_older.lua
	fetchOlderSource string
	fetchOlderScript = script.New(fetchOlderSource)
	//go:embed release.lua
	releaseSource string
	releaseScript = script.New(releaseSource)
)

// MaxFetch bounds the ids one fetch takes.
const MaxFetch = 256

// tokens numbers the deliveries this process fetches: each fetch reserves
// as many numbers as it may take. A delivery's token is unique to its
// consumer (consumer ids are random and live in one process), and stays so
// when Redis loses its data: a counter kept in Redis would start again
// from zero after a restart without persistence or a failover that lost
// its last writes, and a stale delivery's outcome would then act on a new
// delivery with the same token.
var tokens atomic.Uint64

// releaseChunk bounds the members one release script call handles.
const releaseChunk = 500

// Item is a fetched job: its id, the token of this delivery, and its
// stored envelope.
type Item struct {
	ID       string
	Token    string
	Envelope string
	// LastError is the error of the job's last failed delivery, if any.
	LastError string
	// Late is how long after its due time the fetch took it (Redis
	// clock), or -1 when unknown: the job reached the ready list other
	// than by the mover (crash recovery, a lost fetch reply).
	Late time.Duration
}

// Member is the in-flight set member of the delivery.
func (it Item) Member() string { return Member(it.Token, it.ID) }

// Member is the in-flight set member of delivery token of id.
func Member(token, id string) string { return token + ":" + id }

// Quarantine is the number of recoveries from which a job is fetched
// alone, and only by a consumer running nothing else: a job that was in
// flight each time its consumers died, twice, may be what kills them, and
// running it alone keeps the jobs beside it from being counted with it.
const Quarantine = config.MinMaxRecoveries

// Fetch atomically moves at most max ids from the ready list of bucket n of
// topic into the in-flight set of consumer cid, and returns them with
// their delivery tokens and envelopes. An empty result means the list was
// empty (or held only stale entries). A job stays in flight until its
// outcome is settled, the consumer rolls it back at shutdown, or the reaper
// recovers it after a crash; each of those acts only for the delivery whose
// token the job's state names. No two deliveries to one consumer share a
// token, even after Redis lost its data (see tokens).
//
// idle says the consumer runs nothing: only then does it get a
// quarantined job (see Quarantine), alone. stopped reports that the fetch
// stopped at a quarantined job it could not take.
func Fetch(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, max int, idle bool) (items []Item, stopped bool, err error) {
	b, err := FetchBatch(ctx, c, prefix, topic, n, cid, max, idle)
	return b.Items, b.Stopped, err
}

// Batch is what one fetch took.
type Batch struct {
	Items []Item
	// Stopped reports that the fetch stopped at a quarantined job it
	// could not take.
	Stopped bool
	// More reports that the ready list may hold more: the fetch stopped,
	// or read as many entries as it could take (some may have been stale:
	// deleted jobs leave their ids in the list until a fetch drops them).
	More bool
	// Wait, when not 0, is when a rate limit allows the next job: the
	// bucket holds jobs that wait for it (FetchLimited).
	Wait time.Duration
}

// FetchBatch is Fetch, telling also whether the ready list may hold more.
func FetchBatch(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, limit int, idle bool) (Batch, error) {
	return fetchBatch(ctx, c, prefix, topic, n, cid, limit, idle, false, "", false)
}

// FetchLimited is FetchBatch under the global limits spec (Limits.Spec;
// "" for none): it takes no more jobs than they allow, sets aside the jobs
// of a key value at its limit, and records a lease per delivery, which the
// delivery's outcome, rollback, recovery or release frees. startLog says
// the namespace is at keys.FormatStartLog: a rate's starts go to its start
// log only; false writes them to the previous version's ZSET of starts
// too, which its clients count. Either reads both.
func FetchLimited(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, limit int, idle bool, spec string, startLog bool) (Batch, error) {
	return fetchBatch(ctx, c, prefix, topic, n, cid, limit, idle, false, spec, startLog)
}

// FetchOlderFormat is FetchBatch as a client of the version before this
// one runs it, reading only the older format of the job state (it drops
// an entry of the current one as stale) and writing the lateness history
// itself. Only tests of a rolling upgrade run it.
func FetchOlderFormat(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, limit int, idle bool) (Batch, error) {
	return fetchBatch(ctx, c, prefix, topic, n, cid, limit, idle, true, "", false)
}

func fetchBatch(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, limit int, idle, older bool, spec string, startLog bool) (Batch, error) {
	k := keys.ForBucket(prefix, topic, n)
	flag := "0"
	if idle {
		flag = "1"
	}
	want := min(limit, MaxFetch)
	reserve := uint64(max(want, 0))
	base := tokens.Add(reserve) - reserve
	sc, ks := fetchScript, []string{k.Ready(), k.InFlight(cid), k.Pool(), k.State(), k.Errors(), k.Due()}
	args := []any{want, cid, Quarantine, flag, base}
	if older {
		sc, ks = fetchOlderScript, append(ks, k.HistoryPrefix())
	} else {
		mode := "mirror"
		if startLog {
			mode = "log"
		}
		ks, args = append(ks, k.LimitPrefix()), append(args, spec, mode)
	}
	v, err := sc.Run(ctx, c, ks, args...).Result()
	if err != nil {
		return Batch{}, fmt.Errorf("fetch %s: %w", keys.Address(topic, n), err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r)%5 != 1 {
		return Batch{}, fmt.Errorf("fetch %s: bad reply %v", keys.Address(topic, n), v)
	}
	first, _ := rdb.Int(r[0])
	r = r[1:]
	items := make([]Item, len(r)/5)
	for i := range items {
		items[i].ID, _ = rdb.Str(r[5*i])
		items[i].Token, _ = rdb.Str(r[5*i+1])
		items[i].Envelope, _ = rdb.Str(r[5*i+2])
		if v, ok := rdb.Str(r[5*i+3]); ok {
			items[i].LastError = pool.LastErrorOf(v)
		}
		items[i].Late = -1
		if ms, err := rdb.Int(r[5*i+4]); err == nil {
			items[i].Late = time.Duration(ms) * time.Millisecond
		}
	}
	b := Batch{Items: items, Stopped: first == 1, More: first >= 1}
	if first < 0 {
		b.More, b.Wait = true, time.Duration(-1-first)*time.Millisecond+time.Millisecond
	}
	return b, nil
}

// ReleaseMembers returns to the head of the ready list of bucket n the
// deliveries members (at most releaseChunk) of consumer cid's in-flight
// set, those still in it and still this consumer's; it returns how many
// ids it gave back.
func ReleaseMembers(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, members []string) (int, error) {
	if len(members) == 0 {
		return 0, nil
	}
	if len(members) > releaseChunk {
		return 0, fmt.Errorf("release %s: %d members, at most %d", keys.Address(topic, n), len(members), releaseChunk)
	}
	k := keys.ForBucket(prefix, topic, n)
	args := make([]any, 0, 3+len(members))
	args = append(args, keys.ReadyChannel(prefix), keys.Address(topic, n), cid)
	for _, m := range members {
		args = append(args, m)
	}
	got, err := releaseScript.Run(ctx, c, []string{k.InFlight(cid), k.Ready(), k.State(), k.LimitPrefix(), k.Due()}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", keys.Address(topic, n), err)
	}
	return got, nil
}

// Release returns to the head of the ready list of bucket n every delivery
// in consumer cid's in-flight set for which held reports false: deliveries
// taken by a fetch whose reply never arrived. It reads the set in pages and
// returns how many ids it gave back. The caller must not fetch from the
// bucket meanwhile; deliveries it settles meanwhile are left alone, since a
// settled member is no longer in the set.
//
// A page starts at a rank, and a held delivery settled meanwhile (a
// handler Shutdown kept concludes during the rollback) moves every later
// member up a rank: the next page then misses as many deliveries. So a
// pass that read fewer members than the set had when it began reads the
// set again; a pass that read them all gave back every one not held.
// (ZSCAN would promise as much in one pass on Redis, but not on every
// server that speaks its protocol.)
func Release(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, held func(member string) bool) (int, error) {
	k := keys.ForBucket(prefix, topic, n)
	total := 0
	for {
		had, err := c.ZCard(ctx, k.InFlight(cid)).Result()
		if err != nil {
			return total, fmt.Errorf("release %s: %w", keys.Address(topic, n), err)
		}
		read, got, err := releasePass(ctx, c, prefix, topic, n, cid, held)
		total += got
		if err != nil || read >= had {
			return total, err
		}
	}
}

// releasePass is one pass of Release over the set, by rank; it returns how
// many members it read and how many ids it gave back.
func releasePass(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, held func(member string) bool) (read int64, total int, err error) {
	k := keys.ForBucket(prefix, topic, n)
	var start int64
	for {
		members, err := c.ZRange(ctx, k.InFlight(cid), start, start+releaseChunk-1).Result()
		if err != nil {
			return read, total, fmt.Errorf("release %s: %w", keys.Address(topic, n), err)
		}
		read += int64(len(members))
		var give []string
		for _, m := range members {
			if !held(m) && strings.Contains(m, ":") {
				give = append(give, m)
			}
		}
		released := len(give)
		got, err := ReleaseMembers(ctx, c, prefix, topic, n, cid, give)
		total += got
		if err != nil {
			return read, total, err
		}
		if len(members) < releaseChunk {
			return read, total, nil
		}
		// The members released left the set; the rest moved up by as many.
		start += int64(len(members) - released)
	}
}
