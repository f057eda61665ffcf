package redeq_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// r11Proxy is a TCP proxy in front of a Redis server. It recognises the
// connections that subscribe (pub/sub) and, once deafened, silently drops
// every byte the server sends on them, while the connection stays open:
// a subscription that died without a reset (a middlebox that stopped
// forwarding, a half-open connection).
type r11Proxy struct {
	ln       net.Listener
	upstream string
	deaf     atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func startR11Proxy(t *testing.T, upstream string) *r11Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &r11Proxy{ln: ln, upstream: upstream}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *r11Proxy) Addr() string { return p.ln.Addr().String() }

func (p *r11Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

func (p *r11Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.DialTimeout("tcp", p.upstream, 2*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		var sub atomic.Bool
		go func() { // client -> server
			buf := make([]byte, 32<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe")) {
						sub.Store(true)
					}
					if _, werr := u.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = u.Close()
			_ = c.Close()
		}()
		go func() { // server -> client
			buf := make([]byte, 32<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 && !(sub.Load() && p.deaf.Load()) {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					if err != io.EOF {
						_ = err
					}
					break
				}
			}
			_ = u.Close()
			_ = c.Close()
		}()
	}
}
