package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of one Redis server, to put a faulty
// network between a client and the server. It reads the server's replies
// value by value (RESP2 and RESP3) and recognises the connections that
// subscribe (pub/sub). Every fault is off until a test sets it:
//
// Any connection:
//   - Cut closes every connection open now (both sides);
//   - HoldNew accepts new connections and never answers them (a dial
//     that hangs in its handshake);
//   - Stall holds every reply while set (a hung server), forwarding them
//     when cleared.
//
// Requests that Match picks (say, a script's SHA and one of its keys);
// each of these counts down, applying to that many matched requests:
//   - CutReply: forward the request, then drop its reply and cut the
//     connection (a reply lost after the server ran the command);
//   - DelayReply: forward the request, and its reply after FaultDelay
//     (a late reply: go-redis gives up after its ReadTimeout and resends);
//   - DelayRequest: hold the request (and what follows it on its
//     connection) for FaultDelay before the server gets it, even after the
//     client gave up on the connection (the resend runs first, the
//     original after it).
//
// Subscribed connections:
//   - Deaf drops every value the server sends, the connection staying
//     open (a subscription that died without a reset);
//   - DropMessages drops every message push ("message", "pmessage",
//     "smessage") and forwards the rest (PING replies, confirmations): a
//     subscription that looks healthy and carries nothing;
//   - SetDropRate drops that fraction (0..1) of message pushes at random;
//   - SubDelay forwards each value after a delay, in order.
//
// Connections that no fault touches are forwarded untouched.
type Proxy struct {
	ln       net.Listener
	upstream string

	HoldNew atomic.Bool
	Stall   atomic.Bool

	CutReply     atomic.Int64
	DelayReply   atomic.Int64
	DelayRequest atomic.Int64
	FaultDelay   atomic.Int64 // ns, for DelayReply and DelayRequest; 300 ms to start with

	Deaf         atomic.Bool
	DropMessages atomic.Bool
	dropRate     atomic.Uint64 // parts per million
	SubDelay     atomic.Int64  // ns

	match atomic.Pointer[func([]byte) bool]

	open        atomic.Int64
	subs        atomic.Int64
	subOpen     atomic.Int64
	dropped     atomic.Int64
	matched     atomic.Int64
	faults      atomic.Int64
	lateWritten atomic.Int64
	held        atomic.Int64

	stop   chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

// StartProxy starts a Proxy to upstream on a free loopback port; it is
// closed at the end of the test.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream, stop: make(chan struct{})}
	p.FaultDelay.Store(int64(300 * time.Millisecond))
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Match sets what picks the requests of CutReply, DelayReply and
// DelayRequest: it sees each chunk a client writes.
func (p *Proxy) Match(f func(request []byte) bool) { p.match.Store(&f) }

// SetDropRate drops fraction f (0..1) of the message pushes to
// subscribed connections.
func (p *Proxy) SetDropRate(f float64) { p.dropRate.Store(uint64(f * 1e6)) }

// Open is the number of proxied connections open now.
func (p *Proxy) Open() int64 { return p.open.Load() }

// Subscriptions is the number of connections that ever subscribed.
func (p *Proxy) Subscriptions() int64 { return p.subs.Load() }

// SubscriptionsOpen is the number of subscribed connections open now.
func (p *Proxy) SubscriptionsOpen() int64 { return p.subOpen.Load() }

// Dropped is the number of values dropped on subscribed connections.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// Matched is the number of requests Match picked (reruns included).
func (p *Proxy) Matched() int64 { return p.matched.Load() }

// Faults is the number of CutReply, DelayReply and DelayRequest faults
// injected.
func (p *Proxy) Faults() int64 { return p.faults.Load() }

// LateWritten is the number of held requests written to the server, late.
func (p *Proxy) LateWritten() int64 { return p.lateWritten.Load() }

// Held is the number of requests DelayRequest holds back now, not yet
// written to the server: a test waits for it to reach 0 to know that every
// late request reached the server.
func (p *Proxy) Held() int64 { return p.held.Load() }

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.stop)
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Cut closes every proxied connection open now (both sides).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// LocalAddrs returns the local address of every connection the proxy
// holds open: among them, the client addresses the server sees for the
// proxied connections (CLIENT LIST's addr=), so that a test can pick
// those out.
func (p *Proxy) LocalAddrs() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]bool, len(p.conns))
	for _, c := range p.conns {
		out[c.LocalAddr().String()] = true
	}
	return out
}

func (p *Proxy) track(c ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns = append(p.conns, c...)
	return true
}

// take decrements n when positive and reports whether it did.
func take(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func (p *Proxy) matches(b []byte) bool {
	f := p.match.Load()
	return f != nil && (*f)(b)
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.HoldNew.Load() {
			// Open, and silent: a dial that succeeds and a handshake that
			// never gets an answer.
			if !p.track(c) {
				_ = c.Close()
			}
			continue
		}
		u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, u) {
			_ = c.Close()
			_ = u.Close()
			return
		}
		p.pipe(c, u)
	}
}

