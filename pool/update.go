package pool

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed update.lua
	updateSource string
	updateScript = script.New(updateSource)
	//go:embed put.lua
	putSource string
	putScript = script.New(putSource)
)

// ErrChanged is a compare-and-set that found the job changed since it was
// read; the caller reads it again.
var ErrChanged = errors.New("redeq: job changed since it was read")

// Snapshot is a job as one read saw it: what a compare-and-set checks.
type Snapshot struct {
	Job    *Job   // with State, and RunAt while scheduled
	Header Header // the stored header
	env    string
	score  string // the due time as stored, while scheduled
}

// Read returns the job id of topic with what Replace needs to check that
// it did not change meanwhile. ErrJobNotFound when absent; an envelope
// that cannot be decoded is an error wrapping ErrCorrupt.
func (s *Store) Read(ctx context.Context, topic, id string, bucket int) (Snapshot, error) {
	v, err := getScript.Run(ctx, s.rdb, s.jobKeys(topic, bucket), id, keys.BroadcastMark).Result()
	if errors.Is(err, redis.Nil) {
		return Snapshot{}, fmt.Errorf("read job %q of topic %q: %w", id, topic, ErrJobNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("read job %q of topic %q: %w", id, topic, err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r) < 4 {
		return Snapshot{}, fmt.Errorf("read job %q of topic %q: bad reply %v", id, topic, v)
	}
	env, _ := rdb.Str(r[0])
	h, body, err := Decode([]byte(env))
	if err != nil {
		return Snapshot{}, fmt.Errorf("job %q of topic %q: %w", id, topic, err)
	}
	job, err := JobFrom(topic, id, h, append([]byte(nil), body...))
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Job: job, Header: h, env: env}
	state, _ := rdb.Str(r[1])
	snap.Job.State = State(state)
	if score, ok := rdb.Str(r[2]); ok && snap.Job.State == StateScheduled {
		ms, _ := strconv.ParseFloat(score, 64)
		snap.Job.RunAt = time.UnixMilli(int64(ms))
		snap.score = score
	}
	return snap, nil
}

// Due says how Replace changes a job's due time.
type Due struct {
	Keep  bool  // leave it as it is (a ready job keeps its place)
	At    int64 // unix ms, when Delay is negative
	Delay int64 // ms from now (the Redis clock); -1 to use At
}

// Replace writes env as the envelope of the waiting job snap read, and
// its new due time, only if the job is still where and as snap saw it.
// ErrJobNotFound when it is gone, ErrJobNotWaiting when it is in flight,
// parked or dead, ErrChanged when it changed since snap. A rerun after a
// lost reply reports success again.
func (s *Store) Replace(ctx context.Context, snap Snapshot, bucket int, env []byte, due Due) error {
	j := snap.Job
	k := keys.ForBucket(s.prefix, j.Topic, bucket)
	sum := sha1.Sum([]byte(snap.env))
	mode, ms := "", int64(0)
	switch {
	case due.Keep:
	case due.Delay >= 0:
		mode, ms = "in", due.Delay
	default:
		mode, ms = "at", due.At
	}
	ctx, cancel := rdb.Bounded(ctx, s.durable.Window())
	defer cancel()
	code, err := rdb.Run(ctx, s.rdb, s.durable, updateScript, []string{k.Pool(), k.Scheduled(), k.State(), k.Op(uuid.NewString())},
		j.ID, Member(j.ID, snap.Header.Broadcast), hex.EncodeToString(sum[:]), string(j.State), snap.score,
		env, mode, ms, keys.WakeChannel(s.prefix), keys.Address(j.Topic, bucket), s.opTTL).Int()
	if err != nil {
		return fmt.Errorf("update job %q of topic %q: %w", j.ID, j.Topic, err)
	}
	switch code {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("update job %q of topic %q: %w", j.ID, j.Topic, ErrJobNotFound)
	case 2:
		return fmt.Errorf("update job %q of topic %q: %w", j.ID, j.Topic, ErrJobNotWaiting)
	default:
		return fmt.Errorf("update job %q of topic %q: %w", j.ID, j.Topic, ErrChanged)
	}
}

// Put stores a validated job with an id: it adds it, or replaces the job
// of that id unless that one is in flight (ErrJobNotWaiting). replaced
// reports that a job was replaced. A rerun after a lost reply gives the
// same answer.
func (s *Store) Put(ctx context.Context, job *Job, at Placement) (replaced bool, err error) {
	return s.put(ctx, job, at, "")
}

// AddReplacingDead adds job as Add does, but for a dead job of its id,
// which it replaces as Put does: ErrJobExists when the id holds a job
// that is not dead, and then nothing is written. replaced tells that a
// dead job gave way. A rerun after a lost reply gives the first answer.
func (s *Store) AddReplacingDead(ctx context.Context, job *Job, at Placement) (replaced bool, err error) {
	return s.put(ctx, job, at, "dead")
}

func (s *Store) put(ctx context.Context, job *Job, at Placement, mode string) (replaced bool, err error) {
	k := keys.ForBucket(s.prefix, job.Topic, at.Bucket)
	header := AppendHeader(nil, HeaderOf(job))
	tail := header[len(envelopeVersion)+1+1:] // the script writes "1|<created>"
	runAt := ""
	if !job.RunAt.IsZero() {
		runAt = strconv.FormatInt(UnixMs(job.RunAt), 10)
	}
	ctx, cancel := rdb.Bounded(ctx, s.durable.Window())
	defer cancel()
	v, err := rdb.Run(ctx, s.rdb, s.durable, putScript,
		[]string{k.Pool(), k.Scheduled(), k.State(), k.UnAck(), k.Dead(), k.Reasons(), k.Op(uuid.NewString())},
		job.ID, Member(job.ID, job.Broadcast), keys.BroadcastMark, tail, Payload(job),
		DurationMs(job.Delay), runAt, at.Limit, keys.WakeChannel(s.prefix), keys.Address(job.Topic, at.Bucket),
		s.opTTL, mode).Slice()
	if err != nil {
		return false, fmt.Errorf("put job %q: %w", job.ID, err)
	}
	if len(v) == 0 {
		return false, fmt.Errorf("put job %q: bad reply %v", job.ID, v)
	}
	switch v[0] {
	case int64(0):
		return len(v) > 2 && v[2] == int64(1), nil
	case int64(2):
		return false, fmt.Errorf("put job %q to topic %q: %w", job.ID, job.Topic, ErrPoolFull)
	case int64(3):
		return false, fmt.Errorf("put job %q to topic %q: it is in flight: %w", job.ID, job.Topic, ErrJobNotWaiting)
	case int64(4):
		return false, fmt.Errorf("add job %q to topic %q: %w (and is not dead)", job.ID, job.Topic, ErrJobExists)
	}
	return false, fmt.Errorf("put job %q: bad reply %v", job.ID, v)
}
