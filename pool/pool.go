package pool

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed add.lua
	addSource string
	//go:embed get.lua
	getSource string
	//go:embed delete.lua
	deleteSource string

	addScript    = script.New(addSource)
	getScript    = script.New(getSource)
	deleteScript = script.New(deleteSource)
)

// Store reads and writes the job pools under one key prefix.
type Store struct {
	rdb     redis.UniversalClient
	prefix  string
	adds    *rdb.Committer
	durable rdb.Durability
	opTTL   any           // ms, rdb.OpTTL of the client and durable: how long an op key keeps a reply
	runs    string        // names this Store's add run keys: a uuid and "-"
	runSeq  atomic.Uint64 // numbers the runs
	lanes   struct {
		sync.Mutex
		m map[string]*laneSet // by pool key
	}
	bounded bool // go-redis's timeouts bound every attempt (rdb.TimeoutsSet)
	cuts    bool // go-redis ends every attempt at its ctx's deadline (rdb.CutsAtDeadline)

	targets struct {
		sync.RWMutex
		m map[bucketRef]*addTarget
	}
}

// SetDurability makes every write of a job wait for replicas (see
// rdb.Durability). Call it before the Store is used.
func (s *Store) SetDurability(d rdb.Durability) {
	s.durable = d
	s.opTTL = rdb.OpTTL(s.rdb, d).Milliseconds()
	s.adds.SetDurability(d)
}

// NewStore returns a Store over c.
func NewStore(c redis.UniversalClient, prefix string) *Store {
	s := &Store{rdb: c, prefix: prefix, runs: uuid.NewString() + "-", opTTL: OpTTL(c).Milliseconds(), bounded: rdb.TimeoutsSet(c), cuts: rdb.CutsAtDeadline(c)}
	s.adds = rdb.NewJoiningCommitter(c, addScript, addShared, s.runKey)
	return s
}

// runKey takes a run key of add.lua for a run on k (its pool first): a
// lane of the run's bucket, a key beside its pool in the bucket's slot
// that holds the reply of the latest run on it, and a number greater than
// every run's before it. A lane serves one run at a time, until every
// attempt go-redis makes of it ended, so the keys a Store keeps are as
// many as its runs under way at once on a bucket, whatever its add rate;
// each lives the op TTL after its latest run.
func (s *Store) runKey(k []string) (string, any, func()) {
	pk := k[0]
	s.lanes.Lock()
	if s.lanes.m == nil {
		s.lanes.m = make(map[string]*laneSet)
	}
	ls := s.lanes.m[pk]
	if ls == nil {
		ls = &laneSet{}
		s.lanes.m[pk] = ls
	}
	var lane uint32
	if n := len(ls.free); n > 0 {
		lane, ls.free = ls.free[n-1], ls.free[:n-1]
	} else {
		lane = ls.next
		ls.next++
	}
	ls.busy++
	s.lanes.Unlock()
	// Taken after the lane: a later run on the lane takes a greater one.
	seq := s.runSeq.Add(1)
	key := strings.TrimSuffix(pk, "pool") + "op:" + s.runs + strconv.FormatUint(uint64(lane), 36)
	return key, seq, func() {
		s.lanes.Lock()
		ls.free = append(ls.free, lane)
		ls.busy--
		if ls.busy == 0 && len(s.lanes.m) > maxTargets {
			// A bucket with no run under way: its lanes start again at 0
			// on its next run, whose number is greater than any before.
			delete(s.lanes.m, pk)
		}
		s.lanes.Unlock()
	}
}

// laneSet is the run keys of one bucket: the lanes not in use, the next
// new one, and how many are in use.
type laneSet struct {
	free       []uint32
	next, busy uint32
}

// Placement is where a job lives: its topic's bucket.
type Placement struct {
	Bucket int
	// Limit is the most jobs the bucket's pool may hold.
	Limit int
}

// Member is a job's member in its bucket ZSET.
func Member(id string, broadcast bool) string {
	if broadcast {
		return keys.BroadcastMark + id
	}
	return id
}

type bucketRef struct {
	topic  string
	bucket int
}

// addTarget is what every add to one bucket sends alike: its keys, its
// limit, and the wake channel and message, as go-redis arguments. Built
// once per bucket, it spares each Add the key strings and the boxing.
type addTarget struct {
	keys                    []string
	limit                   int
	limitArg, channel, wake any
}

// maxTargets bounds the buckets whose targets a Store keeps: a service
// that adds to ever new topics drops them all and starts again.
const maxTargets = 4096

// target returns the addTarget of topic's bucket at.
func (s *Store) target(topic string, at Placement) *addTarget {
	ref := bucketRef{topic, at.Bucket}
	s.targets.RLock()
	t := s.targets.m[ref]
	s.targets.RUnlock()
	if t != nil && t.limit == at.Limit {
		return t
	}
	k := keys.ForBucket(s.prefix, topic, at.Bucket)
	t = &addTarget{
		keys:     []string{k.Pool(), k.Scheduled()},
		limit:    at.Limit,
		limitArg: at.Limit,
		channel:  keys.WakeChannel(s.prefix),
		wake:     keys.Address(topic, at.Bucket),
	}
	s.targets.Lock()
	if s.targets.m == nil || len(s.targets.m) >= maxTargets {
		s.targets.m = make(map[bucketRef]*addTarget)
	}
	s.targets.m[ref] = t
	s.targets.Unlock()
	return t
}

