package redeq

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

// TopicInfo describes a topic, as Topics lists it. Stats counts its jobs.
type TopicInfo struct {
	Name    string
	Buckets int  // the topic's recorded bucket count
	Paused  bool // listeners do not fetch its jobs (see Pause)
	// Consumers is the number of consumers that heartbeat for the topic:
	// running listeners, and silent ones until the reaper forgets them.
	Consumers int64
}

// Topics lists every topic in use, sorted by name, in two round trips
// (the topic set, then one pipeline over the topics' meta and consumer
// sets): each topic added to or listened to and not retired since (see
// config.Config.RetireAfter). A retired topic, which holds no job and
// has no consumer, is listed again once a job is added to it or a
// listener of it starts.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	if ctx == nil {
		return nil, invalidArg("nil context")
	}
	names, err := c.rdb.SMembers(ctx, keys.Topics(c.cfg.Prefix)).Result()
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	names = slices.DeleteFunc(names, func(t string) bool { return pool.CheckTopic(t) != nil })
	slices.Sort(names)
	type row struct {
		meta      *redis.SliceCmd
		consumers *redis.IntCmd
	}
	rows := make([]row, len(names))
	pipe := c.rdb.Pipeline()
	for i, t := range names {
		k := keys.ForTopic(c.cfg.Prefix, t)
		rows[i] = row{pipe.HMGet(ctx, k.Meta(), "buckets", "paused"), pipe.ZCard(ctx, k.Consumers())}
	}
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list topics: %w", err)
		}
	}
	out := make([]TopicInfo, 0, len(names))
	for i, t := range names {
		n, paused, err := parseMeta(t, rows[i].meta.Val())
		if errors.Is(err, ErrUnknownTopic) {
			continue // in the set, meta not written: not usable yet
		}
		if err != nil {
			return nil, err
		}
		out = append(out, TopicInfo{Name: t, Buckets: n, Paused: paused, Consumers: rows[i].consumers.Val()})
	}
	return out, nil
}

// topicMeta reads the recorded bucket count of topic and its pause flag:
// ErrUnknownTopic when nobody ever used the topic.
func (c *Client) topicMeta(ctx context.Context, topic string) (buckets int, paused bool, err error) {
	v, err := c.rdb.HMGet(ctx, keys.ForTopic(c.cfg.Prefix, topic).Meta(), "buckets", "paused").Result()
	if err != nil {
		return 0, false, fmt.Errorf("read topic %q: %w", topic, err)
	}
	return parseMeta(topic, v)
}

func parseMeta(topic string, v []any) (buckets int, paused bool, err error) {
	s, ok := v[0].(string)
	if !ok {
		return 0, false, fmt.Errorf("topic %q: %w", topic, ErrUnknownTopic)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > config.MaxConcurrency || n&(n-1) != 0 {
		return 0, false, fmt.Errorf("read topic %q: bad bucket count %q", topic, s)
	}
	return n, v[1] != nil, nil
}

// ListOptions selects a page of List.
type ListOptions struct {
	// Limit is the most jobs a page holds, from 1 to MaxListLimit (1,000).
	// 0 means DefaultListLimit (100).
	Limit int
	// Cursor is the Next of the previous page, "" for the first page.
	Cursor string
	// DueOrder lists scheduled jobs in due order across the topic's
	// buckets (ties by id), not bucket by bucket: each page reads every
	// bucket, a share of the page from each (see List). Other states
	// ignore it. A cursor is good only for the order it was made for.
	DueOrder bool
	// NoBody lists the jobs without their Body and Headers: each page reads
	// only the header line of each job's stored envelope (attempt, times,
	// retry settings), with LastError and Reason, so a page of big jobs
	// costs Redis and the network no more than one of small ones.
	NoBody bool
}

// The bounds of List.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
	// listVisits bounds the bucket reads (one script each) of a page.
	listVisits = 16
)

// Page is one page of List.
type Page struct {
	Jobs []*Job
	// Next is the cursor of the following page; "" on the last page.
	Next string
}

