package redeq_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// clusterMasters lists the addresses of the masters of the cluster rdb
// reaches.
func clusterMasters(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	var out []string
	for _, s := range slots {
		if a := s.Nodes[0].Addr; !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// masterOf returns the address of the master holding key (or channel).
func masterOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	return nodeOf(t, rdb, key)
}

// spareMaster looks for a prefix under which one master of the cluster
// holds none of the keys a client needs whatever its buckets (the fleet,
// the topic set, the wake channel, and the keys of each topic of
// needed), and returns the prefix and that master. avoid lists further
// keys, made from the prefix, that must not live on it.
func spareMaster(t *testing.T, rdb redis.UniversalClient, needed []string, avoid func(prefix string) []string) (string, string) {
	t.Helper()
	masters := clusterMasters(t, rdb)
	for range 500 {
		prefix := testutil.Prefix(t)
		used := fleetMasters(t, rdb, prefix, needed, avoid)
		for _, m := range masters {
			if !used[m] {
				return prefix, m
			}
		}
	}
	t.Fatal("no prefix leaves a master free of the fleet's keys")
	return "", ""
}

// spareMasterIs is spareMaster for the given master: a prefix under which
// it holds none of the keys a client needs.
func spareMasterIs(t *testing.T, rdb redis.UniversalClient, needed []string, master string) string {
	t.Helper()
	for range 500 {
		prefix := testutil.Prefix(t)
		if !fleetMasters(t, rdb, prefix, needed, nil)[master] {
			return prefix
		}
	}
	t.Fatalf("no prefix leaves master %s free of the fleet's keys", master)
	return ""
}

// fleetMasters is the set of masters that hold a key a client needs under
// prefix (see spareMaster).
func fleetMasters(t *testing.T, rdb redis.UniversalClient, prefix string, needed []string, avoid func(prefix string) []string) map[string]bool {
	t.Helper()
	ks := []string{keys.Movers(prefix), keys.Topics(prefix), keys.Retired(prefix), keys.WakeChannel(prefix),
		keys.ReadyChannel(prefix), keys.Alive(prefix)}
	for _, topic := range needed {
		ks = append(ks, keys.ForTopic(prefix, topic).Meta())
	}
	if avoid != nil {
		ks = append(ks, avoid(prefix)...)
	}
	used := map[string]bool{}
	for _, k := range ks {
		used[masterOf(t, rdb, k)] = true
	}
	return used
}

// refusing is a cluster client of addrs whose dialer refuses every
// connection to the node at refused, as a partition between this client
// and that node would.
func refusing(t *testing.T, addrs []string, refused string) *redis.ClusterClient {
	t.Helper()
	var d net.Dialer
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == refused {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// hanging is a cluster client of addrs whose connections to the node at
// hung, once hang is set, drop what they are to write, so that their
// calls get no answer until go-redis's read timeout.
func hanging(t *testing.T, addrs []string, hung string, hang *atomic.Bool) *redis.ClusterClient {
	t.Helper()
	var d net.Dialer
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil || addr != hung {
				return conn, err
			}
			return dropConn{Conn: conn, drop: hang}, nil
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// dropConn drops what it is to write while drop is set.
type dropConn struct {
	net.Conn
	drop *atomic.Bool
}

func (c dropConn) Write(b []byte) (int, error) {
	if c.drop.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// TestHungMasterKeepsClientAnnouncing: a client whose calls to one
// master of the cluster never get an answer keeps announcing itself at
// its pace while its first look at whether its topics are idle (a
// pipeline over every bucket, so every master) waits on that master: it
// never goes silent for as long as the others take to count it dead.
func TestHungMasterKeepsClientAnnouncing(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	be := testutil.Cluster(t)
	probe := be.New(t)
	const topic = "t"
	prefix, hung := spareMaster(t, probe, []string{topic}, nil)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	cfg.ScanInterval = 500 * time.Millisecond
	cfg.RetireAfter = time.Hour
	e := setup(t, be, cfg)
	ctx := context.Background()
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "x", Delay: time.Hour}))
	movers := keys.Movers(prefix)
	onHung := 0
	for _, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
		if n == hung {
			onHung++
		}
	}
	require.Positive(t, onHung, "no bucket on the master that hangs")

	var hang atomic.Bool
	rdb := hanging(t, be.Addrs, hung, &hang)
	// The master hangs from A's first announcement on: Start's PING
	// may go to any node.
	rdb.AddHook(cmdHook{after: func(ctx context.Context, cmd redis.Cmder) {
		if names(cmd, movers) {
			hang.Store(true)
		}
	}})
	a, err := redeq.New(rdb, e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	require.NoError(t, a.Start(ctx))
	testutil.Eventually(t, 5*time.Second, "A announced", func() bool { return e.rdb.ZCard(ctx, movers).Val() == 1 })
	liveFor := cfg.ScanInterval * 5 / 2
	// go-redis gives up on the hung master after its 3 s read timeout.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		now, err := e.rdb.Time(ctx).Result()
		require.NoError(t, err)
		ids, err := e.rdb.ZRangeByScore(ctx, movers, &redis.ZRangeBy{Min: fmt.Sprint(now.UnixMilli() - liveFor.Milliseconds()), Max: "+inf"}).Result()
		require.NoError(t, err)
		require.Equal(t, []string{a.ConsumerID()}, ids, "A silent for %v", liveFor)
	}
}

// TestOwnerCutOffFromMasterHandsItsBucketsOver: a client that cannot
// reach one master of the cluster (client A) stops claiming the buckets
// that live there, and a client that reaches every master (client B)
// moves them: every job runs soon after it is due, though A keeps
// announcing itself and owns its share of the other buckets.
func TestOwnerCutOffFromMasterHandsItsBucketsOver(t *testing.T) {
	be := testutil.Cluster(t)
	probe := be.New(t)
	const topic = "t"
	prefix, cut := spareMaster(t, probe, []string{topic}, nil)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	e := setup(t, be, cfg)
	ctx := context.Background()
	onCut := 0
	for _, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
		if n == cut {
			onCut++
		}
	}
	require.Positive(t, onCut, "no bucket on the master A cannot reach")

	a, err := redeq.New(refusing(t, be.Addrs, cut), e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	require.NoError(t, a.Start(ctx))
	var runs jobRuns
	l := newListener(topic, runs.handler(0))
	l.workers = 8
	startWith(t, e.c, l)
	testutil.Eventually(t, 5*time.Second, "both clients announced", func() bool {
		return e.rdb.ZCard(ctx, keys.Movers(prefix)).Val() == 2
	})

	const jobs = 64
	for i := range jobs {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("j", i), Delay: time.Second}))
	}
	// Due in 1 s; then UnreachableAfter (3 scans) and two announcements
	// pass before B moves what A could not.
	testutil.Eventually(t, time.Second+40*cfg.ScanInterval, "every job ran", func() bool { return runs.ranAll("j", jobs, nil) })
	for id, r := range runs.ByID() {
		require.Len(t, r, 1, "job %s ran more than once", id)
	}
	require.EqualValues(t, 2, e.rdb.ZCard(ctx, keys.Movers(prefix)).Val(), "A stopped announcing")
}

