// Package mux is the wire protocol between a sandbox backend and the
// warden's mux (sandbox/warden, `warden mux`), the first process of an
// isolated sandbox: the standard streams of several processes in the
// sandbox (the plugin's shell, the agent's) and the backend's control
// requests travel over the one stream the engine attaches to that
// process, so starting a sandbox costs no exec beyond the container's own.
//
// Every message is a frame: a 9-byte header (kind, channel or request id
// as a big-endian uint32, payload length as a big-endian uint32) and at
// most MaxPayload bytes. A channel's output is flow-controlled: the mux
// sends at most Window bytes the backend has not acknowledged with a
// KindWindow frame, so output the backend is not reading (an agent
// writing to its shell's stdout between calls) stalls only that channel,
// and the backend never buffers more than Window bytes of it.
//
// Client is the backend's side; the warden implements the other.
package mux

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Kind says what a frame carries.
type Kind byte

// Frames from the backend to the mux.
const (
	// KindOpen starts a process on channel Chan: the payload is its argv,
	// NUL-separated; its stdin, stdout and stderr become the channel's.
	KindOpen Kind = 'O'
	// KindInput is bytes for the channel's stdin.
	KindInput Kind = 'I'
	// KindClose closes the channel's stdin.
	KindClose Kind = 'C'
	// KindWindow lets the mux send the channel this many more bytes of
	// output (payload: a big-endian uint32).
	KindWindow Kind = 'W'
	// KindKill kills a process group: the payload is "NSINIT PGID", the
	// group as the PID namespace whose init is NSINIT numbers it (NSINIT
	// 0: as the sandbox numbers it). Chan is the request id of its
	// KindDone.
	KindKill Kind = 'K'
	// KindRun runs a command to completion (the payload is its argv,
	// NUL-separated), as the mux's user, outside every channel's
	// namespaces. Chan is the request id of its KindDone.
	KindRun Kind = 'R'
	// KindListen asks the mux to listen on a TCP port of the sandbox's
	// loopback (the payload: "127.0.0.1:PORT", port 0 for any free one)
	// and relay each connection to it (KindAccept). Chan is the request
	// id of its KindDone, whose message is the port listened on; the
	// request id also names the listener in its KindAccept frames.
	KindListen Kind = 'L'
)

// Frames from the mux to the backend.
const (
	// KindOutput is bytes of the channel's stdout.
	KindOutput Kind = 'D'
	// KindStderr is bytes of the channel's stderr (the first StderrMax of
	// them; the rest is dropped).
	KindStderr Kind = 'E'
	// KindExit says the channel's process ended, after its last output:
	// the payload is its exit status in decimal, or the reason it could
	// not start.
	KindExit Kind = 'X'
	// KindDone answers a KindKill or KindRun (Chan is the request's id):
	// the exit status in decimal, a newline, then the head of its stderr.
	// Request id 0 is the mux's hello, sent once it is ready.
	KindDone Kind = 'Z'
	// KindAccept says a connection to a listener came in: Chan is a new
	// channel (Accepted set), the payload the listener's request id in
	// decimal. The channel then carries the connection as a process
	// channel carries a process: what the peer sends comes as KindOutput
	// (within the window), KindInput goes to the peer, KindClose closes
	// the connection, and KindExit says it ended.
	KindAccept Kind = 'A'
)

// Accepted is set in the ids of the channels the mux opens for accepted
// connections, and never in those the backend opens, so the two never
// meet.
const Accepted uint32 = 1 << 31

// Limits of the protocol.
const (
	HeaderSize = 9
	MaxPayload = 64 << 10
	// Window is how much output of a channel the mux may send ahead of
	// the backend's acknowledgements.
	Window = 1 << 20
	// StderrMax is how much of a channel's stderr is forwarded.
	StderrMax = 64 << 10
)

// Frame is one message.
type Frame struct {
	Kind    Kind
	Chan    uint32
	Payload []byte
}

// NetworkNotOff starts what the warden's mux says on stderr, and exits,
// when the host started it with -no-network in a container that has a
// network interface besides the loopback: the engine did not honour the
// disabled network, and the host falls back to the engine's own "none".
const NetworkNotOff = "network off, but the container has"

// LoopbackHosts is the /etc/hosts the engine writes for a container on
// network "none", which a container whose network is off gets from proctor.
const LoopbackHosts = `127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
ff00::0	ip6-mcastprefix
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
`

// ErrFrame: the stream holds something that is not a frame.
var ErrFrame = errors.New("bad mux frame")

// Write writes one frame (a payload over MaxPayload is refused: split it).
func Write(w io.Writer, f Frame) error {
	if len(f.Payload) > MaxPayload {
		return fmt.Errorf("%w: payload of %d bytes", ErrFrame, len(f.Payload))
	}
	b := make([]byte, HeaderSize+len(f.Payload))
	b[0] = byte(f.Kind)
	binary.BigEndian.PutUint32(b[1:5], f.Chan)
	binary.BigEndian.PutUint32(b[5:9], uint32(len(f.Payload)))
	copy(b[HeaderSize:], f.Payload)
	_, err := w.Write(b)
	return err
}

// Read reads one frame. The payload is a new slice; a length over
// MaxPayload or an unknown kind is ErrFrame, before anything is allocated.
func Read(r *bufio.Reader) (Frame, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Kind: Kind(h[0]), Chan: binary.BigEndian.Uint32(h[1:5])}
	n := binary.BigEndian.Uint32(h[5:9])
	if !known(f.Kind) {
		return Frame{}, fmt.Errorf("%w: kind %q", ErrFrame, h[0])
	}
	if n > MaxPayload {
		return Frame{}, fmt.Errorf("%w: payload of %d bytes", ErrFrame, n)
	}
	f.Payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return f, nil
}

func known(k Kind) bool {
	switch k {
	case KindOpen, KindInput, KindClose, KindWindow, KindKill, KindRun, KindListen,
		KindOutput, KindStderr, KindExit, KindDone, KindAccept:
		return true
	}
	return false
}

// Argv encodes an argv as a KindOpen or KindRun payload.
func Argv(argv []string) []byte {
	var b []byte
	for i, a := range argv {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, a...)
	}
	return b
}
