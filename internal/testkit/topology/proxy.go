//go:build linux

package topology

import (
	"fmt"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to a target address.
// Freeze stops all forwarding while keeping every socket open, as a network
// partition does: clients see neither data nor an error, only silence, until
// Thaw or until their own timeouts give up. Its methods are safe for
// concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	frozen bool
	thawed chan struct{} // closed while not frozen; replaced by Freeze
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// StartProxy listens on a free port of 127.0.0.1 and forwards each
// connection to target (host:port), dialled when the connection arrives
// (or, while frozen, when thawed).
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("topology: proxy: %w", err)
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &Proxy{target: target, ln: ln, thawed: thawed, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's listening port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Freeze stops forwarding: bytes already read are held, nothing more is
// read, and new connections are accepted but not connected onwards.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen = true
		p.thawed = make(chan struct{})
	}
}

// Thaw resumes forwarding, delivering what was held.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

// gate returns a channel that is closed while forwarding is allowed.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.thawed
}

// Close stops listening and closes every connection. A frozen proxy is
// thawed first so that nothing waits on it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.Thaw()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	_ = c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	<-p.gate()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client); done <- struct{}{} }()
	go func() { p.pipe(client, server); done <- struct{}{} }()
	<-done
	// One side ended: end the other, as a real hop would.
	_ = client.Close()
	_ = server.Close()
	<-done
}

// pipe copies src to dst, holding each chunk while the proxy is frozen.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			<-p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: serve ends the other side
		}
		<-p.gate()
	}
}