// List returns a page of the jobs of topic in state, each with the fields
// Get gives it: its body, headers and retry settings, State, CreatedAt,
// Attempt, Recoveries and LastError (the error of its last failed
// delivery); RunAt is the due time of a scheduled or ready job (zero for a
// ready job back from a crashed consumer), when an un_acked or dead job was
// parked, and when the consumer holding an in-flight job fetched it (its
// running time is measured from it; Get leaves that one zero); Reason says
// why a dead job died; Consumer names the holder of an in-flight job, and
// ConsumerSilentSince that consumer's last heartbeat when it went silent
// (past its ConsumerTimeout, its jobs not yet recovered). StateDone lists
// the records of jobs acked on a topic with retention (WithRetention),
// bucket by bucket, oldest first, each with FinishedAt and the Consumer
// that acked it.
//
// Jobs come bucket by bucket (scheduled jobs with DueOrder: in due order
// across the buckets, each page reading a share of every bucket, at least
// 16 entries, and listing the jobs no unread entry can precede); within a
// bucket scheduled jobs by due time,
// ready jobs in the order consumers will take them (stale entries of the
// ready list skipped), then the ready jobs parked for a slot of their
// limit key's value (WithLimitKey), value by value in byte order, in-flight jobs by consumer id then fetch time,
// un_acked and dead jobs by when they were parked.
//
// Cost: a page reads the topic's meta (and, in flight, its consumer set),
// then runs at most 16 bucket scripts, each reading at most Limit+64
// entries, whatever the sizes. So a page may hold fewer than Limit jobs,
// even none, while Next is not "": stale entries skipped, or buckets left
// to read.
//
// Consistency: a page reflects each bucket as it was when that page read
// it. A job that stays where it is from the first page to the last is
// listed once, whatever else changes meanwhile: jobs added, taken by
// consumers, given back to the head of a ready list, retried, parked,
// deleted, or trimmed from the dead set. A job that moves between pages
// (to another state, or to a new due time) may show on no page or on two;
// one added or given back after the page that would have held it may show
// or not. (One exception: a job deleted or rescheduled while ready that
// came back to the ready list before consumers dropped its old entry has
// two entries there, and shows at both.)
//
// ErrUnknownTopic for a topic nobody used; ErrInvalidArgument for a bad
// state, limit, topic name or cursor (a cursor of another topic or state).
func (c *Client) List(ctx context.Context, topic string, state State, opt ListOptions) (Page, error) {
	if ctx == nil {
		return Page{}, invalidArg("nil context")
	}
	if err := config.CheckName("topic", topic); err != nil {
		return Page{}, invalidArg("list: %v", err)
	}
	switch state {
	case StateScheduled, StateReady, StateInFlight, StateUnAck, StateDead, StateDone:
	default:
		return Page{}, invalidArg("list: state %q is not one of %s, %s, %s, %s, %s, %s", state,
			StateScheduled, StateReady, StateInFlight, StateUnAck, StateDead, StateDone)
	}
	limit := opt.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	if limit < 0 || limit > MaxListLimit {
		return Page{}, invalidArg("list: Limit %d is out of range 1..%d", opt.Limit, MaxListLimit)
	}
	cur, err := decodeCursor(opt.Cursor, topic, state)
	if err != nil {
		return Page{}, err
	}
	n, _, err := c.topicMeta(ctx, topic)
	if err != nil {
		return Page{}, err
	}
	if cur.bucket >= n {
		return Page{}, invalidArg("list: cursor names bucket %d of %d", cur.bucket, n)
	}
	var consumers []string
	if state == StateInFlight {
		// One entry per running client: ordered by name, so that a page
		// can resume at a consumer whatever their heartbeats did.
		consumers, err = c.rdb.ZRange(ctx, keys.ForTopic(c.cfg.Prefix, topic).Consumers(), 0, -1).Result()
		if err != nil {
			return Page{}, fmt.Errorf("list %s of %s: %w", state, topic, err)
		}
		slices.Sort(consumers)
		i, found := slices.BinarySearch(consumers, cur.consumer)
		cur.pos.Set = i
		if !found {
			cur.pos.At, cur.pos.Member = "", "" // that consumer left: start at the next one
		}
	}
	if state == StateScheduled && (opt.DueOrder || cur.merged) {
		if !opt.DueOrder {
			return Page{}, invalidArg("list: cursor made for DueOrder")
		}
		return c.listByDue(ctx, topic, n, cur, limit, opt.NoBody)
	}
	if state == StateDone {
		return c.listDone(ctx, topic, n, cur, limit)
	}
	page, err := c.listBuckets(ctx, topic, state, n, cur, consumers, limit, opt.NoBody)
	if err == nil && state == StateInFlight {
		if err = c.markSilent(ctx, page.Jobs); err != nil {
			err = fmt.Errorf("list %s of %s: %w", state, topic, err)
		}
	}
	return page, err
}

