package keys

import "strconv"

// Bucket names the keys of one bucket of one topic.
type Bucket struct {
	tag string // "prefix:{topic#n}:"
}

// ForBucket returns the key set of bucket n of topic.
func ForBucket(prefix, topic string, n int) Bucket {
	return Bucket{tag: prefix + ":{" + topic + "#" + strconv.Itoa(n) + "}:"}
}

// Pool is a HASH: job id -> job envelope.
func (b Bucket) Pool() string { return b.tag + "pool" }

// Scheduled is a ZSET: job id -> due time in unix ms. Broadcast jobs are
// stored under their id prefixed with BroadcastMark.
func (b Bucket) Scheduled() string { return b.tag + "bucket" }

// Ready is a LIST of due job ids, oldest first.
func (b Bucket) Ready() string { return b.tag + "ready" }

// InFlight is a ZSET of the deliveries consumer cid holds: member
// "<token>:<id>" -> when it was fetched, unix ms (Redis clock). A member
// names one delivery, so the same consumer can hold two deliveries of one
// id (a stale one and a new one) without confusing them.
func (b Bucket) InFlight(cid string) string { return b.tag + "inflight:" + cid }

// Lease is a STRING: when consumer cid's lease on this bucket ends, unix
// ms (the bucket node's clock; the key expires then too). The consumer
// renews it for its ConsumerTimeout every HeartbeatInterval while it
// holds deliveries of the bucket, and a reaper recovers none of its
// deliveries here while it lasts. It lives on the bucket's node, so a
// consumer cut off only from the alive set's node keeps the jobs it runs.
func (b Bucket) Lease(cid string) string { return b.tag + "lease:" + cid }

// State is a HASH: job id -> ready ("r<due ms>" or "r") while the id
// waits in the ready list, or "<token>@<consumer>" while that delivery
// holds it. Scheduled, un_ack and dead jobs have no entry. It is the
// delivery fence: a fetch takes an id only when it is ready (its entry
// starts with "r"), and an outcome, rollback or recovery acts only when
// the entry still names its delivery. Tokens are digits, so the first byte
// tells the two apart.
//
// A ready entry comes in two formats (see MoversFormat). In the current
// one the mover writes "r<due ms>": the due time it moved the id at, for
// the lateness the fetch reports, in the one field a ready job has anyway.
// In the older one it writes "r" and keeps the due time in Due. Every
// reader reads both; a job that crash recovery or a rollback put back is
// plain "r" in both, with no due time kept.
func (b Bucket) State() string { return b.tag + "state" }

// Due is a HASH: job id -> the due time, unix ms, at which a mover of the
// older format (see State) put it in the ready list. The fetch reads and
// removes it, for the lateness an Observer sees; entries of stale ready
// ids leave when a fetch drops them. It is not part of the delivery fence,
// and the current format writes none.
func (b Bucket) Due() string { return b.tag + "due" }

// HistoryPrefix is the name of the bucket's history keys without their
// minute: the fetch and settle scripts append the minute they read from the
// server's clock (see History), so the key they write carries the bucket's
// hash tag and lives in the bucket's slot.
func (b Bucket) HistoryPrefix() string { return b.tag + "hist:" }

// History is a STRING of the bucket's counters for one minute (unix time /
// 60 s, server clock), written with BITFIELD as HistoryFields unsigned
// 32-bit counters (saturating): HistWrites, HistProcessed, HistFailed, then
// one per lateness bound (HistLate). It expires HistoryTTL after its first
// write. Readers sum the buckets of a topic.
func (b Bucket) History(minute int64) string {
	return b.HistoryPrefix() + strconv.FormatInt(minute, 10)
}

// The counters of a History key, as BITFIELD offsets "#i" of u32 fields.
const (
	// HistWrites counts the scripts that wrote the key; 1 after a write
	// means the write created it, and the script then sets its expiry.
	HistWrites = 0
	// HistProcessed counts outcomes applied (acks, rejoins, parks,
	// failures): deliveries whose handler ran to an outcome.
	HistProcessed = 1
	// HistFailed counts the processed deliveries that failed (an error, a
	// panic or a timeout), retried or sent to the dead set.
	HistFailed = 2
	// HistLate is the first of len(HistLateBoundsMs)+1 lateness counters:
	// counter HistLate+i counts jobs fetched at most HistLateBoundsMs[i]
	// ms after their due time (and more than the bound before); the last
	// counts the jobs later than every bound.
	HistLate = 3
	// HistoryFields is the number of counters in a History key.
	HistoryFields = HistLate + len(HistLateBoundsMs) + 1
	// HistoryTTLSeconds is how long a History key lives after its first
	// write (ready/fetch.lua and ack/settle.lua hold the same figure).
	HistoryTTLSeconds = 90 * 60
)

