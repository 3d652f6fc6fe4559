package server

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// InProcess serves h inside this process, without a socket: the returned
// client's connections are in-memory pipes to an http.Server running h
// (any host name reaches it). Streaming and cancellation behave as over
// TCP. close stops the server and its connections.
func InProcess(h http.Handler) (client *http.Client, close func()) {
	l := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	tr := &http.Transport{DialContext: l.dial, MaxIdleConnsPerHost: 16, ForceAttemptHTTP2: false}
	return &http.Client{Transport: tr}, func() {
		tr.CloseIdleConnections()
		hs.Close()
	}
}

// pipeListener hands the server ends of net.Pipe connections to Serve.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-ctx.Done():
		c.Close()
		s.Close()
		return nil, ctx.Err()
	case <-l.done:
		c.Close()
		s.Close()
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }
