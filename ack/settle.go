package ack

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed settle.lua
	settleSource string
	settleScript = redis.NewScript(settleSource)
)

// Op is what happens to a job when its handler is done.
type Op byte

// The outcomes of a delivery.
const (
	OpAck       Op = 'a' // remove the job
	OpRejoin    Op = 'r' // back to its bucket at now+Delay, attempts unchanged
	OpRetry     Op = 'f' // a failure: back to its bucket at now+Delay with Header
	OpAckRejoin Op = 'n' // re-added fresh at now+Delay
	OpUnAck     Op = 'u' // parked in un_ack
	OpDead      Op = 'd' // retries ran out: to the dead set with Header
)

// Outcome is the result of one delivery, to be applied in Redis.
type Outcome struct {
	ID string
	// Created is the job's created time as fetched, so that an outcome never
	// applies to a job deleted and added again under the same id. Empty
	// skips the check (a job whose envelope could not be read).
	Created string
	Op      Op
	Delay   time.Duration
	// Header replaces the stored one when not nil (OpRetry, OpDead,
	// OpAckRejoin).
	Header []byte
	// Reason says why, for OpDead; cut to MaxReason bytes.
	Reason string
}

// MaxReason bounds the reason kept for a dead job.
const MaxReason = 512

// Cut returns s cut to MaxReason bytes.
func Cut(s string) string {
	if len(s) > MaxReason {
		return s[:MaxReason]
	}
	return s
}

// CreatedOf is the created field of h as the scripts compare it.
func CreatedOf(h pool.Header) string { return strconv.FormatInt(h.CreatedMs, 10) }

// HeaderFor returns the header an outcome stores: for OpAckRejoin, the
// header of a fresh job after its created time (the script sets it);
// otherwise h in full.
func HeaderFor(op Op, h pool.Header) []byte {
	if op == OpAckRejoin {
		h.CreatedMs, h.Attempt, h.Recoveries = 0, 0, 0
		full := pool.AppendHeader(nil, h)
		return full[len("1|0"):]
	}
	return pool.AppendHeader(nil, h)
}

// Settler applies outcomes for one consumer.
type Settler struct {
	rdb           redis.UniversalClient
	prefix        string
	cid           string
	deadRetention int
}

// NewSettler returns a Settler for consumer cid.
func NewSettler(c redis.UniversalClient, prefix, cid string, deadRetention int) *Settler {
	return &Settler{rdb: c, prefix: prefix, cid: cid, deadRetention: deadRetention}
}

// Settle applies outcomes of jobs of bucket n of topic in one script run.
// applied[i] is false where outcome i was dropped because this consumer no
// longer held the job or the job was deleted.
func (s *Settler) Settle(ctx context.Context, topic string, n int, outs []Outcome) (applied []bool, err error) {
	k := keys.ForBucket(s.prefix, topic, n)
	args := make([]any, 0, 3+6*len(outs))
	args = append(args, keys.WakeChannel(s.prefix), keys.Address(topic, n), s.deadRetention)
	for _, o := range outs {
		args = append(args, o.ID, o.Created, string(o.Op), pool.DurationMs(o.Delay), o.Header, Cut(o.Reason))
	}
	v, err := settleScript.Run(ctx, s.rdb,
		[]string{k.Pool(), k.InFlight(s.cid), k.Scheduled(), k.UnAck(), k.Dead(), k.Reasons()}, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("settle %d jobs of %s: %w", len(outs), keys.Address(topic, n), err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r) != len(outs) {
		return nil, fmt.Errorf("settle %s: bad reply %v", keys.Address(topic, n), v)
	}
	applied = make([]bool, len(r))
	for i, x := range r {
		one, _ := rdb.Int(x)
		applied[i] = one == 1
	}
	return applied, nil
}