// HistLateBoundsMs are the upper bounds, in ms, of the lateness counters of
// a History key (ready/fetch.lua holds the same list).
var HistLateBoundsMs = [...]int64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000}

// Op is a STRING holding the reply of an admin call (delete, requeue, ...)
// or of one run of add.lua for a short while, so that a rerun of the call
// after a lost reply (go-redis retries) returns the same answer instead of
// "not found", "exists", or a second copy of a job that already ran.
func (b Bucket) Op(id string) string { return b.tag + "op:" + id }

// UnAck is a ZSET: job id -> time it was parked, unix ms.
func (b Bucket) UnAck() string { return b.tag + "unack" }

// Dead is a ZSET: job id -> time its retries ran out, unix ms.
func (b Bucket) Dead() string { return b.tag + "dead" }

// Reasons is a HASH: id of a dead job -> why it died (bounded text).
func (b Bucket) Reasons() string { return b.tag + "reasons" }

// Sent is a HASH: SentField(id, seq) -> envelope of a broadcast job the
// mover has published, kept for the clients to read after the notice. The
// mover trims it and sets it to expire (see bucket.BroadcastRetention).
func (b Bucket) Sent() string { return b.tag + "sent" }

// SentAt is a ZSET: SentField(id, seq) -> when the mover published it,
// unix ms; it orders Sent for trimming.
func (b Bucket) SentAt() string { return b.tag + "sent:at" }

// SentSeq is a STRING: the last sequence number given to a published
// broadcast job of this bucket. It never expires, so a field of Sent names
// one publication even when a job is re-added under the same id.
func (b Bucket) SentSeq() string { return b.tag + "sent:seq" }

// SentField is the field of Sent and member of SentAt for the publication
// seq of job id: id "\n" seq.
func SentField(id, seq string) string { return id + "\n" + seq }

// Errors is a HASH: job id -> the job's trace, the time and error of its
// last failed deliveries (bounded, see pool.ParseTrace); it leaves with
// the job.
func (b Bucket) Errors() string { return b.tag + "errors" }

// Done is a ZSET: id of a job acked on a topic with retention -> when its
// record expires, unix ms. Bounded by the retention's cap; the key expires
// a retention after the last ack that wrote it.
func (b Bucket) Done() string { return b.tag + "done" }

// DoneJobs is a HASH: id of a job in Done -> its record: "<acked ms>|<length
// of consumer id>|<length of trace>\n" <consumer id> <trace> <envelope>.
func (b Bucket) DoneJobs() string { return b.tag + "done:jobs" }

// Lock is the STRING redsync uses as the mutex of this bucket's mover.
func (b Bucket) Lock() string { return b.tag + "lock" }

// Topic names the topic-wide keys.
type Topic struct {
	tag string // "prefix:{topic}:"
}

// ForTopic returns the topic-wide key set of topic.
func ForTopic(prefix, topic string) Topic {
	return Topic{tag: prefix + ":{" + topic + "}:"}
}

// Meta is a HASH with field "buckets": the bucket count recorded on first use.
func (t Topic) Meta() string { return t.tag + "meta" }

// Consumers is a ZSET: consumer id -> when it joined the topic, unix ms
// (Redis clock), for inspection (Stats, List): a consumer joins every topic
// it listens to when it starts and leaves when it shuts down or a reaper
// forgets it; one forgotten that comes back (it was stopped, or cut off)
// joins again at its next heartbeat (see AliveJoined). Reapers do not read
// it: they find silent consumers in Alive.
func (t Topic) Consumers() string { return t.tag + "consumers" }

// Topics is a SET of every topic ever added to.
func Topics(prefix string) string { return prefix + ":topics" }

// WakeChannel is the pub/sub channel on which a script announces that a
// bucket got a new earliest job; the message is Address(topic, bucket).
func WakeChannel(prefix string) string { return prefix + ":wake" }

