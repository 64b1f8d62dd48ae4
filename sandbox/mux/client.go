package mux

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Client is the backend's end of a mux stream. Its methods are safe for
// concurrent use.
type Client struct {
	w     io.Writer
	close func() error

	wmu sync.Mutex // one frame at a time

	mu      sync.Mutex
	chans   map[uint32]*Channel
	nextID  uint32
	reqs    map[uint32]chan Frame
	nextReq uint32
	// listeners are the relays' listeners, by their request id (relay.go).
	listeners map[uint32]*Listener
	err       error         // the stream's end: every channel and request sees it
	done      chan struct{} // closed when err is set
	hello     chan struct{}
}

// NewClient reads frames from r (the mux's stdout) until it ends, and
// writes requests to w (its stdin); close ends the stream.
func NewClient(r io.Reader, w io.Writer, close func() error) *Client {
	c := &Client{w: w, close: close, chans: map[uint32]*Channel{}, reqs: map[uint32]chan Frame{}, nextReq: 1,
		listeners: map[uint32]*Listener{}, done: make(chan struct{}), hello: make(chan struct{})}
	go c.demux(bufio.NewReaderSize(r, 64<<10))
	return c
}

// Ready waits for the mux's hello.
func (c *Client) Ready(ctx context.Context) error {
	select {
	case <-c.hello:
		return nil
	case <-c.done:
		return c.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Err is why the stream ended, or nil while it runs.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the stream; the mux, and with it the sandbox's processes,
// end when it does.
func (c *Client) Close() error {
	c.fail(errors.New("mux closed"))
	if c.close != nil {
		return c.close()
	}
	return nil
}

func (c *Client) send(f Frame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.Err(); err != nil {
		return err
	}
	if err := Write(c.w, f); err != nil {
		c.fail(fmt.Errorf("write to the mux: %w", err))
		return err
	}
	return nil
}

// demux hands each frame to its channel or request until the stream ends.
func (c *Client) demux(r *bufio.Reader) {
	for {
		f, err := Read(r)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			c.fail(fmt.Errorf("mux stream: %w", err))
			return
		}
		if err := c.deliver(f); err != nil {
			c.fail(err)
			return
		}
	}
}

func (c *Client) deliver(f Frame) error {
	switch f.Kind {
	case KindOutput, KindStderr, KindExit:
		c.mu.Lock()
		ch := c.chans[f.Chan]
		if f.Kind == KindExit {
			delete(c.chans, f.Chan) // its last frame
		}
		c.mu.Unlock()
		if ch == nil {
			return fmt.Errorf("%w: %c for unknown channel %d", ErrFrame, f.Kind, f.Chan)
		}
		return ch.deliver(f)
	case KindDone:
		if f.Chan == 0 {
			select {
			case <-c.hello:
			default:
				close(c.hello)
			}
			return nil
		}
		c.mu.Lock()
		reply := c.reqs[f.Chan]
		delete(c.reqs, f.Chan)
		c.mu.Unlock()
		if reply != nil {
			reply <- f
		}
		return nil
	case KindAccept:
		return c.accept(f)
	}
	return fmt.Errorf("%w: the mux sent %c", ErrFrame, f.Kind)
}

// fail ends the stream for every channel and request, once.
func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	close(c.done)
	// The maps are handed over, not shared: the reading goroutine may
	// still deliver (and delete) under c.mu while these end.
	chans, listeners := c.chans, c.listeners
	c.chans = map[uint32]*Channel{}
	c.reqs = map[uint32]chan Frame{}
	c.listeners = map[uint32]*Listener{}
	c.mu.Unlock()
	for _, ch := range chans {
		ch.end(err)
	}
	for _, l := range listeners {
		l.end(err)
	}
}

// Open starts argv on a new channel.
func (c *Client) Open(argv []string) (*Channel, error) {
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, errors.New("mux: argument holds a NUL byte")
		}
	}
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil, c.err
	}
	c.nextID++
	ch := newChannel(c, c.nextID)
	c.chans[ch.id] = ch
	c.mu.Unlock()
	if err := c.send(Frame{Kind: KindOpen, Chan: ch.id, Payload: Argv(argv)}); err != nil {
		return nil, err
	}
	return ch, nil
}

// Kill kills process group pgid, as the PID namespace whose init is
// nsInit numbers it (0: as the sandbox does).
func (c *Client) Kill(ctx context.Context, nsInit, pgid int) error {
	code, msg, err := c.request(ctx, KindKill, []byte(fmt.Sprintf("%d %d", nsInit, pgid)))
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("kill group %d: %s", pgid, msg)
	}
	return nil
}

// Run runs argv to completion outside every channel's namespaces and
// returns its exit status and the head of its stderr.
func (c *Client) Run(ctx context.Context, argv []string) (int, string, error) {
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return 0, "", errors.New("mux: argument holds a NUL byte")
		}
	}
	return c.request(ctx, KindRun, Argv(argv))
}