// TestMoverWorksBesideTopicOnDeadMaster: a client started while one
// master of the cluster is down (cluster-require-full-coverage no, and
// no replica takes over) moves the topics it can read: a topic recorded
// earlier whose meta lives on the dead master holds up nothing but its
// own jobs, and a job of another topic, all of whose keys live on the
// healthy masters, runs as soon as it is due.
func TestMoverWorksBesideTopicOnDeadMaster(t *testing.T) {
	cl := testutil.StartCluster(t, 3, time.Second)
	ctx := context.Background()
	for _, addr := range cl.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		require.NoError(t, n.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err())
		require.NoError(t, n.ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err())
		n.Close()
	}
	be := clusterBackend(cl.Addrs, false)
	probe := be.New(t)
	// t1 has its meta on the master to be killed; t2 has none of its
	// keys there.
	var t1, t2 string
	prefix, dead := spareMaster(t, probe, nil, nil)
	for i := 0; t1 == "" || t2 == ""; i++ {
		require.Less(t, i, 1000, "no topic names fit")
		name := fmt.Sprint("t", i)
		meta, bucket := masterOf(t, probe, keys.ForTopic(prefix, name).Meta()), masterOf(t, probe, keys.ForBucket(prefix, name, 0).Pool())
		switch {
		case t1 == "" && meta == dead:
			t1 = name
		case t2 == "" && meta != dead && bucket != dead:
			t2 = name
		}
	}
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: t1, ID: "earlier", Delay: time.Hour}))
	cl.Node(dead).Kill()

	c, err := redeq.New(be.New(t), e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	l := newListener(t2, nil)
	startWith(t, c, l)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: t2, ID: "now"}))
	testutil.Eventually(t, 50*cfg.ScanInterval, "the job of the healthy topic ran", func() bool { return l.count() > 0 })
}

// cmdHook calls after with each command, alone or in a pipeline, once
// it has run.
type cmdHook struct {
	after func(ctx context.Context, cmd redis.Cmder)
}

func (h cmdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h cmdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(ctx, cmd)
		return err
	}
}

func (h cmdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.after(ctx, cmd)
		}
		return err
	}
}

// names reports whether cmd names s among its arguments.
func names(cmd redis.Cmder, s string) bool {
	for _, a := range cmd.Args() {
		if v, ok := a.(string); ok && v == s {
			return true
		}
	}
	return false
}

// hookedWith is a client over e's deployment with cfg whose connection
// runs hook.
func hookedWith(t *testing.T, e *env, cfg config.Config, hook redis.Hook) *redeq.Client {
	t.Helper()
	rdb := e.be.New(t)
	rdb.AddHook(hook)
	c, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}