// pipe forwards between the client c and the server u.
func (p *Proxy) pipe(c, u net.Conn) {
	p.open.Add(1)
	var sub, cut, late, heldAny atomic.Bool
	var held sync.WaitGroup // requests held back, still to be written to u
	var once sync.Once
	kill := func() {
		_ = c.Close()
		once.Do(func() {
			p.open.Add(-1)
			if sub.Load() {
				p.subOpen.Add(-1)
			}
			if !heldAny.Load() {
				_ = u.Close()
				return
			}
			go func() {
				// A held request still reaches the server, late, after
				// its client gave up on the connection.
				held.Wait()
				time.Sleep(200 * time.Millisecond)
				_ = u.Close()
			}()
		})
	}
	go func() { // client -> server
		var hold chan []byte // set once a request is held: what follows waits behind it
		defer func() {
			if hold != nil {
				close(hold)
			}
			kill()
		}()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				chunk := buf[:n]
				if bytes.Contains(bytes.ToLower(chunk), []byte("subscribe")) && !sub.Swap(true) {
					p.subs.Add(1)
					p.subOpen.Add(1)
				}
				if p.matches(chunk) {
					p.matched.Add(1)
					switch {
					case take(&p.CutReply):
						p.faults.Add(1)
						cut.Store(true)
					case take(&p.DelayReply):
						p.faults.Add(1)
						late.Store(true)
					case hold == nil && take(&p.DelayRequest):
						p.faults.Add(1)
						heldAny.Store(true)
						hold = make(chan []byte, 1024)
						d := time.Duration(p.FaultDelay.Load())
						held.Add(1)
						go func() {
							defer held.Done()
							time.Sleep(d)
							for b := range hold {
								_, err := u.Write(b)
								p.held.Add(-1)
								if err == nil {
									p.lateWritten.Add(1)
								}
							}
						}()
					}
				}
				if hold != nil {
					p.held.Add(1)
					hold <- bytes.Clone(chunk)
					continue
				}
				if _, werr := u.Write(chunk); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // server -> client, value by value
		defer kill()
		type item struct {
			at    time.Time
			frame []byte
		}
		out := make(chan item, 4096)
		go func() {
			for it := range out {
				if d := time.Until(it.at); d > 0 {
					tm := time.NewTimer(d)
					select {
					case <-tm.C:
					case <-p.stop:
						tm.Stop()
						for range out {
						}
						return
					}
				}
				if _, err := c.Write(it.frame); err != nil {
					for range out {
					}
					return
				}
			}
		}()
		defer close(out)
		br := bufio.NewReaderSize(u, 64<<10)
		for {
			frame, isMsg, err := readRESP(br)
			if err != nil {
				return
			}
			for p.Stall.Load() {
				select {
				case <-p.stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
			if cut.Load() {
				return // the reply is dropped, the connection cut
			}
			at := time.Now()
			if late.Swap(false) {
				at = at.Add(time.Duration(p.FaultDelay.Load()))
			}
			if sub.Load() {
				if p.Deaf.Load() || (isMsg && p.DropMessages.Load()) {
					p.dropped.Add(1)
					continue
				}
				if r := p.dropRate.Load(); isMsg && r > 0 && rand.Float64() < float64(r)/1e6 {
					p.dropped.Add(1)
					continue
				}
				at = at.Add(time.Duration(p.SubDelay.Load()))
			}
			out <- item{at: at, frame: frame}
		}
	}()
}

var errRESP = errors.New("bad RESP value")

// readRESP reads one complete RESP2/RESP3 value and reports whether it is
// a pub/sub message push (an array or push whose first element is
// "message", "pmessage" or "smessage").
func readRESP(br *bufio.Reader) ([]byte, bool, error) {
	var buf bytes.Buffer
	first, err := readValue(br, &buf)
	if err != nil {
		return nil, false, err
	}
	return buf.Bytes(), first == "message" || first == "pmessage" || first == "smessage", nil
}

// readValue appends one value to buf; for an aggregate it returns its
// first element when that is a string, for a string its content.
func readValue(br *bufio.Reader, buf *bytes.Buffer) (string, error) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return "", err
	}
	buf.Write(line)
	if len(line) < 3 {
		return "", errRESP
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return body, nil
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", errRESP
		}
		if n < 0 {
			return "", nil
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(br, data); err != nil {
			return "", err
		}
		buf.Write(data)
		return string(data[:n]), nil
	case '*', '>', '~', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil {
			return "", errRESP
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		first := ""
		for i := 0; i < n; i++ {
			s, err := readValue(br, buf)
			if err != nil {
				return "", err
			}
			if i == 0 {
				first = s
			}
		}
		if line[0] == '|' { // an attribute precedes the real reply
			return readValue(br, buf)
		}
		return first, nil
	}
	return "", errRESP
}
