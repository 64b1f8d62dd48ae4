//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox/mux"
)

// serveMux is the first process of an isolated sandbox: it seals the
// warden's folder, then serves the mux protocol (package mux) on its
// standard streams, the stream the engine attached to the container,
// until the host closes it: it starts the shells the host asks for
// (`warden plugin`, `warden agent`) on channels of their own, carries
// their standard streams, and kills process groups and runs the warden's
// own commands (remount) for the host without an exec of the engine.
func serveMux(in io.Reader, out io.Writer) error {
	if err := seal(); err != nil {
		return err
	}
	// It holds every capability of the sandbox: nothing there may trace
	// it or read its memory, whatever the caller's capabilities.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("not dumpable: %w", err)
	}
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP)
	return newMuxServer(out).serve(in)
}

func newMuxServer(out io.Writer) *muxServer {
	return &muxServer{w: bufio.NewWriterSize(out, 64<<10), chans: map[uint32]*muxChan{}}
}

// serve says hello, then handles the host's frames until its stream ends.
func (s *muxServer) serve(in io.Reader) error {
	s.send(mux.KindDone, 0, []byte("0\nmux"))
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		f, err := mux.Read(r)
		if err != nil {
			// The host is gone (or spoke nonsense): end, and the
			// sandbox with us.
			return nil
		}
		s.handle(f)
	}
}

type muxServer struct {
	wmu sync.Mutex
	w   *bufio.Writer

	mu    sync.Mutex
	chans map[uint32]*muxChan

	// The relays (relay.go): whether this mux serves only them, and its
	// connections.
	relayOnly bool
	nextConn  uint32
	relays    int
}

// send writes one frame to the host.
func (s *muxServer) send(kind mux.Kind, ch uint32, payload []byte) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if mux.Write(s.w, mux.Frame{Kind: kind, Chan: ch, Payload: payload}) == nil {
		s.w.Flush()
	}
}

func (s *muxServer) handle(f mux.Frame) {
	if s.relayOnly && !s.relayFrame(f) {
		return
	}
	switch f.Kind {
	case mux.KindOpen:
		s.open(f.Chan, strings.Split(string(f.Payload), "\x00"))
	case mux.KindInput, mux.KindClose:
		if c := s.channel(f.Chan); c != nil {
			c.input(f.Payload, f.Kind == mux.KindClose)
		}
	case mux.KindWindow:
		if c := s.channel(f.Chan); c != nil && len(f.Payload) == 4 {
			c.grant(int(binary.BigEndian.Uint32(f.Payload)))
		}
	case mux.KindKill:
		go s.send(mux.KindDone, f.Chan, doneReply(muxKill(string(f.Payload))))
	case mux.KindRun:
		go s.send(mux.KindDone, f.Chan, runOnce(strings.Split(string(f.Payload), "\x00")))
	case mux.KindListen:
		go s.listen(f.Chan, string(f.Payload))
	}
}

func (s *muxServer) channel(id uint32) *muxChan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chans[id]
}

// muxChan is one process started for the host.
type muxChan struct {
	s  *muxServer
	id uint32

	mu     sync.Mutex
	cond   *sync.Cond
	queue  [][]byte // stdin not yet written
	eof    bool     // the host closed stdin
	credit int
	exited bool // Exit was sent: nothing more goes out
}

