//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/proctor-dev/proctor/sandbox/mux"
)

// The relay (sandbox/mux, relay.go): the mux listens on a port of the
// sandbox's loopback and carries each connection to the host on a channel
// of its own, so the host's model gateway is reachable from a sandbox
// without a network. The agent's processes share the sandbox's network
// namespace with the mux, so they reach the port; nothing outside the
// sandbox can.

// maxRelays bounds the relayed connections open at once: more are closed
// as they come.
const maxRelays = 64

// serveRelay is `warden relay`: the mux protocol for relays alone, on its
// standard streams, for a backend whose sandbox has no mux of its own
// (kubernetes runs it in an exec of its own). It starts no process.
func serveRelay(in io.Reader, out io.Writer) error {
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	s := newMuxServer(out)
	s.relayOnly = true
	return s.serve(in)
}

// relayFrame reports whether a relay-only mux handles f; a request it
// does not is answered as refused.
func (s *muxServer) relayFrame(f mux.Frame) bool {
	switch f.Kind {
	case mux.KindListen, mux.KindInput, mux.KindClose, mux.KindWindow:
		return true
	case mux.KindKill, mux.KindRun:
		go s.send(mux.KindDone, f.Chan, doneReply(errors.New("this warden only relays")))
	case mux.KindOpen:
		go s.send(mux.KindExit, f.Chan, []byte("start: this warden only relays"))
	}
	return false
}

// listen listens on addr, a port of the loopback, answers request id with
// the port, and relays every connection to it.
func (s *muxServer) listen(id uint32, addr string) {
	host, _, err := net.SplitHostPort(addr)
	if err == nil && host != "127.0.0.1" {
		err = fmt.Errorf("only 127.0.0.1, not %q", host)
	}
	var ln net.Listener
	if err == nil {
		ln, err = net.Listen("tcp4", addr)
	}
	if err != nil {
		s.send(mux.KindDone, id, doneReply(fmt.Errorf("listen: %w", err)))
		return
	}
	s.send(mux.KindDone, id, []byte("0\n"+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)))
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(50 * time.Millisecond) // out of descriptors, say
			continue
		}
		s.relay(id, conn)
	}
}

// relay opens a channel for conn, a connection to listener lid: what the
// peer sends goes to the host within the channel's window, what the host
// sends goes to the peer, and the connection closes when either side
// does.
func (s *muxServer) relay(lid uint32, conn net.Conn) {
	s.mu.Lock()
	if s.relays >= maxRelays {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.relays++
	s.nextConn = (s.nextConn + 1) &^ mux.Accepted
	id := mux.Accepted | s.nextConn
	c := &muxChan{s: s, id: id, credit: mux.Window}
	c.cond = sync.NewCond(&c.mu)
	s.chans[id] = c
	s.mu.Unlock()
	// Sent before any output of the channel: the same goroutines send
	// both, in order.
	s.send(mux.KindAccept, id, []byte(strconv.FormatUint(uint64(lid), 10)))
	go c.feed(conn) // closes conn when the host closes the channel
	go func() {
		c.forward(conn)
		conn.Close()
		c.exit("0")
		s.mu.Lock()
		s.relays--
		s.mu.Unlock()
	}()
}