// listDone is a page of a topic's done records, bucket by bucket, each in
// the order its records expire.
func (c *Client) listDone(ctx context.Context, topic string, n int, cur cursor, limit int) (Page, error) {
	var page Page
	b, pos := cur.bucket, cur.pos
	for visits := 0; b < n; visits++ {
		if len(page.Jobs) == limit || visits == listVisits {
			page.Next = cursor{bucket: b, pos: pos}.encode(topic, StateDone)
			break
		}
		jobs, next, done, err := c.store.DoneList(ctx, topic, b, pos, limit-len(page.Jobs))
		if err != nil {
			return Page{}, err
		}
		page.Jobs = append(page.Jobs, publicJobs(jobs)...)
		if done {
			b, pos = b+1, pool.Position{}
		} else {
			pos = next
		}
	}
	return page, nil
}

// listBuckets is a page of List in any state but done, bucket by bucket.
func (c *Client) listBuckets(ctx context.Context, topic string, state State, n int, cur cursor, consumers []string, limit int, heads bool) (Page, error) {
	var page Page
	b, pos := cur.bucket, cur.pos
	for visits := 0; b < n; visits++ {
		if len(page.Jobs) == limit || visits == listVisits {
			next := cursor{bucket: b, pos: pos}
			if state == StateInFlight && pos.Set < len(consumers) {
				next.consumer = consumers[pos.Set]
			}
			if state == StateReady && pos.Set == 1 {
				next.consumer = parkedMark
			}
			page.Next = next.encode(topic, state)
			break
		}
		jobs, next, done, err := c.store.ListBucket(ctx, topic, b, pool.State(state), consumers, pos, limit-len(page.Jobs), heads)
		if err != nil {
			return Page{}, err
		}
		page.Jobs = append(page.Jobs, publicJobs(jobs)...)
		if done {
			b, pos = b+1, pool.Position{}
		} else {
			pos = next
		}
	}
	return page, nil
}

// cursor is where a page of List starts: a bucket, and a position in it.
type cursor struct {
	bucket   int
	consumer string // in-flight listings: the consumer whose set pos is in
	pos      pool.Position
	// merged: a DueOrder listing, pos the last (due, member) listed in
	// every bucket; encoded as the consumer mergedMark.
	merged bool
}

// mergedMark is the consumer field of a DueOrder cursor: no consumer id
// holds a newline.
const mergedMark = "due\x00order"

// parkedMark is the consumer field of a ready listing's cursor once it
// reads the jobs parked for a slot of their key value (pool.Position.Set 1).
const parkedMark = "parked\x00"

// dueOrderShare is the least a DueOrder page reads of each bucket.
const dueOrderShare = 16