// defaultTail is the header add.lua receives for a job with the config's
// retry settings, no headers and no broadcast flag: most jobs.
var defaultTail any = headerTail(Header{})

// headerTail is the header line of h from its second field on: add.lua
// writes "1|<created>" before it.
func headerTail(h Header) string {
	return string(AppendHeader(nil, h)[len(envelopeVersion)+1+1:]) // skip "1|0"
}

// noRunAt is add.lua's due time for a job due after its delay.
var noRunAt any = ""

// addShared is the number of add.lua's arguments that are the same for
// every job of a bucket, and come first.
const addShared = 4

func (s *Store) addCall(job *Job, at Placement) rdb.Call {
	t := s.target(job.Topic, at)
	tail := defaultTail
	if job.MaxRetries != 0 || job.RetryIntervals != nil || job.Broadcast || len(job.Headers) > 0 {
		tail = headerTail(HeaderOf(job))
	}
	id := any(job.ID)
	member := id
	if job.Broadcast {
		member = Member(job.ID, true)
	}
	delay, runAt := any(DurationMs(job.Delay)), noRunAt
	if !job.RunAt.IsZero() {
		delay, runAt = int64(0), UnixMs(job.RunAt)
	}
	body := Payload(job) // the headers block precedes the body
	return rdb.Call{
		Keys: t.keys,
		Args: []any{t.limitArg, t.channel, t.wake, s.opTTL, id, member, tail, body, delay, runAt},
	}
}

// Add stores a validated job with an id and returns its due time.
// Concurrent Adds share pipelines. When ctx ends first, Add returns ctx's
// error and the job may or may not have been stored; Get tells.
func (s *Store) Add(ctx context.Context, job *Job, at Placement) (time.Time, error) {
	v, err := s.adds.Do(ctx, s.addCall(job, at))
	if err != nil {
		return time.Time{}, fmt.Errorf("add job %q: %w", job.ID, err)
	}
	return addResult(job, v)
}

// pipelineChunk bounds the scripts AddMany sends in one round trip, so a
// large batch neither builds one huge buffer nor risks a read timeout (and
// a retry by go-redis) on a slow server.
const pipelineChunk = 256

// AddMany stores validated jobs with ids in pipelines of pipelineChunk;
// errs[i] is the outcome of jobs[i], its own command's reply (on a cluster
// one node may fail while the others store their jobs). The error is a
// failure of a whole pipeline, when no reply of a chunk arrived: the
// chunks before it were sent, and the failed chunk's jobs may or may not
// have been stored; so it is when ctx ends first, and AddMany then returns
// ctx's error at once. The jobs of one bucket in a chunk go as one run of
// add.lua, so that they keep their order (the first of two jobs of an id
// wins) even when the runs before a moment fail with NOSCRIPT and run
// again after the pipeline (see rdb.RunJoined).
func (s *Store) AddMany(ctx context.Context, jobs []*Job, at []Placement) (errs []error, err error) {
	errs = make([]error, len(jobs))
	for start := 0; start < len(jobs); start += pipelineChunk {
		end := min(start+pipelineChunk, len(jobs))
		calls := make([]rdb.Call, 0, end-start)
		for i := start; i < end; i++ {
			calls = append(calls, s.addCall(jobs[i], at[i]))
		}
		var vals []any
		var cerrs []error
		bctx, cancel := rdb.Bounded(ctx, s.durable.Window())
		// The caller waits until ctx ends; and no longer than the window
		// when go-redis's reads may have no end.
		wait := ctx
		if !s.bounded {
			wait = bctx
		}
		if !rdb.Here(wait, s.cuts) {
			// AwaitOn may return while the pipeline is still being sent:
			// it must not read the caller's bodies then.
			for _, call := range calls {
				rdb.Detach(call.Args)
			}
		}
		err := rdb.AwaitOn(wait, s.cuts, func() (err error) {
			vals, cerrs, err = rdb.RunJoined(bctx, s.rdb, addScript, calls, addShared, pipelineChunk, s.runKey, s.durable)
			return err
		})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("add jobs %d..%d of %d: %w", start, end-1, len(jobs), err)
		}
		for k := range calls {
			i := start + k
			if cerrs[k] != nil {
				errs[i] = fmt.Errorf("add job %q: %w", jobs[i].ID, cerrs[k])
				continue
			}
			_, errs[i] = addResult(jobs[i], vals[k])
		}
	}
	return errs, nil
}

func addResult(job *Job, v any) (time.Time, error) {
	due, err := rdb.Int(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("add job %q: %w", job.ID, err)
	}
	switch due {
	case -1:
		return time.Time{}, fmt.Errorf("add job %q to topic %q: %w", job.ID, job.Topic, ErrJobExists)
	case -2:
		return time.Time{}, fmt.Errorf("add job %q to topic %q: %w", job.ID, job.Topic, ErrPoolFull)
	}
	return time.UnixMilli(due), nil
}

