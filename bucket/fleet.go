package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed announce.lua
	announceSource string
	announceScript = script.New(announceSource)

	//go:embed format.lua
	formatSource string
	formatScript = script.New(formatSource)
)

// maxFleet bounds the clients one announcement returns.
const maxFleet = 10_000

// MaxUnreachable bounds the buckets one client announces it cannot move;
// past it, the client keeps the others it owns and retries them.
const MaxUnreachable = 2_000

// pruneEvery is how many of its announcements a client makes per prune of
// the dead clients' entries. Live clients are read by score, so the
// entries left between prunes change nothing but the ZSET's size; pruning
// at every announcement cost each client a call per ScanInterval.
const pruneEvery = 10

// Fleet is one client's view of the started clients, which share out the
// buckets: each bucket belongs to one live client, chosen by rendezvous
// hashing (Owner), and only that client runs the bucket's mover. A client
// announces itself once per ScanInterval in one ZSET; one that has not for
// LiveFor counts as dead and its buckets pass to the others.
//
// Ownership also follows reachability: a client announces the buckets it
// has failed to move for a while (SetUnreachable: it cannot reach their
// node), and every client leaves those out of that client's share, so
// that each passes to the live client of highest weight that has not
// announced it too. When every live client announced one, its owner is
// the usual one, which keeps trying.
type Fleet struct {
	rdb      redis.UniversalClient
	keys     []string // movers, unreachable, clock, formats, format
	id       string
	interval time.Duration
	// older makes this client one of the older format (tests only): it
	// records no format it reads and writes the older one whatever the
	// namespace's.
	older bool
	// format is the format the namespace writes (keys.MoversFormat, ""
	// for none), as this client last read it.
	format atomic.Value

	mu        sync.Mutex
	live      []string                   // sorted, this client included
	cannot    map[string]map[string]bool // live client -> addresses it cannot move
	mine      string                     // what SetUnreachable gave, one address a line
	announced int                        // announcements made, for pruneEvery
	outdated  []string                   // live clients that cannot read the format in force
}

// NewFleet returns the view of client id, which knows only itself until
// its first Announce.
func NewFleet(c redis.UniversalClient, prefix, id string, interval time.Duration) *Fleet {
	return &Fleet{rdb: c, id: id, interval: interval, live: []string{id},
		keys: []string{keys.Movers(prefix), keys.MoversUnreachable(prefix), keys.MoversClock(prefix),
			keys.MoversFormats(prefix), keys.MoversFormat(prefix)}}
}

// SetOlderFormat makes this client behave, as to the format of the job
// state, as a client of the version before it (for tests of a rolling
// upgrade): it announces no format it reads, and writes the older one.
func (f *Fleet) SetOlderFormat() { f.older = true }

// WritesCurrentFormat reports whether this client writes the format of
// the job state in which a ready entry carries its due time
// (keys.FormatDueInState, keys.Bucket.State): the namespace switched to
// it or to a later one, as read at Start or at the last announcement.
func (f *Fleet) WritesCurrentFormat() bool {
	return !f.older && keys.FormatAtLeast(f.readFormat(), keys.FormatDueInState)
}

// WritesStartLog reports whether this client writes a rate's starts to
// its start log only (keys.FormatStartLog): the namespace switched to
// it, so that no client that counts the previous version's ZSET of
// starts is alive. Until then the fetch writes both.
func (f *Fleet) WritesStartLog() bool {
	return !f.older && keys.FormatAtLeast(f.readFormat(), keys.FormatStartLog)
}

func (f *Fleet) readFormat() string {
	v, _ := f.format.Load().(string)
	return v
}

// Outdated returns the live clients, at the last announcement, that do
// not read the format in force (none while the older one is): clients of
// an older version started after the switch.
func (f *Fleet) Outdated() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.outdated)
}

// formatWindow is how long a client that stopped announcing still counts
// as alive for a switch of format: longer than any client's LiveFor under
// a usual ScanInterval, since a client of another ScanInterval may
// announce less often than this one.
func (f *Fleet) formatWindow() time.Duration { return max(f.LiveFor(), time.Minute) }

// ReadFormat reads the format the namespace writes (at Start: the
// announcements reread it). fresh asks to switch a fresh namespace to the
// current format at once: the caller saw no topic, and the switch happens
// only when no client but this one is live.
func (f *Fleet) ReadFormat(ctx context.Context, fresh bool) error {
	if f.older {
		return nil
	}
	if fresh {
		if _, err := f.switchFormat(ctx, f.id); err != nil {
			return err
		}
	}
	v, err := f.rdb.Get(ctx, f.keys[4]).Result()
	if err != nil && err != redis.Nil {
		return fmt.Errorf("read format: %w", err)
	}
	f.format.Store(v)
	return nil
}

// UpgradeFormat switches the namespace to the current format of the job
// state, unless a live client does not read it: then it writes nothing and
// returns those clients' ids.
func (f *Fleet) UpgradeFormat(ctx context.Context) (outdated []string, err error) {
	return f.switchFormat(ctx, "")
}

