package ack

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed settle.lua
	settleSource string
	settleScript = script.New(settleSource)
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
	// Token names the delivery the outcome belongs to (ready.Item.Token):
	// the outcome applies only while the job's state still names it.
	Token string
	Op    Op
	Delay time.Duration
	// Header replaces the stored one when not nil (OpRetry, OpDead,
	// OpAckRejoin).
	Header []byte
	// Reason says why, for OpDead; cut to maxReason bytes.
	Reason string
	// Err is the handler's error, for OpRetry and OpDead: kept as the
	// job's LastError; cut to maxReason bytes.
	Err string
	// HadError says the job has a last error stored, which an ack clears.
	HadError bool
	// Late is how long after its due time the fetch took the job
	// (ready.Item.Late), counted in the history of the minute it was
	// fetched in; negative when unknown. The zero value counts as on time.
	Late time.Duration
}

func lateArg(o Outcome) any {
	if o.Late < 0 {
		return ""
	}
	return o.Late.Milliseconds()
}

// maxReason bounds the reason kept for a dead job.
const maxReason = 512

// Cut returns s cut to maxReason bytes.
func Cut(s string) string {
	if len(s) > maxReason {
		return s[:maxReason]
	}
	return s
}

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
	durable       rdb.Durability
}

// SetDurability makes Settle wait for replicas: an outcome they did not
// acknowledge is an error wrapping rdb.ErrNotReplicated, and the caller
// settles again. Call it before the first Settle.
func (s *Settler) SetDurability(d rdb.Durability) { s.durable = d }

// NewSettler returns a Settler for consumer cid.
func NewSettler(c redis.UniversalClient, prefix, cid string, deadRetention int) *Settler {
	return &Settler{rdb: c, prefix: prefix, cid: cid, deadRetention: deadRetention}
}

func errArg(o Outcome) string {
	if o.Err == "" && o.HadError {
		return "-"
	}
	return Cut(o.Err)
}

// Retention keeps the records of acked jobs of a topic: each for For, at
// most Max per bucket (the oldest go first). The zero Retention keeps
// none, and costs nothing.
type Retention struct {
	For time.Duration
	Max int
}

// MaxSettle bounds the outcomes one Settle applies.
const MaxSettle = 256

// Settle applies outcomes of jobs of bucket n of topic in one script run
// (at most MaxSettle). applied[i] is false where outcome i was dropped
// because its delivery no longer held the job: the reaper took it back, or
// the job was deleted (and maybe added again) meanwhile.
func (s *Settler) Settle(ctx context.Context, topic string, n int, outs []Outcome) (applied []bool, err error) {
	return s.SettleKept(ctx, topic, n, Retention{}, outs)
}

// SettleKept is Settle on a topic with retention: the records of the jobs
// it acks stay readable as done (pool.Store.Done) for keep.For.
func (s *Settler) SettleKept(ctx context.Context, topic string, n int, keep Retention, outs []Outcome) (applied []bool, err error) {
	if len(outs) > MaxSettle {
		return nil, fmt.Errorf("settle %s: %d outcomes, more than %d", keys.Address(topic, n), len(outs), MaxSettle)
	}
	k := keys.ForBucket(s.prefix, topic, n)
	args := make([]any, 0, 6+8*len(outs))
	keepMs, most := int64(0), 1
	if keep.For > 0 {
		keepMs, most = pool.DurationMs(keep.For), max(keep.Max, 1)
	}
	args = append(args, keys.WakeChannel(s.prefix), keys.Address(topic, n), s.deadRetention, s.cid, keepMs, most, 0)
	// The plain acks first, in three values each (settle.lua); order maps
	// the script's replies back to outs.
	order := make([]int, 0, len(outs))
	for i, o := range outs {
		if plainAck(o) {
			args = append(args, o.ID, o.Token, lateArg(o))
			order = append(order, i)
		}
	}
	args[6] = len(order)
	for i, o := range outs {
		if !plainAck(o) {
			args = append(args, o.ID, o.Token, string(o.Op), pool.DurationMs(o.Delay), o.Header, Cut(o.Reason), errArg(o), lateArg(o))
			order = append(order, i)
		}
	}
	v, err := rdb.Run(ctx, s.rdb, s.durable, settleScript,
		[]string{k.Pool(), k.InFlight(s.cid), k.Scheduled(), k.UnAck(), k.Dead(), k.Reasons(), k.State(), k.Errors(), k.HistoryPrefix(), k.Done(), k.DoneJobs(), k.LimitPrefix(), k.Ready()}, args...).Result()
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
		applied[order[i]] = one == 1
	}
	return applied, nil
}

// plainAck reports whether o is an ack of a job with no last error stored,
// which settle.lua takes in three values.
func plainAck(o Outcome) bool {
	return o.Op == OpAck && o.Delay == 0 && len(o.Header) == 0 && o.Reason == "" && o.Err == "" && !o.HadError
}