// ReadyChannel is the pub/sub channel on which the mover announces that a
// bucket's ready list received work; the message is Address(topic, bucket).
func ReadyChannel(prefix string) string { return prefix + ":ready" }

// BroadcastChannel is the pub/sub channel that announces due broadcast
// jobs. The message is a notice, Address(topic, bucket) "\n" id "\n" seq
// "\n" created ms: small whatever the body, so a burst never overruns a
// subscriber's output buffer. The envelope waits in Sent.
func BroadcastChannel(prefix string) string { return prefix + ":broadcast" }

// ProbeChannel is the pub/sub channel on which client id sends itself a
// message now and then, to find a subscription that lost messages.
func ProbeChannel(prefix, id string) string { return prefix + ":probe:" + id }

// BroadcastMark prefixes the ZSET member of a broadcast job. Ids may not
// contain control characters, so the mark never collides with an id.
const BroadcastMark = "\x01"

// Address is how pub/sub messages name a bucket: "topic#n".
func Address(topic string, n int) string { return topic + "#" + strconv.Itoa(n) }

// ParseAddress splits an Address; ok is false when s is not one.
func ParseAddress(s string) (topic string, n int, ok bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '#' {
			n, err := strconv.Atoi(s[i+1:])
			if err != nil || n < 0 {
				return "", 0, false
			}
			return s[:i], n, true
		}
	}
	return "", 0, false
}

// PausedField is the field of a bucket's State HASH that is present while
// its topic is paused: the fetch script returns nothing while it is set.
// Ids have no control characters, so it never names a job. The topic's
// Meta HASH holds the same flag as field "paused" for readers outside the
// bucket's slot.
const PausedField = "\x00paused"

// PauseSeqField is the field of a bucket's State HASH holding the number
// of the last Pause or Resume applied to the bucket, so that a slower
// older call never undoes a newer one. Meta holds the counter as field
// "pauseseq".
const PauseSeqField = "\x00pauseseq"

// LimitParkedField is the field of a bucket's State HASH that names the
// limits ("max|n|per ms|header", ready.Limits.Spec) the bucket's ids
// waiting for a slot of their key value were set aside under, while any
// may be (see limits.lua). A fetch under other limits sorts them again,
// and one without limits per key value gives them back to the ready list:
// no id waits for a slot no limit guards. The fetch reads it with the
// states it reads anyway.
const LimitParkedField = "\x00parked"

// LimitKeyHeaderField is the field of a bucket's State HASH naming the
// header whose values the leases of a per-key MaxRunning are counted by
// (LimitPrefix "keyof" and "krun:" v), so that a fetch per another header
// does not mistake them for its own values (see limits.lua).
const LimitKeyHeaderField = "\x00khdr"

// ReadyHeadField is the field of a bucket's State HASH counting the
// entries taken from the head of its ready list (by fetches) minus those
// pushed back at the head (by give-backs). An entry at index i of the list
// has the place i + that count, which stays the entry's own while it
// waits: List's cursors resume at a place, whatever happened at the head.
const ReadyHeadField = "\x00readyhead"

// Movers is a ZSET: client id -> when the client last announced that it
// is alive, unix ms (Redis clock). The started clients share out the
// buckets among the live ones.
func Movers(prefix string) string { return prefix + ":movers" }

// MoversUnreachable is a HASH: client id -> the bucket addresses that
// client cannot move (it cannot reach their node), one per line. The
// other clients share those buckets out among themselves. Its hash tag
// is Movers' whole name, so it shares Movers' slot.
func MoversUnreachable(prefix string) string { return "{" + Movers(prefix) + "}:unreachable" }

// MoversClock is a HASH: "high", the latest announcement time the fleet
// has seen, and "offset", what the Redis clock stepped back by in all,
// both ms: announcements are scored on a clock that never goes back. It
// shares Movers' slot.
func MoversClock(prefix string) string { return "{" + Movers(prefix) + "}:clock" }

// MoversFormats is a HASH: client id -> the newest format of the job
// state it reads (FormatCurrent), written by each announcement of a
// client that reads it; a client of an older version writes none. It
// shares Movers' slot.
func MoversFormats(prefix string) string { return "{" + Movers(prefix) + "}:formats" }

// MoversFormat is a STRING: the format of the job state the clients write
// (see State), FormatCurrent once UpgradeFormat switched the namespace to
// it; absent while they write the older one. Clients read it at Start and
// at each announcement, never per job. It shares Movers' slot.
func MoversFormat(prefix string) string { return "{" + Movers(prefix) + "}:format" }

