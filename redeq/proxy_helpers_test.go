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
//     in order;
//   - holdNew: accept new connections and never answer them (a dial that
//     hangs in its handshake).
//
// Connections that never subscribe are forwarded untouched.
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

	stop  chan struct{}
	mu    sync.Mutex
	conns []net.Conn
}

func startFaultProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, stop: make(chan struct{})}
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

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.holdNew.Load() {
			// Open, and silent: a dial that succeeds and a handshake
			// that never gets an answer.
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			continue
		}
		u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.open.Add(1)
		var sub atomic.Bool
		var once sync.Once
		done := func() {
			once.Do(func() {
				p.open.Add(-1)
				if sub.Load() {
					p.subOpen.Add(-1)
				}
			})
			_ = u.Close()
			_ = c.Close()
		}
		go func() { // client -> server
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe")) {
						if !sub.Swap(true) {
							p.subs.Add(1)
							p.subOpen.Add(1)
						}
					}
					if _, werr := u.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			done()
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
			for {
				frame, isMsg, err := readRESP(br)
				if err != nil {
					return
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
