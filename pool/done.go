package pool

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed done.lua
	doneSource string
	doneScript = script.New(doneSource)
)

// MaxDoneList bounds the records one DoneList call reads.
const MaxDoneList = 1000

// Done reads the record of job id of bucket n of topic acked on a topic
// with retention: the job as it was when acked, its State StateDone,
// FinishedAt and Consumer set, and its failures. ErrJobNotFound when there
// is none (never acked with retention, or expired).
func (s *Store) Done(ctx context.Context, topic, id string, n int) (*Job, error) {
	k := keys.ForBucket(s.prefix, topic, n)
	v, err := doneScript.Run(ctx, s.rdb, []string{k.Done(), k.DoneJobs()}, "get", id).Text()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("get job %q of topic %q: %w", id, topic, ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get done job %q of topic %q: %w", id, topic, err)
	}
	return doneJob(topic, id, v)
}

// DoneList reads at most limit done records of bucket n of topic, after
// from (a Position's At and Member: the expiry and id of the last one
// read), in the order they expire. done reports the end of the set.
func (s *Store) DoneList(ctx context.Context, topic string, n int, from Position, limit int) (jobs []*Job, next Position, done bool, err error) {
	k := keys.ForBucket(s.prefix, topic, n)
	v, err := doneScript.Run(ctx, s.rdb, []string{k.Done(), k.DoneJobs()}, "list", min(limit, MaxDoneList), from.At, from.Member).Result()
	if err != nil {
		return nil, Position{}, false, fmt.Errorf("list done of %s: %w", keys.Address(topic, n), err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r) < 1 || (len(r)-1)%3 != 0 {
		return nil, Position{}, false, fmt.Errorf("list done of %s: bad reply %v", keys.Address(topic, n), v)
	}
	done = r[0] == int64(1)
	next = from
	for i := 1; i < len(r); i += 3 {
		id, _ := rdb.Str(r[i])
		score, _ := rdb.Str(r[i+1])
		rec, ok := rdb.Str(r[i+2])
		next = Position{At: score, Member: id}
		if !ok {
			continue // trimmed between the reads: cannot be, in one script
		}
		job, err := doneJob(topic, id, rec)
		if err != nil {
			job = &Job{Topic: topic, ID: id, State: StateDone}
		}
		jobs = append(jobs, job)
	}
	return jobs, next, done, nil
}

// doneJob decodes a done record (keys.Bucket.DoneJobs).
func doneJob(topic, id, rec string) (*Job, error) {
	bad := func() (*Job, error) {
		return nil, fmt.Errorf("done job %q of topic %q: %w: bad record", id, topic, ErrCorrupt)
	}
	line, rest, ok := strings.Cut(rec, "\n")
	if !ok {
		return bad()
	}
	f := strings.Split(line, "|")
	if len(f) != 3 {
		return bad()
	}
	at, err1 := strconv.ParseInt(f[0], 10, 64)
	cl, err2 := strconv.Atoi(f[1])
	tl, err3 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || err3 != nil || cl < 0 || tl < 0 || cl+tl > len(rest) {
		return bad()
	}
	job, err := JobOf(topic, id, []byte(rest[cl+tl:]))
	if err != nil {
		return nil, err
	}
	job.State, job.FinishedAt, job.Consumer = StateDone, time.UnixMilli(at), rest[:cl]
	job.setTrace(rest[cl : cl+tl])
	return job, nil
}