// The formats of a namespace's state, each holding the ones before:
// FormatDueInState, a ready entry carries its due time ("r<due ms>", see
// State); FormatStartLog, a rate's starts are written to its start log
// only (Bucket.LimitPrefix "rlog"), no longer also to the ZSET of one
// member per start that clients of the versions before FormatStartLog
// count ("rate"): until the switch every client writes both, so that
// such a client counts every start. FormatCurrent is the newest, which
// this version reads and announces.
const (
	FormatDueInState = "2"
	FormatStartLog   = "3"
	FormatCurrent    = FormatStartLog
)

// FormatAtLeast reports whether format (keys.MoversFormat's value; ""
// for none) holds format min.
func FormatAtLeast(format, min string) bool {
	f, err := strconv.Atoi(format)
	if err != nil {
		return false
	}
	m, _ := strconv.Atoi(min)
	return f >= m
}

// Alive is a ZSET: consumer id -> its last heartbeat, unix ms (Redis
// clock). One entry per started client with listeners, whatever the
// number of topics it listens to: the heartbeat costs one call per client,
// and reapers find the silent consumers in one read. AliveTopics shares
// its hash tag, so one script reads and writes both.
func Alive(prefix string) string { return prefix + ":{alive}" }

// AliveTopics is a HASH: consumer id -> the topics it listens to, one
// Address(topic, buckets) per line, written by each heartbeat: where a
// reaper looks for its jobs, without reading the topics' meta.
func AliveTopics(prefix string) string { return prefix + ":{alive}:topics" }

// AliveJoined is the field of AliveTopics that holds when consumer cid
// last joined its topics' consumer sets, unix ms (Redis clock): written by
// the heartbeat that finds it missing (the first, or the first after a
// reaper forgot the consumer), which makes the consumer join its topics
// again with that time; a reaper takes a consumer out of a topic's set
// only if it joined before the heartbeat the reaper forgot. A number, no
// Address, like AliveTimeout.
func AliveJoined(cid string) string { return cid + "#joined" }

// AliveTimeout is the field of AliveTopics that holds consumer cid's own
// ConsumerTimeout, in ms, written by each heartbeat beside its topics:
// reapers count a consumer as silent only after its own timeout, whatever
// theirs. Its value is a number, no Address, so readers of the topics'
// lines pass over it.
func AliveTimeout(cid string) string { return cid + "#timeout" }

// AliveInfo is the field of AliveTopics that holds what names consumer
// cid to a person: a JSON object (consumer.Info: client name, host, pid),
// at most a few hundred bytes, written by each heartbeat. It ends in "}",
// never an Address, so readers of the topics' lines pass over it.
func AliveInfo(cid string) string { return cid + "#info" }

// ReapLock is the STRING redsync uses as the mutex of reaping consumer
// cid: one reaper at a time recovers a silent consumer's jobs.
func ReapLock(prefix, cid string) string { return prefix + ":{alive}:reap:" + cid }

// Retired is a ZSET: topic -> when it was retired (taken out of Topics
// because it stayed empty and unused), unix ms (Redis clock). Movers look
// at a retired topic once more after a while, in case a producer that
// still knew it added a job meanwhile.
func Retired(prefix string) string { return prefix + ":retired" }

// Ticks is a ZSET of the schedule ticks whose job was added to this bucket:
// member "<job id>#<schedule generation>" -> the later of the tick instant
// and the time of the claim, unix ms. It is the claim of a tick, written in
// the script that adds the tick's job, and it outlives the job (a deleted
// tick's job is not added again). Each add trims claims older than an
// hour, a bounded number at a time.
func (b Bucket) Ticks() string { return b.tag + "ticks" }

// Schedule names the keys of one schedule, in the schedule's own slot.
type Schedule struct {
	tag string // "prefix:{sched:name}:"
}

// ForSchedule returns the key set of schedule name.
func ForSchedule(prefix, name string) Schedule {
	return Schedule{tag: prefix + ":{sched:" + name + "}:"}
}

// Record is a HASH: the schedule (spec, zone, topic, body, headers, retry
// settings, catch-up policy and window), its generation and version,
// paused, the cursor (ticks up to it are handled, unix ms), the latest
// tick whose job was added and the one before it, and the count of
// skipped ticks.
func (s Schedule) Record() string { return s.tag + "schedule" }

