package mux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"
)

// A relay carries TCP connections made inside the sandbox to the backend
// over the mux's stream, so a service on the host (proctor's model
// gateway) is reachable from a sandbox that has no network: the mux
// listens on the sandbox's loopback (KindListen) and opens a channel for
// each connection it accepts (KindAccept). The backend's side is a
// net.Listener whose connections are those channels.

// Backlog is how many accepted connections wait for Accept; more are
// refused.
const Backlog = 64

// Listen asks the mux to listen on a free TCP port of the sandbox's
// loopback and relay every connection to it. The listener ends with the
// stream, or with Close, after which the mux's connections are refused.
func (c *Client) Listen(ctx context.Context) (*Listener, error) {
	reply := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	id := c.nextReq
	c.nextReq++
	c.reqs[id] = reply
	// Registered before the mux hears of it: a connection can come in as
	// soon as it listens.
	l := &Listener{c: c, id: id, conns: make(chan *Conn, Backlog), done: make(chan struct{})}
	c.listeners[id] = l
	c.mu.Unlock()
	code, msg, err := c.await(ctx, id, reply, Frame{Kind: KindListen, Chan: id, Payload: []byte("127.0.0.1:0")})
	if err == nil && code != 0 {
		err = fmt.Errorf("listen in the sandbox: %s", msg)
	}
	port, perr := strconv.Atoi(msg)
	if err == nil && (perr != nil || port <= 0 || port > 65535) {
		err = fmt.Errorf("%w: listen answered port %q", ErrFrame, msg)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	// A connection may come in (push, on the reading goroutine) before
	// this is set: both under l.mu.
	l.mu.Lock()
	l.addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
	l.mu.Unlock()
	return l, nil
}

// accept hands a connection the mux accepted to its listener; one for a
// listener that is gone is closed at once. Its channel is registered
// either way, so what the mux sends for it before it hears of the close
// is taken and dropped.
func (c *Client) accept(f Frame) error {
	lid, err := strconv.ParseUint(string(f.Payload), 10, 32)
	if f.Chan&Accepted == 0 || err != nil {
		return fmt.Errorf("%w: accept of channel %d for listener %q", ErrFrame, f.Chan, f.Payload)
	}
	c.mu.Lock()
	if _, dup := c.chans[f.Chan]; dup {
		c.mu.Unlock()
		return fmt.Errorf("%w: accepted channel %d is open already", ErrFrame, f.Chan)
	}
	ch := newChannel(c, f.Chan)
	c.chans[f.Chan] = ch
	l := c.listeners[uint32(lid)]
	c.mu.Unlock()
	conn := &Conn{ch: ch}
	if l == nil || !l.push(conn) {
		go conn.Close() // not from the reading goroutine: a write may wait
	}
	return nil
}

// Listener is a relay's listener: a net.Listener of the connections made
// to a port of the sandbox's loopback.
type Listener struct {
	c     *Client
	id    uint32
	addr  net.Addr
	conns chan *Conn

	once sync.Once
	mu   sync.Mutex
	err  error
	done chan struct{}
}

var _ net.Listener = (*Listener)(nil)

// push queues a connection for Accept; false when the listener is closed
// or its backlog full.
func (l *Listener) push(c *Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.addr = l.addr
	if l.err != nil {
		return false
	}
	select {
	case l.conns <- c:
		return true
	default:
		return false
	}
}

// Accept waits for the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, l.err
	}
}

// end stops the listener with err and closes the connections nobody
// accepted.
func (l *Listener) end(err error) {
	l.once.Do(func() {
		l.mu.Lock()
		l.err = err
		close(l.done)
		l.mu.Unlock()
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
}

// Close stops accepting: connections the mux accepts from now on are
// closed. Those accepted before stay open.
func (l *Listener) Close() error {
	l.c.mu.Lock()
	delete(l.c.listeners, l.id)
	l.c.mu.Unlock()
	l.end(net.ErrClosed)
	return nil
}

// Addr is the address listened on, in the sandbox.
func (l *Listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// Port is the port listened on, in the sandbox.
func (l *Listener) Port() int {
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Conn is one relayed connection. Closing it closes the connection in the
// sandbox; there is no half-close.
type Conn struct {
	ch   *Channel
	addr net.Addr
	once sync.Once
}

var _ net.Conn = (*Conn)(nil)

func (c *Conn) Read(p []byte) (int, error)  { return c.ch.Read(p) }
func (c *Conn) Write(p []byte) (int, error) { return c.ch.Write(p) }

// Close ends the connection: a Read waiting returns, and the mux closes
// its side.
func (c *Conn) Close() error {
	c.once.Do(func() {
		c.ch.end(net.ErrClosed)
		c.ch.Close()
	})
	return nil
}

// LocalAddr and RemoteAddr are both the listener's address in the
// sandbox: the peer is somewhere in the sandbox.
func (c *Conn) LocalAddr() net.Addr  { return c.addr }
func (c *Conn) RemoteAddr() net.Addr { return c.addr }

// SetDeadline sets the read deadline: writes do not wait for the peer.
func (c *Conn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline ends a Read waiting past t with os.ErrDeadlineExceeded.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.ch.setDeadline(t)
	return nil
}

// SetWriteDeadline does nothing: a write hands its bytes to the stream
// and does not wait for the peer to read them.
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

// setDeadline sets the deadline a Read honours and wakes the Reads
// waiting, so they see it.
func (ch *Channel) setDeadline(t time.Time) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.deadline = t
	if ch.timer != nil {
		ch.timer.Stop()
		ch.timer = nil
	}
	if !t.IsZero() {
		ch.timer = time.AfterFunc(max(time.Until(t), 0), func() {
			ch.mu.Lock()
			ch.cond.Broadcast()
			ch.mu.Unlock()
		})
	}
	ch.cond.Broadcast()
}

// ErrNoRelay: a sandbox without the warden's mux cannot relay.
var ErrNoRelay = errors.New("this sandbox cannot relay connections (it runs without the warden: [sandbox] isolation = false)")