// listByDue is a page of a topic's scheduled jobs in due order across its
// buckets: a bounded merge. It reads each bucket after the cursor's
// (due, member), at most a share of the page (limit/buckets, at least
// dueOrderShare) each, and lists, in order, the jobs that sort before
// every bucket's unread rest, so that no job a bucket did not read yet
// could come before one listed. The page may hold fewer than limit jobs
// (never none while jobs are left: the earliest unread rest is where the
// next page starts).
func (c *Client) listByDue(ctx context.Context, topic string, n int, cur cursor, limit int, heads bool) (Page, error) {
	share := min(limit, max(dueOrderShare, limit/n+1))
	type entry struct {
		job    *Job
		at     float64
		member string
	}
	var all []entry
	var front *pool.Position // the earliest unread rest of any bucket
	less := func(a float64, am string, b float64, bm string) bool {
		return a < b || (a == b && am < bm)
	}
	at := func(p pool.Position) float64 { f, _ := strconv.ParseFloat(p.At, 64); return f }
	for b := range n {
		jobs, next, done, err := c.store.ListBucket(ctx, topic, b, pool.StateScheduled, nil, cur.pos, share, heads)
		if err != nil {
			return Page{}, err
		}
		for _, j := range jobs {
			m := j.ID
			if j.Broadcast {
				m = keys.BroadcastMark + j.ID
			}
			all = append(all, entry{publicJob(j), float64(j.RunAt.UnixMilli()), m})
		}
		if !done && (front == nil || less(at(next), next.Member, at(*front), front.Member)) {
			p := next
			front = &p
		}
	}
	slices.SortFunc(all, func(a, b entry) int {
		switch {
		case less(a.at, a.member, b.at, b.member):
			return -1
		case less(b.at, b.member, a.at, a.member):
			return 1
		}
		return 0
	})
	var page Page
	var last *entry
	for i := range all {
		e := &all[i]
		if len(page.Jobs) == limit || (front != nil && less(at(*front), front.Member, e.at, e.member)) {
			break
		}
		page.Jobs = append(page.Jobs, e.job)
		last = e
	}
	switch {
	case last != nil && (len(page.Jobs) < len(all) || front != nil):
		next := cursor{merged: true, pos: pool.Position{At: strconv.FormatFloat(last.at, 'f', -1, 64), Member: last.member}}
		page.Next = next.encode(topic, StateScheduled)
	case last == nil && front != nil:
		next := cursor{merged: true, pos: *front}
		page.Next = next.encode(topic, StateScheduled)
	}
	return page, nil
}

// cursorVersion 2: a ready list's position is a place that the list's
// changes at its head do not move (keys.ReadyHeadField), not an index.
const cursorVersion = "2"

// encode makes the opaque Next of a page: base64 of the fields, the topic
// and state included so that a cursor is not used for another listing.
func (c cursor) encode(topic string, state State) string {
	consumer := c.consumer
	if c.merged {
		consumer = mergedMark
	}
	s := strings.Join([]string{cursorVersion, topic, string(state), strconv.Itoa(c.bucket),
		consumer, c.pos.At, c.pos.Member}, "\n")
	return base64.RawURLEncoding.EncodeToString([]byte(s))
}

func decodeCursor(s, topic string, state State) (cursor, error) {
	if s == "" {
		return cursor{}, nil
	}
	bad := func(why string) (cursor, error) {
		return cursor{}, invalidArg("list: cursor %.40q: %s", s, why)
	}
	if len(s) > 2048 {
		return bad("too long")
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return bad("not a cursor of List")
	}
	f := strings.Split(string(raw), "\n")
	if len(f) != 7 || f[0] != cursorVersion {
		return bad("not a cursor of List")
	}
	if f[1] != topic || f[2] != string(state) {
		return bad(fmt.Sprintf("made for topic %q, state %q", f[1], f[2]))
	}
	b, err := strconv.Atoi(f[3])
	if err != nil || b < 0 {
		return bad("bad bucket")
	}
	if f[5] != "" {
		if state == StateReady {
			// A place may be negative: jobs given back push places below 0.
			// Places are counted in the scripts' float64: exact to 2^53.
			if p, err := strconv.ParseInt(f[5], 10, 64); err != nil || p > 1<<53 || p < -(1<<53) {
				return bad("bad position")
			}
		} else if x, err := strconv.ParseFloat(f[5], 64); err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return bad("bad position")
		}
	}
	if f[4] == mergedMark {
		if state != StateScheduled || b != 0 {
			return bad("not a cursor of List")
		}
		return cursor{merged: true, pos: pool.Position{At: f[5], Member: f[6]}}, nil
	}
	if f[4] == parkedMark {
		if state != StateReady {
			return bad("not a cursor of List")
		}
		return cursor{bucket: b, pos: pool.Position{Set: 1, At: f[5], Member: f[6]}}, nil
	}
	return cursor{bucket: b, consumer: f[4], pos: pool.Position{At: f[5], Member: f[6]}}, nil
}
