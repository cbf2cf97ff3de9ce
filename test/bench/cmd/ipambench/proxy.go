package main

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/containernetworking/plugins/pkg/ns"
)

// countingProxy forwards TCP connections made to it, inside a network
// namespace, to a target there, and counts the bytes the target sends
// back: what a daemon whose kubeconfig names the proxy receives from the
// API server (TLS passes through untouched).
type countingProxy struct {
	ln       net.Listener
	received atomic.Int64
	wg       sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
}

// startCountingProxy listens on listen inside the namespace at nsPath and
// forwards each connection to target there.
func startCountingProxy(nsPath, listen, target string) (*countingProxy, error) {
	p := &countingProxy{}
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		p.ln, err = net.Listen("tcp", listen)
		return err
	})
	if err != nil {
		return nil, err
	}
	dial := dialIn(nsPath)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := p.ln.Accept()
			if err != nil {
				return
			}
			up, err := dial(context.Background(), "tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(up, c)
				_ = up.(*net.TCPConn).CloseWrite()
			}()
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(countingWriter{c, &p.received}, up)
				_ = c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return p, nil
}

// countingWriter adds what it writes to n.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	k, err := c.w.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// stop closes the listener and every connection, and waits for the copies.
func (p *countingProxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