// open starts argv with pipes for its standard streams.
func (s *muxServer) open(id uint32, argv []string) {
	s.mu.Lock()
	if _, dup := s.chans[id]; dup || id == 0 {
		s.mu.Unlock()
		return
	}
	c := &muxChan{s: s, id: id, credit: mux.Window}
	c.cond = sync.NewCond(&c.mu)
	s.chans[id] = c
	s.mu.Unlock()
	p, stdin, stdout, stderr, err := startPiped(argv)
	if err != nil {
		c.exit("start: " + err.Error())
		return
	}
	go c.feed(stdin)
	var readers sync.WaitGroup
	readers.Go(func() { c.forward(stdout) })
	readers.Go(func() { c.forwardStderr(stderr) })
	go func() {
		st, _ := p.Wait()
		code := -1
		if st != nil {
			code = st.Sys().(syscall.WaitStatus).ExitStatus()
			if ws := st.Sys().(syscall.WaitStatus); ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		// Output still in flight comes first; a process the shell left
		// holding the pipes does not keep the channel open.
		done := make(chan struct{})
		go func() { readers.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		c.exit(strconv.Itoa(code))
		stdout.Close()
		stderr.Close()
	}()
}

// startPiped starts argv with its stdin, stdout and stderr on new pipes.
func startPiped(argv []string) (p *os.Process, stdin io.WriteCloser, stdout, stderr io.ReadCloser, err error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, nil, nil, nil, fmt.Errorf("no command")
	}
	path, err := lookPath(argv[0])
	if err != nil {
		return nil, nil, nil, nil, err
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	p, err = os.StartProcess(path, argv, &os.ProcAttr{Env: os.Environ(), Files: []*os.File{inR, outW, errW}})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return nil, nil, nil, nil, err
	}
	return p, inW, outR, errR, nil
}

// exit tells the host the channel's process ended; nothing more is sent
// for the channel after it.
func (c *muxChan) exit(status string) {
	c.mu.Lock()
	if c.exited {
		c.mu.Unlock()
		return
	}
	c.exited = true
	c.eof = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.s.mu.Lock()
	delete(c.s.chans, c.id)
	c.s.mu.Unlock()
	c.s.send(mux.KindExit, c.id, []byte(status))
}

// input queues bytes for the process's stdin (or its end): the frame
// reader never waits for a process that does not read.
func (c *muxChan) input(b []byte, eof bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if eof {
		c.eof = true
	} else if !c.eof {
		c.queue = append(c.queue, b)
	}
	c.cond.Broadcast()
}

// feed writes the queued input to the process's stdin.
func (c *muxChan) feed(w io.WriteCloser) {
	defer w.Close()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.eof {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		b := c.queue[0]
		c.queue = c.queue[1:]
		c.mu.Unlock()
		if _, err := w.Write(b); err != nil {
			c.mu.Lock()
			c.queue, c.eof = nil, true // the process stopped reading for good
			c.mu.Unlock()
			return
		}
	}
}

// grant lets n more bytes of output go to the host.
func (c *muxChan) grant(n int) {
	c.mu.Lock()
	c.credit += n
	c.cond.Broadcast()
	c.mu.Unlock()
}

// forward sends the process's stdout, within the host's window.
func (c *muxChan) forward(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		c.mu.Lock()
		for c.credit == 0 && !c.exited {
			c.cond.Wait()
		}
		room, gone := min(c.credit, len(buf)), c.exited
		c.mu.Unlock()
		if gone {
			io.Copy(io.Discard, r)
			return
		}
		n, err := r.Read(buf[:room])
		if n > 0 {
			c.mu.Lock()
			gone = c.exited
			if !gone {
				c.credit -= n
			}
			c.mu.Unlock()
			if !gone {
				c.s.send(mux.KindOutput, c.id, buf[:n])
			}
		}
		if err != nil {
			return
		}
	}
}

// forwardStderr sends the head of the process's stderr and drops the rest.
func (c *muxChan) forwardStderr(r io.Reader) {
	buf := make([]byte, 4096)
	sent := 0
	for {
		n, err := r.Read(buf)
		if n > 0 && sent < mux.StderrMax {
			k := min(n, mux.StderrMax-sent)
			sent += k
			c.mu.Lock()
			gone := c.exited
			c.mu.Unlock()
			if !gone {
				c.s.send(mux.KindStderr, c.id, buf[:k])
			}
		}
		if err != nil {
			return
		}
	}
}

// muxKill kills a process group the host names as "NSINIT PGID".
func muxKill(req string) error {
	f := strings.Fields(req)
	if len(f) != 2 {
		return fmt.Errorf("kill: want NSINIT PGID, got %q", req)
	}
	if f[0] == "0" {
		pgid, err := strconv.Atoi(f[1])
		if err != nil || pgid < 2 {
			return fmt.Errorf("kill: bad group %q", f[1])
		}
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
			return err
		}
		return nil
	}
	return killGroup(f)
}

// runOnce runs argv to completion with no stdin and answers its exit
// status and the head of its stderr.
func runOnce(argv []string) []byte {
	p, stdin, stdout, stderr, err := startPiped(argv)
	if err != nil {
		return doneReply(err)
	}
	stdin.Close()
	go io.Copy(io.Discard, stdout)
	var msg bytes.Buffer
	io.Copy(&msg, io.LimitReader(stderr, 4096))
	go io.Copy(io.Discard, stderr)
	st, err := p.Wait()
	if err != nil {
		return doneReply(err)
	}
	code := st.Sys().(syscall.WaitStatus).ExitStatus()
	return []byte(fmt.Sprintf("%d\n%s", code, msg.String()))
}

// doneReply is a KindDone payload for err.
func doneReply(err error) []byte {
	if err == nil {
		return []byte("0\n")
	}
	return []byte("1\n" + err.Error())
}
