package redeq_test

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

// faultProxy is a TCP proxy in front of a Redis server, to put a faulty
// network between a client and the server. It parses the server's replies
// frame by frame (RESP2 and RESP3), recognises the connections that
// subscribe (pub/sub), and on those can:
//   - deaf: drop every frame the server sends, while the connection stays
//     open: a subscription that died without a reset (a middlebox that
//     stopped forwarding, a half-open connection);
//   - dropMsgs: drop every pub/sub message push ("message"/"pmessage") while
//     forwarding everything else (PING replies, subscribe confirmations):
//     a subscription that stays open and healthy-looking but carries
//     nothing (e.g. a cluster node cut off from the cluster bus);
//   - dropRate: drop that fraction (0..1) of message pushes at random;
//   - delay: forward each frame of a subscribed connection after a delay,
//     in order.
//
// On every connection it can:
//   - holdNew: accept new connections and never answer them (a dial that
//     hangs in its handshake);
//   - stall: hold every reply while set (a hung server), forwarding them
//     when cleared.
//
// And for the runs of add.lua only (a request holding "evalsha" and an add
// run's op key ":op:"):
//   - cutReply: forward the add request, then drop its reply and cut the
//     connection (a reply lost after the server ran the script);
//   - delayReply: forward the add request, and its reply after addDelay
//     (a late reply: go-redis gives up after its ReadTimeout and resends);
//   - delayRequest: hold the add request for addDelay before the server
//     gets it (the resend runs first, the original after it).
//
// Each of cutReply, delayReply and delayRequest counts down: it applies to
// that many add requests, then stops.
type faultProxy struct {
	ln       net.Listener
	upstream string

	dropMsgs atomic.Bool
	dropRate atomic.Uint64 // math.Float64bits
	delay    atomic.Int64  // ns

	dropped atomic.Int64
	open    atomic.Int64 // proxied client connections currently open
	subs    atomic.Int64 // subscribed connections ever seen
	subOpen atomic.Int64 // subscribed connections currently open
	deaf    atomic.Bool  // drop every frame to a subscribed connection
	holdNew atomic.Bool  // accept new connections, and never answer them

	stall        atomic.Bool
	cutReply     atomic.Int64
	delayReply   atomic.Int64
	delayRequest atomic.Int64
	addDelay     atomic.Int64 // ns, for delayReply and delayRequest; 300 ms unless set

	addRequests atomic.Int64 // add requests forwarded to the server (reruns included)
	faults      atomic.Int64 // add faults injected
	lateWritten atomic.Int64 // held requests written to the server, late

	stop   chan struct{}
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func startFaultProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, stop: make(chan struct{})}
	p.addDelay.Store(int64(300 * time.Millisecond))
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) setDropRate(f float64) { p.dropRate.Store(uint64(f * 1e6)) }

func (p *faultProxy) close() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// cutAll closes every proxied connection (both sides).
func (p *faultProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// track records connections to close at the end; false once closed.
func (p *faultProxy) track(c ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns = append(p.conns, c...)
	return true
}

// takeOne decrements n when positive and reports whether it did.
func takeOne(n *atomic.Int64) bool {
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

func isAddRun(b []byte) bool {
	l := bytes.ToLower(b)
	return bytes.Contains(l, []byte("evalsha")) && bytes.Contains(b, []byte(":op:"))
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.holdNew.Load() {
			// Open, and silent: a dial that succeeds and a handshake
			// that never gets an answer.
			if !p.track(c) {
				_ = c.Close()
				return
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
		p.open.Add(1)
		var sub, cut, late, wasHeld atomic.Bool
		var held sync.WaitGroup // requests held back, still to be written to u
		var once sync.Once
		done := func() {
			once.Do(func() {
				p.open.Add(-1)
				if sub.Load() {
					p.subOpen.Add(-1)
				}
				if !wasHeld.Load() {
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
			_ = c.Close()
		}
		go func() { // client -> server
			var hold chan []byte // set once a request is held: what follows waits behind it
			defer func() {
				if hold != nil {
					close(hold)
				}
				done()
			}()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					chunk := buf[:n]
					if bytes.Contains(bytes.ToLower(chunk), []byte("subscribe")) {
						if !sub.Swap(true) {
							p.subs.Add(1)
							p.subOpen.Add(1)
						}
					}
					if isAddRun(chunk) {
						p.addRequests.Add(1)
						switch {
						case takeOne(&p.cutReply):
							p.faults.Add(1)
							cut.Store(true)
						case takeOne(&p.delayReply):
							p.faults.Add(1)
							late.Store(true)
						case hold == nil && takeOne(&p.delayRequest):
							p.faults.Add(1)
							// The client gives up on this connection and
							// resends on another; the server gets this
							// request (and whatever follows it here) late,
							// after the resend ran.
							hold = make(chan []byte, 1024)
							d := time.Duration(p.addDelay.Load())
							wasHeld.Store(true)
							held.Add(1)
							go func() {
								defer held.Done()
								time.Sleep(d)
								for b := range hold {
									if _, err := u.Write(b); err == nil {
										p.lateWritten.Add(1)
									}
								}
							}()
						}
					}
					if hold != nil {
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
		go func() { // server -> client, frame by frame
			defer done()
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
			var lateUntil time.Time // a late reply holds what follows it too
			for {
				frame, isMsg, err := readRESP(br)
				if err != nil {
					return
				}
				for p.stall.Load() {
					time.Sleep(time.Millisecond)
				}
				if cut.Load() {
					return // the reply is dropped, the connection cut
				}
				if sub.Load() {
					if p.deaf.Load() {
						p.dropped.Add(1)
						continue
					}
					if isMsg && p.dropMsgs.Load() {
						p.dropped.Add(1)
						continue
					}
					if r := p.dropRate.Load(); isMsg && r > 0 && rand.Float64() < float64(r)/1e6 {
						p.dropped.Add(1)
						continue
					}
				}
				at := time.Now()
				if sub.Load() {
					at = at.Add(time.Duration(p.delay.Load()))
				}
				if late.Swap(false) {
					lateUntil = time.Now().Add(time.Duration(p.addDelay.Load()))
				}
				if at.Before(lateUntil) {
					at = lateUntil
				}
				out <- item{at: at, frame: frame}
			}
		}()
	}
}

var errRESP = errors.New("bad resp")

// readRESP reads one complete RESP2/RESP3 value and reports whether it is a
// pub/sub message push (an array or push whose first element is "message",
// "pmessage" or "smessage").
func readRESP(br *bufio.Reader) ([]byte, bool, error) {
	var buf bytes.Buffer
	first, err := readValue(br, &buf)
	if err != nil {
		return nil, false, err
	}
	return buf.Bytes(), first == "message" || first == "pmessage" || first == "smessage", nil
}

// readValue appends one value to buf; for an aggregate it returns its first
// element when that is a string, for a string its content.
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