// TicksOf is a ZSET of the ticks whose job a pass of generation gen of the
// schedule writes or wrote and which were not due at its last pass:
// member and score the tick instant, unix ms. Each pass records its ticks
// here before it writes their jobs, so a change of the schedule finds the
// ticks of the generation it ends, whether the pass that wrote them lived
// or died.
func (s Schedule) TicksOf(gen string) string { return s.tag + "ticks:" + gen }

// Stale is a ZSET of the generations a change of the schedule ended whose
// ticks' jobs are still to be stopped: member "<gen>|<change ms>|<topic>"
// -> the change's instant, unix ms. The caller of the change stops them,
// and any pass that finds the entry left (the caller died) does.
func (s Schedule) Stale() string { return s.tag + "stale" }

// Op is a STRING holding the reply of one schedule admin call (put, pause,
// resume, delete) for a short while, so that a rerun after a lost reply
// answers the same.
func (s Schedule) Op(op string) string { return s.tag + "op:" + op }

// Schedules is a ZSET: schedule name -> when a client should next look at
// it, unix ms (the instant of its waiting tick; 0 after a change; far in
// the future while paused). Clients read it once per pass.
func Schedules(prefix string) string { return prefix + ":schedules" }

// ScheduleClock is a HASH with fields seen (the last pass of any client's
// schedule loop, unix ms, server clock), spans ("<from>:<to>,...", the
// latest 8 spans during which no client ran a pass, whose ticks were
// missed, oldest first) and down_from, down_to (the latest of them, as
// earlier versions read it).
func ScheduleClock(prefix string) string { return prefix + ":schedules:clock" }

// LimitPrefix starts the names of the bucket's limit keys (see
// internal/script's limits.lua, which appends the rest): the scripts that
// enforce or free a limit get it as a KEYS entry and derive, all under the
// bucket's hash tag and so in its slot,
//
//	<prefix>run          ZSET  lease -> fetch ms: every delivery fetched under a limit
//	<prefix>keyof        HASH  lease -> limit key value (per-key limits only)
//	<prefix>krun:<value> ZSET  lease -> fetch ms, the deliveries of one key value
//	<prefix>rlog         LIST  starts of the last rate period, an entry per fetch; expires after it
//	<prefix>krlog:<value> LIST the same per key value
//	<prefix>rate         ZSET  lease -> start ms: the previous version's log, read while it exists
//	<prefix>krate:<value> ZSET the same per key value
//	<prefix>park:<value> LIST  ids held for their key value, oldest first
//	<prefix>parked       ZSET  key value -> when its parked ids may be tried again, ms
//	<prefix>held         STRING set while a topic-wide MaxRunning held a fetch back
//
// A lease is "<token>@<consumer>\n<id>": the delivery's state value, then
// its id. Idle key values own no key at all.
func (b Bucket) LimitPrefix() string { return b.tag + "limit:" }

// LimitsField is the field of a topic's Meta HASH holding the limits its
// listeners enforce (written at Start, read by Stats): "max|n|per ms|header".
const LimitsField = "limits"

// LimitRunning is a ZSET of the leases of the deliveries fetched under a
// limit (LimitPrefix "run").
func (b Bucket) LimitRunning() string { return b.LimitPrefix() + "run" }

// LimitKeyOf is a HASH: lease -> its key value, for the leases of a
// per-key MaxRunning (LimitPrefix "keyof").
func (b Bucket) LimitKeyOf() string { return b.LimitPrefix() + "keyof" }

// LimitRateFull is a STRING set while the topic-wide rate's window is full,
// expiring when its oldest start leaves it (LimitPrefix "rfull").
func (b Bucket) LimitRateFull() string { return b.LimitPrefix() + "rfull" }

// LimitParked is a ZSET: key value -> when its parked ids may be tried
// again (LimitPrefix "parked").
func (b Bucket) LimitParked() string { return b.LimitPrefix() + "parked" }

// LimitPark is a LIST of the ids set aside for key value v (LimitPrefix
// "park:" v).
func (b Bucket) LimitPark(v string) string { return b.LimitPrefix() + "park:" + v }

// LimitKeyRunning is a ZSET of the leases of key value v (LimitPrefix
// "krun:" v).
func (b Bucket) LimitKeyRunning(v string) string { return b.LimitPrefix() + "krun:" + v }