// OpTTL is how long a reply of a call over c is kept for a rerun of the
// same call, when the call does not wait for replicas: go-redis resends a
// command whose reply was lost (up to MaxRetries times, each after a read
// timeout), and the rerun must get the first run's answer, not "not
// found" or "exists". Such calls run under a deadline of rdb.RerunWindow
// (see OpContext), and the reply outlives it by the time c may still take
// to write an attempt started before it (rdb.Slack). With go-redis's
// default options, 45 s.
func OpTTL(c redis.UniversalClient) time.Duration { return rdb.OpTTL(c, rdb.Durability{}) }

// OpContext returns ctx bounded for a call that keeps its reply for
// OpTTL: go-redis starts no attempt of it after rdb.RerunWindow.
func OpContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return rdb.Bounded(ctx, rdb.RerunWindow)
}

func (s *Store) jobKeys(topic string, bucket int) []string {
	k := keys.ForBucket(s.prefix, topic, bucket)
	return []string{k.Pool(), k.Scheduled(), k.State(), k.UnAck(), k.Dead(), k.Reasons(), k.Errors()}
}

// Get returns the job with its state, its due time in RunAt when it is
// scheduled or ready (a ready job's as the mover recorded it, zero for one
// back from a crashed consumer) and when it was parked when it is un_acked
// or dead, and the reason of a dead job. It costs
// O(log n), and one more O(1) read for a ready job.
func (s *Store) Get(ctx context.Context, topic, id string, bucket int) (*Job, error) {
	v, err := getScript.Run(ctx, s.rdb, s.jobKeys(topic, bucket), id, keys.BroadcastMark).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("get job %q of topic %q: %w", id, topic, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %q of topic %q: %w", id, topic, err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r) < 5 {
		return nil, fmt.Errorf("get job %q of topic %q: bad reply %v", id, topic, v)
	}
	env, _ := rdb.Str(r[0])
	job, err := JobOf(topic, id, []byte(env))
	if err != nil {
		return nil, err
	}
	state, _ := rdb.Str(r[1])
	job.State = State(state)
	if score, ok := rdb.Str(r[2]); ok {
		ms, _ := strconv.ParseFloat(score, 64)
		job.RunAt = time.UnixMilli(int64(ms))
	}
	if job.State == StateReady {
		if err := s.readyDue(ctx, keys.ForBucket(s.prefix, topic, bucket), []*Job{job}); err != nil {
			return nil, fmt.Errorf("get job %q of topic %q: %w", id, topic, err)
		}
	}
	if v, ok := rdb.Str(r[4]); ok {
		job.SetTrace(v)
	}
	if extra, ok := rdb.Str(r[3]); ok {
		switch job.State {
		case StateDead:
			job.Reason = extra
		case StateInFlight:
			if _, cid, ok := strings.Cut(extra, "@"); ok {
				job.Consumer = cid
			}
		}
	}
	return job, nil
}

// Delete removes a job from its pool and from wherever it waits, and
// returns it with the State it was in (and its Consumer, in flight). It
// costs O(log n), and a rerun after a lost reply returns the same job.
func (s *Store) Delete(ctx context.Context, topic, id string, bucket int) (*Job, error) {
	return s.DeleteCreated(ctx, topic, id, bucket, "")
}

// DeleteCreated is Delete of the job of id only while it is the one
// created at created (unix ms, in digits; "" is any): a job of the id
// deleted and added again since is left (ErrJobChanged).
func (s *Store) DeleteCreated(ctx context.Context, topic, id string, bucket int, created string) (*Job, error) {
	k := keys.ForBucket(s.prefix, topic, bucket)
	ks := s.jobKeys(topic, bucket)
	ks = append(ks[:6:6], k.Op(uuid.NewString()), ks[6])
	ctx, cancel := OpContext(ctx)
	defer cancel()
	v, err := deleteScript.Run(ctx, s.rdb, ks, id, keys.BroadcastMark, OpTTL(s.rdb).Milliseconds(), created).Slice()
	if err != nil {
		return nil, fmt.Errorf("delete job %q of topic %q: %w", id, topic, err)
	}
	if len(v) > 0 && v[0] == int64(2) {
		return nil, fmt.Errorf("delete job %q of topic %q: created at another time: %w", id, topic, ErrJobChanged)
	}
	if len(v) == 0 || v[0] != int64(1) {
		return nil, fmt.Errorf("delete job %q of topic %q: %w", id, topic, ErrJobNotFound)
	}
	env, _ := rdb.Str(v[1])
	// A job that cannot be decoded is deleted all the same; return what we can.
	job, derr := JobOf(topic, id, []byte(env))
	if derr != nil {
		job = &Job{Topic: topic, ID: id}
	}
	if len(v) >= 4 {
		state, _ := rdb.Str(v[2])
		job.State = State(state)
		if holder, _ := rdb.Str(v[3]); holder != "" {
			_, job.Consumer, _ = strings.Cut(holder, "@")
		}
	}
	return job, nil
}