// TestAddAsTopicRetiresIsMoved: a job added to a topic just as it
// retires is moved when due. Client X owns the topic's name and retires
// it; client Y, which never retires topics, owns its bucket. The job is
// added once X has looked at the topic for the last time in its pass and
// before any client drops the topic, so that no client takes its wake-up
// for one naming a topic it does not know, and Y's wake-up reaches a loop
// that Y stops at its next read of the topic set: X looks at the topic
// once more a little after it retired it, and records it again.
func TestAddAsTopicRetiresIsMoved(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	eachBeside(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		xcfg, ycfg := e.cfg, e.cfg
		xcfg.RetireAfter, ycfg.RetireAfter = time.Hour, config.RetireNever

		var (
			mu      sync.Mutex
			topic   string
			looks   int // X's looks at whether the topic is in use
			adding  = make(chan struct{})
			added   = make(chan struct{})
			scanned = make(chan struct{}, 1) // Y's loop of the topic's bucket called Redis since the Add began
		)
		x := hookedWith(t, e, xcfg, cmdHook{after: func(ctx context.Context, cmd redis.Cmder) {
			mu.Lock()
			tp := topic
			if tp == "" || cmd.Name() != "zcard" || !names(cmd, keys.ForTopic(e.cfg.Prefix, tp).Consumers()) {
				mu.Unlock()
				return
			}
			// The look before the retirement, the one after it, and the
			// look at the retired topics, which ends X's pass.
			looks++
			last := looks == 3
			mu.Unlock()
			if !last {
				return
			}
			close(adding)
			if err := e.c.Add(ctx, &redeq.Job{Topic: tp, ID: "late", Delay: 3 * time.Second}); err != nil {
				t.Error(err)
			}
			close(added)
			select {
			case <-scanned:
			case <-time.After(5 * time.Second):
				t.Error("Y's loop of the bucket did not wake up")
			}
		}})
		y := hookedWith(t, e, ycfg, cmdHook{after: func(ctx context.Context, cmd redis.Cmder) {
			mu.Lock()
			tp := topic
			mu.Unlock()
			select {
			case <-adding:
				if names(cmd, keys.ForBucket(e.cfg.Prefix, tp, 0).Scheduled()) {
					select {
					case scanned <- struct{}{}:
					default:
					}
				}
			default:
			}
		}})

		// A topic whose name X owns and whose bucket Y owns.
		live := []string{x.ConsumerID(), y.ConsumerID()}
		var tp string
		for i := 0; tp == ""; i++ {
			name := fmt.Sprint("r", i)
			if bucket.Owner(live, name) == x.ConsumerID() && bucket.Owner(live, keys.Address(name, 0)) == y.ConsumerID() {
				tp = name
			}
		}
		// Used earlier and idle for two hours: X retires it at its first look.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: tp, ID: "earlier", Delay: time.Hour}))
		_, err := e.c.Delete(ctx, tp, "earlier")
		require.NoError(t, err)
		now, err := e.rdb.Time(ctx).Result()
		require.NoError(t, err)
		meta := keys.ForTopic(e.cfg.Prefix, tp).Meta()
		require.NoError(t, e.rdb.HSet(ctx, meta, "idle", now.Add(-2*time.Hour).UnixMilli()).Err())
		mu.Lock()
		topic = tp
		mu.Unlock()

		require.NoError(t, y.Start(ctx))
		testutil.Eventually(t, 5*time.Second, "Y announced", func() bool { return e.rdb.ZCard(ctx, keys.Movers(e.cfg.Prefix)).Val() == 1 })
		require.NoError(t, x.Start(ctx))
		testutil.Eventually(t, 10*time.Second, "the job added as the topic retired", func() bool {
			select {
			case <-added:
				return true
			default:
				return false
			}
		})
		// Due 3 s after its Add.
		testutil.Eventually(t, 3*time.Second+30*e.cfg.ScanInterval, "the late job moved", func() bool { return stats(t, e.c, tp).Ready == 1 })
	})
}

// TestTopicsListsTopicsInUse: Topics lists the topics in use: a topic
// retired for want of jobs and consumers is left out, and listed again
// once a job is added to it.
func TestTopicsListsTopicsInUse(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cfg := e.cfg
		cfg.RetireAfter = time.Hour
		mover, err := redeq.New(e.be.New(t), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = mover.Shutdown(context.Background()) })
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "idle", ID: "x"}))
		_, err = e.c.Delete(ctx, "idle", "x")
		require.NoError(t, err)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "busy", ID: "x", Delay: time.Hour}))
		// Idle for two hours: the mover retires it at its first look.
		now, err := e.rdb.Time(ctx).Result()
		require.NoError(t, err)
		require.NoError(t, e.rdb.HSet(ctx, keys.ForTopic(e.cfg.Prefix, "idle").Meta(), "idle", now.Add(-2*time.Hour).UnixMilli()).Err())
		names := func() []string {
			infos, err := e.c.Topics(ctx)
			require.NoError(t, err)
			var out []string
			for _, i := range infos {
				out = append(out, i.Name)
			}
			return out
		}
		require.Equal(t, []string{"busy", "idle"}, names())
		require.NoError(t, mover.Start(ctx))
		testutil.Eventually(t, 10*time.Second, "the idle topic left out", func() bool { return slices.Equal(names(), []string{"busy"}) })

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "idle", ID: "again"}))
		testutil.Eventually(t, 10*time.Second, "the topic listed again", func() bool { return slices.Equal(names(), []string{"busy", "idle"}) })
	})
}

// hangDialer makes a cluster client of addrs whose connections to the
// master at hung stop answering once the returned func is called.
type hangDialer func(t *testing.T, addrs []string, hung string) (*redis.ClusterClient, func())