func (f *Fleet) switchFormat(ctx context.Context, alone string) ([]string, error) {
	v, err := formatScript.Run(ctx, f.rdb, []string{f.keys[0], f.keys[3], f.keys[4], f.keys[2]},
		f.formatWindow().Milliseconds(), keys.FormatCurrent, maxFleet, alone).Slice()
	if err != nil {
		return nil, fmt.Errorf("switch format: %w", err)
	}
	if len(v) == 0 {
		return nil, fmt.Errorf("switch format: bad reply %v", v)
	}
	if ok, _ := v[0].(int64); ok == 1 {
		if !f.older && !keys.FormatAtLeast(f.readFormat(), keys.FormatCurrent) {
			f.format.Store(keys.FormatCurrent)
		}
		return nil, nil
	}
	ids := strs(v[1:])
	slices.Sort(ids)
	return ids, nil
}

// LiveFor is how long a client that stopped announcing still counts as
// alive: two and a half announcement intervals, so a live client that
// is a little late is not dropped.
func (f *Fleet) LiveFor() time.Duration { return f.interval * 5 / 2 }

// SetUnreachable sets the bucket addresses this client cannot move, told
// to the others from its next Announce on (at most MaxUnreachable of
// them).
func (f *Fleet) SetUnreachable(addresses []string) {
	addresses = slices.Sorted(slices.Values(addresses))
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mine = strings.Join(addresses[:min(len(addresses), MaxUnreachable)], "\n")
}

// Announce records this client as alive, with the buckets it cannot move,
// and rereads the live clients and theirs. It reports whether the live
// set, or the buckets its clients cannot move, changed.
func (f *Fleet) Announce(ctx context.Context) (bool, error) {
	f.mu.Lock()
	prune := f.announced%pruneEvery == 0
	f.announced++
	mine := f.mine
	f.mu.Unlock()
	reads := keys.FormatCurrent
	if f.older {
		reads = ""
	}
	v, err := announceScript.Run(ctx, f.rdb, f.keys, f.id, f.LiveFor().Milliseconds(), maxFleet, prune, mine, reads).Slice()
	if err == nil && len(v) != 4 {
		err = fmt.Errorf("bad reply %v", v)
	}
	if err != nil {
		return false, fmt.Errorf("announce mover: %w", err)
	}
	ids := strs(v[0])
	if !slices.Contains(ids, f.id) {
		ids = append(ids, f.id) // past maxFleet: still move what hashes to us
	}
	slices.Sort(ids)
	pairs := strs(v[1])
	cannot := map[string]map[string]bool{}
	for i := 0; i+1 < len(pairs); i += 2 {
		set := map[string]bool{}
		for _, a := range strings.Split(pairs[i+1], "\n") {
			set[a] = true
		}
		cannot[pairs[i]] = set
	}
	format, _ := v[2].(string)
	outdated := strs(v[3])
	slices.Sort(outdated)
	f.format.Store(format)
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := !slices.Equal(ids, f.live) || !sameCannot(cannot, f.cannot)
	f.live, f.cannot, f.outdated = ids, cannot, outdated
	return changed, nil
}

func strs(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func sameCannot(a, b map[string]map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for id, as := range a {
		bs, ok := b[id]
		if !ok || len(as) != len(bs) {
			return false
		}
		for addr := range as {
			if !bs[addr] {
				return false
			}
		}
	}
	return true
}

// Leave removes this client from the live set, so its buckets pass to the
// others at their next announcement instead of after LiveFor.
func (f *Fleet) Leave(ctx context.Context) error {
	pipe := f.rdb.TxPipeline()
	pipe.ZRem(ctx, f.keys[0], f.id)
	pipe.HDel(ctx, f.keys[1], f.id)
	pipe.HDel(ctx, f.keys[3], f.id)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("leave movers: %w", err)
	}
	return nil
}

// Owns reports whether this client owns the bucket (or topic) at address:
// it is the live client of highest weight among those that can move it,
// or among all when none can.
func (f *Fleet) Owns(address string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	best, bestW := "", uint64(0)
	for _, id := range f.live {
		if f.cannot[id][address] {
			continue
		}
		if w := weight(id, address); best == "" || w > bestW || (w == bestW && id > best) {
			best, bestW = id, w
		}
	}
	if best == "" {
		best = Owner(f.live, address)
	}
	return best == f.id
}

// Size is the number of live clients this client knows of.
func (f *Fleet) Size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

// ReaperAddress is what the fleet ranks its clients by for the reapers'
// looks for silent consumers: braces, which no topic name holds, keep it
// apart from every topic's and bucket's address.
const ReaperAddress = "{reaper}"

// Ranks reports whether this client is among the k live clients of
// highest weight for address: the owner and the k-1 next in line.
func (f *Fleet) Ranks(address string, k int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Ranks(f.live, f.id, address, k)
}

// Ranks reports whether id is among the k clients of live (id counted
// among them) of highest weight for address, ranked as Owner ranks them.
func Ranks(live []string, id, address string, k int) bool {
	mine, above := weight(id, address), 0
	for _, other := range live {
		if w := weight(other, address); other != id && (w > mine || (w == mine && other > id)) {
			above++
		}
	}
	return above < k
}

// Owner returns the client of live that owns address: the one with the
// highest weight hash(client, address). Every client that sees the same
// live set picks the same owner, and when a client joins or leaves only
// the buckets it wins or held change hands. "" when live is empty.
func Owner(live []string, address string) string {
	best, bestW := "", uint64(0)
	for _, id := range live {
		w := weight(id, address)
		if best == "" || w > bestW || (w == bestW && id > best) {
			best, bestW = id, w
		}
	}
	return best
}

func weight(id, address string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write([]byte(address))
	return mix(h.Sum64())
}

// mix is splitmix64's finaliser: fnv's low bits alone spread poorly.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
