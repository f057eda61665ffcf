package testutil

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Connection wrappers: a net.Conn between go-redis and the server that
// misbehaves as a network does, for the tests of what a client does when
// a reply is lost, late or cut. Dialer puts them in a client
// (redis.Options.Dialer); they stack, the outermost seeing go-redis's
// calls first. A mark is a byte string that picks the writes a wrapper
// acts on, usually a script's SHA (its EVALSHA).

// Dialer returns a go-redis Dialer that dials TCP and hands each
// connection, with its dial number (1 for the first), to wrap.
func Dialer(wrap func(n int, c net.Conn) net.Conn) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var dials atomic.Int32
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return wrap(int(dials.Add(1)), c), nil
	}
}

// WriteCount counts the writes that carry a mark, over every connection
// it is given to, and records when the last one went.
type WriteCount struct {
	n    atomic.Int32
	last atomic.Int64
}

// N is the number of marked writes so far.
func (w *WriteCount) N() int32 { return w.n.Load() }

// Last is when the last marked write went; zero before the first.
func (w *WriteCount) Last() time.Time {
	if l := w.last.Load(); l > 0 {
		return time.Unix(0, l)
	}
	return time.Time{}
}

// CountWrites counts in w the writes of c that carry mark.
func CountWrites(c net.Conn, mark []byte, w *WriteCount) net.Conn {
	return &countConn{Conn: c, mark: mark, w: w}
}

type countConn struct {
	net.Conn
	mark []byte
	w    *WriteCount
}

func (c *countConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.mark) {
		c.w.n.Add(1)
		c.w.last.Store(time.Now().UnixNano())
	}
	return c.Conn.Write(b)
}

// LoseReplies loses the replies of the writes of c that carry mark while
// lose is positive: each such write counts lose down by one (on below
// zero, so that its start value minus it is the number of marked
// writes), and once a loss is armed every read waits for the read
// deadline and times out, as when the network drops what the server
// sends back (go-redis then drops the connection). The command itself
// reaches the server and runs.
func LoseReplies(c net.Conn, mark []byte, lose *atomic.Int32) net.Conn {
	return &lossyConn{Conn: c, mark: mark, lose: lose}
}

type lossyConn struct {
	net.Conn
	mark     []byte
	lose     *atomic.Int32
	mu       sync.Mutex
	armed    bool
	deadline time.Time
}

func (c *lossyConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.mark) && c.lose.Add(-1) >= 0 {
		c.mu.Lock()
		c.armed = true
		c.mu.Unlock()
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *lossyConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	armed, deadline := c.armed, c.deadline
	c.mu.Unlock()
	if armed {
		time.Sleep(time.Until(deadline))
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	return c.Conn.Read(b)
}

// EOFAfterReply loses c right after the reply to its first write that
// carries mark: the command ran, its caller sees io.EOF.
func EOFAfterReply(c net.Conn, mark []byte) net.Conn {
	return &eofConn{Conn: c, mark: mark}
}

type eofConn struct {
	net.Conn
	mark  []byte
	armed atomic.Bool
	used  atomic.Bool
}

func (c *eofConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.mark) && !c.used.Swap(true) {
		c.armed.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *eofConn) Read(b []byte) (int, error) {
	if c.armed.Load() {
		_, _ = c.Conn.Read(b) // the reply: the command ran
		c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// LateReads delays each of the first n reads of c by late, as a network
// that delivers the replies of a fresh connection's handshake late.
func LateReads(c net.Conn, late time.Duration, n int32) net.Conn {
	lc := &lateReadsConn{Conn: c, late: late}
	lc.n.Store(n)
	return lc
}

type lateReadsConn struct {
	net.Conn
	late time.Duration
	n    atomic.Int32
}

func (c *lateReadsConn) Read(b []byte) (int, error) {
	if c.n.Add(-1) >= 0 {
		time.Sleep(c.late)
	}
	return c.Conn.Read(b)
}

// LateFirstWrite stalls the first write of c (a handshake's) by late, as
// a full send buffer does; go-redis bounds it by WriteTimeout.
func LateFirstWrite(c net.Conn, late time.Duration) net.Conn {
	return &lateWriteConn{Conn: c, late: late}
}

type lateWriteConn struct {
	net.Conn
	late time.Duration
	once sync.Once
}

func (c *lateWriteConn) Write(b []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.late) })
	return c.Conn.Write(b)
}

// SplitPipeline sends the next pipeline of c that holds two or more
// EVALSHAs, once armed, in two parts: the first command, then (after a
// pause in which the server runs it, and after between ran) the rest, as
// a server reads a large pipeline in parts and serves other clients
// between them. It disarms itself when it splits.
func SplitPipeline(c net.Conn, armed *atomic.Bool, between func()) net.Conn {
	return &splitConn{Conn: c, armed: armed, between: between}
}

type splitConn struct {
	net.Conn
	armed   *atomic.Bool
	between func()
}

func (c *splitConn) Write(b []byte) (int, error) {
	cmd := []byte("\r\n$7\r\nevalsha\r\n")
	first := bytes.Index(b, cmd)
	if first < 0 || !c.armed.Load() {
		return c.Conn.Write(b)
	}
	second := bytes.Index(b[first+len(cmd):], cmd)
	if second < 0 {
		return c.Conn.Write(b)
	}
	second += first + len(cmd)
	cut := bytes.LastIndex(b[:second], []byte("\r\n*")) + 2
	c.armed.Store(false)
	n, err := c.Conn.Write(b[:cut])
	if err != nil {
		return n, err
	}
	time.Sleep(100 * time.Millisecond) // the server runs the first command
	c.between()
	m, err := c.Conn.Write(b[cut:])
	return n + m, err
}