// hangByProxy puts a fault proxy between the client and the master at
// hung; hanging it holds every reply (the requests still reach the
// server) and leaves every new connection unanswered.
func hangByProxy(t *testing.T, addrs []string, hung string) (*redis.ClusterClient, func()) {
	t.Helper()
	p := testutil.StartProxy(t, hung)
	var d net.Dialer
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == hung {
				addr = p.Addr()
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() {
		p.Stall.Store(false)
		p.HoldNew.Store(false)
		p.Cut()
		c.Close()
	})
	return c, func() { p.HoldNew.Store(true); p.Stall.Store(true) }
}

// hangByDropping drops what the client writes to the master at hung:
// requests never reach it, on connections that stay open.
func hangByDropping(t *testing.T, addrs []string, hung string) (*redis.ClusterClient, func()) {
	t.Helper()
	var hang atomic.Bool
	c := hanging(t, addrs, hung, &hang)
	return c, func() { hang.Store(true) }
}

// TestOwnerHungOnOneMasterHandsItsBucketsOver: a client (A) whose calls
// to one master of the cluster stop answering (its replies held, or its
// requests dropped, on connections that stay open) while client B
// reaches every master. The buckets on that master that A owns are handed
// over to B: every job runs once, none before it is due, and none later
// than StepTimeout (here 1 s) + LockExpiry after it is due, on the hung
// master or not. The hand-over itself takes StepTimeout from A's first
// call that gets no answer, then B's next announcement and its first
// scan, which moves what is overdue by 2 x ScanInterval; the LockExpiry
// is slack for a loaded machine. A hung call holds up neither A's other
// buckets nor its announcements.
func TestOwnerHungOnOneMasterHandsItsBucketsOver(t *testing.T) {
	testutil.FaultTier(t)
	_, be := privateCluster(t, 3)
	for name, hang := range map[string]hangDialer{"replies_stalled": hangByProxy, "requests_dropped": hangByDropping} {
		t.Run(name, func(t *testing.T) { testOwnerHungOnOneMaster(t, be, hang) })
	}
}

func testOwnerHungOnOneMaster(t *testing.T, be testutil.Backend, hangWith hangDialer) {
	probe := be.New(t)
	prefix, hung := spareMaster(t, probe, nil, nil)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	e := setup(t, be, cfg)
	ctx := context.Background()

	rdbA, hang := hangWith(t, be.Addrs, hung)
	a, err := redeq.New(rdbA, e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	live := []string{a.ConsumerID(), e.c.ConsumerID()}
	// A topic whose meta is not on the master that hangs, and some of
	// whose buckets there A owns.
	topic := ""
	for i := 0; topic == ""; i++ {
		require.Less(t, i, 1000, "no topic name fits")
		name := fmt.Sprint("t", i)
		if masterOf(t, probe, keys.ForTopic(prefix, name).Meta()) == hung {
			continue
		}
		for b := range cfg.Concurrency {
			if masterOf(t, probe, keys.ForBucket(prefix, name, b).Pool()) == hung && bucket.Owner(live, keys.Address(name, b)) == a.ConsumerID() {
				topic = name
				break
			}
		}
	}
	nodes := bucketNodes(t, e, topic, cfg.Concurrency)
	require.NoError(t, a.Start(ctx))
	var runs jobRuns
	l := newListener(topic, runs.handler(0))
	l.workers = 8
	startWith(t, e.c, l)
	testutil.Eventually(t, 5*time.Second, "both clients announced", func() bool {
		return e.rdb.ZCard(ctx, keys.Movers(prefix)).Val() == 2
	})
	// Every bucket's owner holds its lock: A's locks on the master that
	// hangs live on until they expire.
	testutil.Eventually(t, 5*time.Second, "every bucket's lock taken", func() bool {
		for b := range cfg.Concurrency {
			if e.rdb.Exists(ctx, keys.ForBucket(prefix, topic, b).Lock()).Val() == 0 {
				return false
			}
		}
		return true
	})
	ownedOnHung := 0
	for b, n := range nodes {
		if n == hung && bucket.Owner(live, keys.Address(topic, b)) == a.ConsumerID() {
			ownedOnHung++
		}
	}
	require.Positive(t, ownedOnHung, "A owns no bucket on the master that hangs")

	hang()
	base := time.Now()
	// Due over 3 s from 200 ms on: before, during and after the hand-over.
	const jobs = 96
	due := map[string]time.Time{}
	for i := range jobs {
		id := fmt.Sprint("j", i)
		due[id] = base.Add(200*time.Millisecond + time.Duration(i)*30*time.Millisecond)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, RunAt: due[id]}))
	}
	testutil.Eventually(t, 60*time.Second, "every job ran", func() bool { return runs.ranAll("j", jobs, nil) })
	time.Sleep(2 * cfg.ScanInterval) // a second run, if any

	bound := bucket.MoverConfig{ScanInterval: cfg.ScanInterval}.StepTimeout() + cfg.LockExpiry
	var lateHung, lateOther time.Duration
	var early, twice, tooLate []string
	firsts, counts := runs.Firsts(), runs.Counts()
	for id, at := range firsts {
		b := bucketOf(id, cfg.Concurrency)
		late := at.Round(0).Sub(due[id].Round(0))
		handed := nodes[b] == hung && bucket.Owner(live, keys.Address(topic, b)) == a.ConsumerID()
		if handed {
			lateHung = max(lateHung, late)
		} else {
			lateOther = max(lateOther, late)
		}
		if d := earlyBy(at, due[id], base); d > 5*time.Millisecond {
			early = append(early, fmt.Sprintf("%s %v early", id, d))
		}
		if counts[id] > 1 {
			twice = append(twice, id)
		}
		if late > bound {
			tooLate = append(tooLate, fmt.Sprintf("%s (bucket %d, handed over %v) %v late", id, b, handed, late.Round(time.Millisecond)))
		}
	}
	t.Logf("%d of %d buckets on the hung master %s are A's; latest job there %v late, elsewhere %v late (bound %v)",
		ownedOnHung, cfg.Concurrency, hung, lateHung.Round(time.Millisecond), lateOther.Round(time.Millisecond), bound)
	require.Empty(t, early, "jobs ran before their due time")
	require.Empty(t, twice, "jobs ran twice")
	require.Empty(t, tooLate, "jobs ran later than %v after due", bound)
	require.EqualValues(t, 2, e.rdb.ZCard(ctx, keys.Movers(prefix)).Val(), "A stopped announcing")
}

