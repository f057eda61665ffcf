package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
)

var (
	//go:embed announce.lua
	announceSource string
	announceScript = redis.NewScript(announceSource)
)

// maxFleet bounds the clients one announcement returns.
const maxFleet = 10_000

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
type Fleet struct {
	rdb      redis.UniversalClient
	key      string
	id       string
	interval time.Duration

	mu        sync.Mutex
	live      []string // sorted, this client included
	announced int      // announcements made, for pruneEvery
}

// NewFleet returns the view of client id, which knows only itself until
// its first Announce.
func NewFleet(c redis.UniversalClient, prefix, id string, interval time.Duration) *Fleet {
	return &Fleet{rdb: c, key: keys.Movers(prefix), id: id, interval: interval, live: []string{id}}
}

// LiveFor is how long a client that stopped announcing still counts as
// alive: two and a half announcement intervals, so a live client that
// is a little late is not dropped.
func (f *Fleet) LiveFor() time.Duration { return f.interval * 5 / 2 }

// Announce records this client as alive and rereads the live clients. It
// reports whether the live set changed.
func (f *Fleet) Announce(ctx context.Context) (bool, error) {
	f.mu.Lock()
	prune := f.announced%pruneEvery == 0
	f.announced++
	f.mu.Unlock()
	ids, err := announceScript.Run(ctx, f.rdb, []string{f.key}, f.id, f.LiveFor().Milliseconds(), maxFleet, prune).StringSlice()
	if err != nil {
		return false, fmt.Errorf("announce mover: %w", err)
	}
	if !slices.Contains(ids, f.id) {
		ids = append(ids, f.id) // past maxFleet: still move what hashes to us
	}
	slices.Sort(ids)
	f.mu.Lock()
	defer f.mu.Unlock()
	changed := !slices.Equal(ids, f.live)
	f.live = ids
	return changed, nil
}

// Leave removes this client from the live set, so its buckets pass to the
// others at their next announcement instead of after LiveFor.
func (f *Fleet) Leave(ctx context.Context) error {
	if err := f.rdb.ZRem(ctx, f.key, f.id).Err(); err != nil {
		return fmt.Errorf("leave movers: %w", err)
	}
	return nil
}

// Owns reports whether this client owns the bucket (or topic) at address.
func (f *Fleet) Owns(address string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Owner(f.live, address) == f.id
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