func (c *Client) request(ctx context.Context, kind Kind, payload []byte) (int, string, error) {
	reply := make(chan Frame, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, "", c.err
	}
	id := c.nextReq
	c.nextReq++
	c.reqs[id] = reply
	c.mu.Unlock()
	return c.await(ctx, id, reply, Frame{Kind: kind, Chan: id, Payload: payload})
}

// await sends req, the request id's frame, and waits for its KindDone on
// reply.
func (c *Client) await(ctx context.Context, id uint32, reply chan Frame, req Frame) (int, string, error) {
	if err := c.send(req); err != nil {
		return 0, "", err
	}
	select {
	case f := <-reply:
		code, msg, _ := bytes.Cut(f.Payload, []byte("\n"))
		n, err := strconv.Atoi(string(code))
		if err != nil {
			return 0, "", fmt.Errorf("%w: reply %q", ErrFrame, code)
		}
		return n, string(msg), nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.reqs, id)
		c.mu.Unlock()
		return 0, "", ctx.Err()
	case <-c.done:
		return 0, "", c.Err()
	}
}

// newChannel is channel id of c, with the whole window granted.
func newChannel(c *Client, id uint32) *Channel {
	ch := &Channel{c: c, id: id, credit: Window}
	ch.cond = sync.NewCond(&ch.mu)
	return ch
}

// Channel is one process's standard streams. Its stdout is read with
// Read; Write and Close are its stdin.
type Channel struct {
	c  *Client
	id uint32

	mu       sync.Mutex
	cond     *sync.Cond
	out      bytes.Buffer
	credit   int // bytes the mux may still send before an acknowledgement
	consumed int // bytes read and not yet acknowledged
	stderr   bytes.Buffer
	exit     string // the process's exit status, once it ended
	err      error  // the end of the stream for this channel
	// deadline, when set, ends a Read waiting past it (relay.go).
	deadline time.Time
	timer    *time.Timer
}

func (ch *Channel) deliver(f Frame) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	switch f.Kind {
	case KindOutput:
		if len(f.Payload) > ch.credit {
			return fmt.Errorf("%w: channel %d sent %d bytes over its window", ErrFrame, ch.id, len(f.Payload)-ch.credit)
		}
		ch.credit -= len(f.Payload)
		ch.out.Write(f.Payload)
	case KindStderr:
		if room := StderrMax - ch.stderr.Len(); room > 0 {
			ch.stderr.Write(f.Payload[:min(len(f.Payload), room)])
		}
	case KindExit:
		ch.exit = string(f.Payload)
		if ch.err == nil {
			ch.err = io.EOF
		}
	}
	ch.cond.Broadcast()
	return nil
}

func (ch *Channel) end(err error) {
	ch.mu.Lock()
	if ch.err == nil {
		ch.err = err
	}
	ch.cond.Broadcast()
	ch.mu.Unlock()
}

// Read reads the process's stdout; after its last byte it returns io.EOF
// (the process ended) or the stream's error.
func (ch *Channel) Read(p []byte) (int, error) {
	ch.mu.Lock()
	for ch.out.Len() == 0 && ch.err == nil {
		if !ch.deadline.IsZero() && !time.Now().Before(ch.deadline) {
			ch.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		ch.cond.Wait()
	}
	if ch.out.Len() == 0 {
		err := ch.err
		ch.mu.Unlock()
		return 0, err
	}
	n, _ := ch.out.Read(p)
	ch.consumed += n
	ack := 0
	if ch.consumed >= Window/4 {
		ack, ch.consumed = ch.consumed, 0
		ch.credit += ack
	}
	ch.mu.Unlock()
	if ack > 0 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(ack))
		ch.c.send(Frame{Kind: KindWindow, Chan: ch.id, Payload: b[:]})
	}
	return n, nil
}

// Write sends p to the process's stdin.
func (ch *Channel) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), MaxPayload)
		if err := ch.c.send(Frame{Kind: KindInput, Chan: ch.id, Payload: p[:k]}); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// Close closes the process's stdin.
func (ch *Channel) Close() error {
	return ch.c.send(Frame{Kind: KindClose, Chan: ch.id})
}

// Drop stops reading the channel: a Read waiting for its output returns
// at once, and its stdin is closed. For a process that does not answer.
func (ch *Channel) Drop() error {
	ch.end(errors.New("mux channel dropped"))
	return ch.Close()
}

// Stderr is the head of what the process wrote to its stderr.
func (ch *Channel) Stderr() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.stderr.String()
}

// Exit is the process's exit status (or why it could not start), once
// it ended; "" while it runs.
func (ch *Channel) Exit() string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.exit
}