// TestStartServesWhatItReachesWhenOneMasterHangs: a client (A) whose
// connections to one master of the cluster get no answer from the start
// (a proxy that holds every reply and leaves new connections unanswered)
// starts: Start returns nil, reports what does not answer through its
// logger, and A moves and runs the jobs it can reach, while client B,
// which reaches every master, takes the buckets on the hung one. Every
// job runs once, none before it is due. The hung master is the one
// go-redis sends the first keyless command (Start's check) to.
func TestStartServesWhatItReachesWhenOneMasterHangs(t *testing.T) {
	testutil.FaultTier(t)
	_, be := privateCluster(t, 3)
	probe := be.New(t)
	const topic = "t"
	slots, err := probe.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	hung := slots[0].Nodes[0].Addr // go-redis's Masters[0], where its round robin starts
	prefix := spareMasterIs(t, probe, []string{topic}, hung)
	testStartBesideHungMaster(t, be, prefix, hung)
}

func testStartBesideHungMaster(t *testing.T, be testutil.Backend, prefix, hung string) {
	const topic = "t"
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	e := setup(t, be, cfg)
	ctx := context.Background()
	nodes := bucketNodes(t, e, topic, cfg.Concurrency)
	require.Contains(t, nodes, hung, "no bucket on the master that hangs")

	var runs jobRuns
	lb := newListener(topic, runs.handler(0))
	lb.workers = 8
	startWith(t, e.c, lb)

	var logs lineLog
	cfgA := e.cfg
	cfgA.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("A's log:\n%s", strings.Join(logs.since(time.Time{}), "\n"))
		}
	})
	rdbA, hang := hangByProxy(t, be.Addrs, hung)
	hang()
	a, err := redeq.New(rdbA, cfgA)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	var ranByA atomic.Int64
	la := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ranByA.Add(1)
		return runs.handler(0)(ctx, job, ch)
	})
	la.workers = 8
	require.NoError(t, a.Register(la))
	require.NoError(t, a.Start(ctx), "A does not start while one master hangs")
	testutil.Eventually(t, 5*time.Second, "both clients announced", func() bool {
		return e.rdb.ZCard(ctx, keys.Movers(prefix)).Val() == 2
	})

	base := time.Now()
	const jobs = 64
	due := map[string]time.Time{}
	for i := range jobs {
		id := fmt.Sprint("j", i)
		due[id] = base.Add(200*time.Millisecond + time.Duration(i)*20*time.Millisecond)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, RunAt: due[id]}))
	}
	testutil.Eventually(t, 30*time.Second, "every job ran", func() bool { return runs.ranAll("j", jobs, nil) })
	time.Sleep(2 * cfg.ScanInterval) // a second run, if any
	var early, twice []string
	firsts, counts := runs.Firsts(), runs.Counts()
	for id, at := range firsts {
		if d := earlyBy(at, due[id], base); d > 5*time.Millisecond {
			early = append(early, fmt.Sprintf("%s %v early", id, d))
		}
		if counts[id] > 1 {
			twice = append(twice, id)
		}
	}
	require.Empty(t, early, "jobs ran before their due time")
	require.Empty(t, twice, "jobs ran twice")
	require.Positive(t, ranByA.Load(), "A ran none of the jobs it reaches")
	// Reported once its call gives up.
	testutil.Eventually(t, 2*redeq.StartPingTimeout, "A reported what does not answer", func() bool {
		for _, line := range logs.since(time.Time{}) {
			if strings.Contains(line, "addr="+hung) {
				return true
			}
		}
		return false
	})
}

// cuttable is a cluster client of addrs whose connections to the node at
// node can be cut at any time: cut closes the open ones and refuses new
// ones, as a partition between this client and that node would.
type cuttable struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   atomic.Bool
	node  string
}

func (c *cuttable) client(t *testing.T, addrs []string) *redis.ClusterClient {
	var d net.Dialer
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == c.node && c.cut.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil && addr == c.node {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		},
	})
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (c *cuttable) cutNow() {
	c.cut.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}

