package pool

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed list.lua
	listSource string
	listScript = script.New(listSource)
)

// ErrUnknownTopic is a topic with no recorded bucket count: nobody ever
// added to it.
var ErrUnknownTopic = errors.New("redeq: unknown topic")

// ListSlack is how many entries beyond the jobs asked for one listing
// call may read, so that a few stale entries do not cut a page short.
const ListSlack = 64

// MaxListSets bounds the in-flight sets (one per consumer) one listing
// call reads.
const MaxListSets = 64

// Position is where a listing of one bucket ended: the next listing starts
// after it.
type Position struct {
	// Set indexes the consumers given to ListBucket (in-flight listings);
	// in a ready listing, 1 once it reads the jobs parked for a slot of
	// their key value (At their place, Member the value); 0 otherwise.
	Set int
	// At is the ZSET score or the ready-list place (see
	// keys.ReadyHeadField) of the last entry read; "" means the start of
	// Set.
	At string
	// Member is the ZSET member at At; the id at At in a ready list.
	Member string
}

// ListBucket reads at most limit jobs of bucket n of topic in state, after
// from, reading at most limit+ListSlack entries. For StateInFlight it reads
// the in-flight sets of consumers (at most MaxListSets) in order, from.Set
// indexing them. done reports that the sources were read to their end;
// otherwise next is where the following call starts. Each job has the
// fields Get gives it (its LastError too). Stale entries (of the ready list
// and in-flight sets) are skipped; a corrupt envelope is listed with its
// topic and id only, so that it can be found and deleted. With heads, the
// jobs come without Body and Headers: only each envelope's header line is
// read.
func (s *Store) ListBucket(ctx context.Context, topic string, n int, state State, consumers []string,
	from Position, limit int, heads bool) (jobs []*Job, next Position, done bool, err error) {
	k := keys.ForBucket(s.prefix, topic, n)
	ks := []string{k.Pool(), k.State(), k.Reasons(), k.Errors()}
	mode := string(state)
	if heads {
		mode += "!"
	}
	args := []any{mode, limit, limit + ListSlack, from.At, from.Member}
	total := 0
	switch state {
	case StateScheduled:
		ks = append(ks, k.Scheduled())
	case StateReady:
		// The ready list, then the jobs parked for a slot of their key
		// value (Set 1).
		ks = append(ks, k.Ready(), k.LimitPrefix())
		args = append(args, from.Set+1)
	case StateUnAck:
		ks = append(ks, k.UnAck())
	case StateDead:
		ks = append(ks, k.Dead())
	case StateInFlight:
		if from.Set >= len(consumers) {
			return nil, Position{}, true, nil
		}
		total = len(consumers)
		consumers = consumers[from.Set:min(total, from.Set+MaxListSets)]
		for _, cid := range consumers {
			ks = append(ks, k.InFlight(cid))
			args = append(args, cid)
		}
	default:
		return nil, Position{}, false, fmt.Errorf("list %s: unknown state %q", keys.Address(topic, n), state)
	}
	v, err := listScript.Run(ctx, s.rdb, ks, args...).Result()
	if err != nil {
		return nil, Position{}, false, fmt.Errorf("list %s of %s: %w", state, keys.Address(topic, n), err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r) < 4 || (len(r)-4)%5 != 0 {
		return nil, Position{}, false, fmt.Errorf("list %s of %s: bad reply %v", state, keys.Address(topic, n), v)
	}
	done = r[0] == int64(1)
	if !done {
		set, _ := rdb.Int(r[1])
		next.At, _ = rdb.Str(r[2])
		next.Member, _ = rdb.Str(r[3])
		next.Set = int(set) - 1
		if state == StateInFlight {
			next.Set += from.Set
		}
	}
	for i := 4; i < len(r); i += 5 {
		id, _ := rdb.Str(r[i])
		env, _ := rdb.Str(r[i+1])
		var job *Job
		if heads {
			job, err = JobOfHead(topic, id, []byte(env))
		} else {
			job, err = JobOf(topic, id, []byte(env))
		}
		if err != nil {
			job = &Job{Topic: topic, ID: id}
		}
		job.State = state
		if score, ok := rdb.Str(r[i+2]); ok {
			ms, _ := strconv.ParseFloat(score, 64)
			job.RunAt = time.UnixMilli(int64(ms))
		}
		if extra, ok := rdb.Str(r[i+3]); ok {
			if state == StateDead {
				job.Reason = extra
			} else {
				job.Consumer = extra
			}
		}
		if v, ok := rdb.Str(r[i+4]); ok {
			job.SetTrace(v)
		}
		jobs = append(jobs, job)
	}
	if state == StateReady && len(jobs) > 0 {
		if err := s.readyDue(ctx, k, jobs); err != nil {
			return nil, Position{}, false, fmt.Errorf("list %s of %s: %w", state, keys.Address(topic, n), err)
		}
	}
	if state == StateInFlight && done && from.Set+len(consumers) < total {
		// The next call reads the following consumers' sets.
		done, next = false, Position{Set: from.Set + len(consumers)}
	}
	return jobs, next, done, nil
}

// readyDue sets the RunAt of ready jobs to the due time the mover recorded
// when it moved them: in the state ("r<due ms>"), or in the due HASH for a
// state of the older format (keys.Bucket.State); one pipeline of two
// HMGETs. A job back in the ready list by recovery has none recorded and
// keeps a zero RunAt.
func (s *Store) readyDue(ctx context.Context, k keys.Bucket, jobs []*Job) error {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	pipe := s.rdb.Pipeline()
	states := pipe.HMGet(ctx, k.State(), ids...)
	dues := pipe.HMGet(ctx, k.Due(), ids...)
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	dv := dues.Val()
	for i, st := range states.Val() {
		v, _ := st.(string)
		if len(v) > 1 && v[0] == 'r' {
			v = v[1:]
		} else {
			v, _ = dv[i].(string)
		}
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			jobs[i].RunAt = time.UnixMilli(int64(ms))
		}
	}
	return nil
}