// TestOwnerCutOffMidRunHandsItsBucketsOver: a client that owns every
// bucket of a topic (and holds their locks) and then loses its
// connections to one master, refused from then on, keeps serving the
// buckets of the other masters, and the other clients take over the
// buckets it cannot move: every job runs once, within a few scan
// intervals of its due time plus the lock's expiry.
func TestOwnerCutOffMidRunHandsItsBucketsOver(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	probe := be.New(t)
	const topic = "t"
	for run := range 3 {
		t.Run(fmt.Sprint("run", run), func(t *testing.T) {
			prefix, cut := spareMaster(t, probe, []string{topic}, nil)
			cfg := testutil.Config(t)
			cfg.Prefix = prefix
			cfg.Concurrency = 16
			ctx := context.Background()
			var runs jobRuns
			var fromA atomic.Int64
			cc := &cuttable{node: cut}
			a, err := redeq.New(cc.client(t, be.Addrs), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			la := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				fromA.Add(1)
				return runs.handler(0)(ctx, job, ch)
			})
			startWith(t, a, la)
			e := setup(t, be, cfg)
			onCut := 0
			for _, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
				if n == cut {
					onCut++
				}
			}
			require.Positive(t, onCut)
			// A alone for a while: it owns and locks every bucket.
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "warm"}))
			testutil.Eventually(t, 10*time.Second, "warm-up ran", func() bool { return runs.ranAll("warm", 0, map[string]bool{"warm": true}) })
			b := e.another(t, nil)
			startWith(t, b, newListener(topic, runs.handler(0)))
			startWith(t, e.c, newListener(topic, runs.handler(0)))
			testutil.Eventually(t, 5*time.Second, "three clients announced", func() bool {
				return e.rdb.ZCard(ctx, keys.Movers(prefix)).Val() == 3
			})
			const jobs = 160
			for i := range jobs {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("j", i), Delay: time.Second}))
			}
			cc.cutNow()
			start := time.Now()
			before := fromA.Load()
			testutil.Eventually(t, time.Second+cfg.LockExpiry+40*cfg.ScanInterval, "every job ran", func() bool { return runs.ranAll("j", jobs, nil) })
			t.Logf("all ran %v after the cut; A ran %d of them", time.Since(start), fromA.Load()-before)
			for id, r := range runs.ByID() {
				require.Len(t, r, 1, "job %s ran more than once", id)
			}
			require.EqualValues(t, 3, e.rdb.ZCard(ctx, keys.Movers(prefix)).Val(), "A stopped announcing")
			// A keeps serving the reachable masters.
			for i := range 40 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("k", i)}))
			}
			testutil.Eventually(t, 40*cfg.ScanInterval, "every later job ran", func() bool { return runs.ranAll("k", 40, nil) })
		})
	}
}

// TestClientCutOffFromASharedKeysMasterKeepsServingTheRest: a client that
// loses its connections to one master, refused from then on, keeps
// running the jobs whose keys live on the other masters when that master
// holds the movers' set or the topic set; another started client moves
// and runs what it cannot. Cut off from the alive set's master, the client
// cannot prove it is alive, so it stops fetching (the heartbeat fetch
// gate, docs/operations.md) and says so, and another client runs every
// job: nothing is lost, nothing runs twice.
func TestClientCutOffFromASharedKeysMasterKeepsServingTheRest(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	probe := be.New(t)
	roles := map[string]func(string) string{"alive": keys.Alive, "movers": keys.Movers, "topics": keys.Topics}
	for _, role := range []string{"alive", "movers", "topics"} {
		t.Run(role, func(t *testing.T) {
			// Apart from the alive set's master, unless that is the case.
			prefix := testutil.Prefix(t)
			for role != "alive" && masterOf(t, probe, roles[role](prefix)) == masterOf(t, probe, keys.Alive(prefix)) {
				prefix = testutil.Prefix(t)
			}
			cut := masterOf(t, probe, roles[role](prefix))
			// A topic whose meta lives elsewhere than the role's key.
			topic := "t"
			for i := 0; masterOf(t, probe, keys.ForTopic(prefix, topic).Meta()) == cut; i++ {
				topic = fmt.Sprint("t", i)
			}
			cfg := testutil.Config(t)
			cfg.Prefix = prefix
			cfg.Concurrency = 16
			ctx := context.Background()
			e := setup(t, be, cfg)
			reachable := map[int]bool{}
			for b, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
				reachable[b] = n != cut
			}
			var runs jobRuns
			cc := &cuttable{node: cut}
			acfg := cfg
			var logs lineLog
			acfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			a, err := redeq.New(cc.client(t, be.Addrs), acfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			startWith(t, a, newListener(topic, runs.handler(0)))
			require.NoError(t, e.c.Start(ctx)) // a mover, no listener
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "warm"}))
			testutil.Eventually(t, 10*time.Second, "warm-up ran", func() bool { return runs.ranAll("", 0, map[string]bool{"warm": true}) })
			cc.cutNow()
			cutAt := time.Now()
			if role == "alive" {
				b := e.another(t, nil)
				startWith(t, b, newListener(topic, runs.handler(0)))
				all := map[string]bool{}
				for i := range 60 {
					id := fmt.Sprint("j", i)
					all[id] = true
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: 500 * time.Millisecond}))
				}
				testutil.Eventually(t, 500*time.Millisecond+cfg.LockExpiry+40*cfg.ScanInterval, "every job ran", func() bool { return runs.ranAll("", 0, all) })
				testutil.Eventually(t, 10*time.Second, "A reports that it does not fetch", func() bool {
					return slices.ContainsFunc(logs.since(cutAt), func(l string) bool { return strings.Contains(l, "fetch waits for a heartbeat") })
				})
				for id, r := range runs.ByID() {
					require.Len(t, r, 1, "job %s ran more than once", id)
				}
				return
			}
			want := map[string]bool{}
			for i := 0; len(want) < 40; i++ {
				id := fmt.Sprint("j", i)
				if !reachable[bucketOf(id, cfg.Concurrency)] {
					continue
				}
				want[id] = true
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: 500 * time.Millisecond}))
			}
			start := time.Now()
			testutil.Eventually(t, 10*time.Second, "A ran every job of the reachable masters", func() bool { return runs.ranAll("", 0, want) })
			t.Logf("%s's master cut: A ran them all %v after the cut", role, time.Since(start))

			// Another client with a listener runs the jobs of the master
			// A cannot reach: their buckets are moved whoever owned them.
			b := e.another(t, nil)
			startWith(t, b, newListener(topic, runs.handler(0)))
			cutJobs := map[string]bool{}
			for i := 0; len(cutJobs) < 20; i++ {
				id := fmt.Sprint("c", i)
				if reachable[bucketOf(id, cfg.Concurrency)] {
					continue
				}
				cutJobs[id] = true
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: 500 * time.Millisecond}))
			}
			testutil.Eventually(t, 500*time.Millisecond+cfg.LockExpiry+40*cfg.ScanInterval, "the cut master's jobs ran", func() bool { return runs.ranAll("", 0, cutJobs) })
			for id, r := range runs.ByID() {
				require.Len(t, r, 1, "job %s ran more than once", id)
			}
		})
	}
}

// TestStartServesWhenASharedKeysMasterHangs: the only started client (A)
// starts while its connections to the master holding the movers' set, or
// the topic set, hang (replies held, new connections unanswered); the
// alive set and the topic's meta live elsewhere. Start returns nil, and A
// runs, once each and none early, every job of the buckets on the masters
// that answer, within a few seconds of its due time.
func TestStartServesWhenASharedKeysMasterHangs(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	probe := be.New(t)
	roles := map[string]func(string) string{"movers": keys.Movers, "topics": keys.Topics}
	for _, role := range []string{"movers", "topics", "movers", "topics"} {
		t.Run(role, func(t *testing.T) {
			t.Parallel() // its own prefix, and a proxy that hangs only its own client's connections
			prefix := testutil.Prefix(t)
			for masterOf(t, probe, roles[role](prefix)) == masterOf(t, probe, keys.Alive(prefix)) {
				prefix = testutil.Prefix(t)
			}
			hung := masterOf(t, probe, roles[role](prefix))
			topic := "t"
			for i := 0; masterOf(t, probe, keys.ForTopic(prefix, topic).Meta()) == hung; i++ {
				topic = fmt.Sprint("t", i)
			}
			cfg := testutil.Config(t)
			cfg.Prefix = prefix
			cfg.Concurrency = 16
			ctx := context.Background()
			e := setup(t, be, cfg) // the producer: Add only, never started
			nodes := bucketNodes(t, e, topic, cfg.Concurrency)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "seed", Delay: time.Hour}))

			var runs jobRuns
			rdbA, hang := hangByProxy(t, be.Addrs, hung)
			hang()
			a, err := redeq.New(rdbA, e.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			l := newListener(topic, runs.handler(0))
			l.workers = 8
			require.NoError(t, a.Register(l))
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			began := time.Now()
			require.NoError(t, a.Start(sctx), "A does not start while the %s master hangs", role)
			t.Logf("Start returned after %v", time.Since(began).Round(time.Millisecond))

			base := time.Now()
			due := map[string]time.Time{}
			want := map[string]bool{}
			for i := 0; len(want) < 32; i++ {
				id := fmt.Sprint("j", i)
				if nodes[bucketOf(id, cfg.Concurrency)] == hung {
					continue
				}
				want[id] = true
				due[id] = base.Add(300*time.Millisecond + time.Duration(len(want))*20*time.Millisecond)
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, RunAt: due[id]}))
			}
			testutil.Eventually(t, 30*time.Second, "A ran every job of the masters that answer", func() bool { return runs.ranAll("", 0, want) })
			time.Sleep(2 * cfg.ScanInterval)
			var early, twice, late []string
			firsts, counts := runs.Firsts(), runs.Counts()
			for id, at := range firsts {
				if d := earlyBy(at, due[id], base); d > 5*time.Millisecond {
					early = append(early, fmt.Sprintf("%s %v early", id, d))
				}
				if counts[id] > 1 {
					twice = append(twice, id)
				}
				if l := at.Round(0).Sub(due[id].Round(0)); l > 5*time.Second {
					late = append(late, fmt.Sprintf("%s %v late", id, l.Round(time.Millisecond)))
				}
			}
			require.Empty(t, early, "jobs ran before their due time")
			require.Empty(t, twice, "jobs ran twice")
			require.Empty(t, late, "jobs of the masters that answer ran late")
		})
	}
}

// TestHungSharedKeyMasterHoldsUpOnlyItsJobs: a client (A) starts while
// its connections to the master of one of the fleet's shared keys hang
// (replies held, new connections unanswered), the topic's meta living
// elsewhere. Start returns within its bound (startBound: StepTimeout for
// each of its steps that waits on one node, after a ping that the masters
// that answer end at once). With the topic set's or the movers' set's
// master hung, A, the only client started, moves and runs every job of
// the buckets on the masters that answer within StepTimeout + LockExpiry
// of its due time (as a hand-over of a hung bucket takes at most), once
// each and none early. With the alive set's master hung, A's fetch gate
// closes by design; B, which reaches every master, runs those jobs just
// as soon.
func TestHungSharedKeyMasterHoldsUpOnlyItsJobs(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	probe := be.New(t)
	roles := map[string]func(string) string{"movers": keys.Movers, "topics": keys.Topics, "alive": keys.Alive}
	for _, role := range []string{"topics", "movers", "alive"} {
		t.Run(role, func(t *testing.T) {
			key := roles[role]
			prefix := testutil.Prefix(t)
			for {
				shared := 0
				for r, k := range roles {
					if r != role && masterOf(t, probe, k(prefix)) == masterOf(t, probe, key(prefix)) {
						shared++
					}
				}
				if shared == 0 {
					break
				}
				prefix = testutil.Prefix(t)
			}
			hung := masterOf(t, probe, key(prefix))
			topic := "t"
			for i := 0; masterOf(t, probe, keys.ForTopic(prefix, topic).Meta()) == hung; i++ {
				topic = fmt.Sprint("t", i)
			}
			cfg := testutil.Config(t)
			cfg.Prefix = prefix
			cfg.Concurrency = 16
			ctx := context.Background()
			e := setup(t, be, cfg) // the producer; B when the alive set's master hangs
			nodes := bucketNodes(t, e, topic, cfg.Concurrency)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "seed", Delay: time.Hour}))

			var runs jobRuns
			if role == "alive" {
				lb := newListener(topic, runs.handler(0))
				lb.workers = 8
				startWith(t, e.c, lb)
			}
			rdbA, hang := hangByProxy(t, be.Addrs, hung)
			hang()
			a, err := redeq.New(rdbA, e.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			l := newListener(topic, runs.handler(0))
			l.workers = 8
			require.NoError(t, a.Register(l))
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			began := time.Now()
			require.NoError(t, a.Start(sctx), "A does not start while the %s master hangs", role)
			took := time.Since(began)
			bound := startBound(cfg)
			require.LessOrEqual(t, took, bound+startSlack, "Start took longer than its bound while the %s master hangs", role)

			base := time.Now()
			due := map[string]time.Time{}
			want := map[string]bool{}
			for i := 0; len(want) < 32; i++ {
				id := fmt.Sprint("j", i)
				if nodes[bucketOf(id, cfg.Concurrency)] == hung {
					continue
				}
				want[id] = true
				due[id] = base.Add(300*time.Millisecond + time.Duration(len(want))*20*time.Millisecond)
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, RunAt: due[id]}))
			}
			late := bucket.MoverConfig{ScanInterval: cfg.ScanInterval}.StepTimeout() + cfg.LockExpiry
			testutil.Eventually(t, 30*time.Second, "every job of the masters that answer ran", func() bool { return runs.ranAll("", 0, want) })
			time.Sleep(2 * cfg.ScanInterval)
			var early, twice, tooLate []string
			firsts, counts := runs.Firsts(), runs.Counts()
			var latest time.Duration
			for id, at := range firsts {
				if d := earlyBy(at, due[id], base); d > 5*time.Millisecond {
					early = append(early, fmt.Sprintf("%s %v early", id, d))
				}
				if counts[id] > 1 {
					twice = append(twice, id)
				}
				l := at.Round(0).Sub(due[id].Round(0))
				latest = max(latest, l)
				if l > late {
					tooLate = append(tooLate, fmt.Sprintf("%s %v late", id, l.Round(time.Millisecond)))
				}
			}
			t.Logf("%s master hung: Start returned after %v (bound %v); the latest job ran %v after due (bound %v)",
				role, took.Round(time.Millisecond), bound, latest.Round(time.Millisecond), late)
			require.Empty(t, early, "jobs ran before their due time")
			require.Empty(t, twice, "jobs ran twice")
			require.Empty(t, tooLate, "jobs of the masters that answer ran late")
		})
	}
}

// startSlack is what a loaded machine adds to Start's bound.
const startSlack = time.Second

// startBound is how long Start may take on a cluster where one master
// hangs and another answers (Start's doc): its pings, StartPingTimeout
// plus the client's ReadTimeout (go-redis's default, 3 s, in these tests),
// then StepTimeout for each of its three steps that wait on one node (the
// job state format, the records of the listened topics, the first
// heartbeat).
func startBound(cfg config.Config) time.Duration {
	return redeq.StartPingTimeout + 3*time.Second + 3*bucket.MoverConfig{ScanInterval: cfg.ScanInterval}.StepTimeout()
}
