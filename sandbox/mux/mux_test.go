package mux

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
)

func frame(k Kind, ch uint32, p string) []byte {
	var b bytes.Buffer
	Write(&b, Frame{Kind: k, Chan: ch, Payload: []byte(p)})
	return b.Bytes()
}

func TestReadWrite(t *testing.T) {
	var b bytes.Buffer
	in := []Frame{{KindOpen, 1, Argv([]string{"a", "", "b c"})}, {KindInput, 1, nil}, {KindDone, 7, []byte("0\nok")}}
	for _, f := range in {
		if err := Write(&b, f); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReader(&b)
	for _, want := range in {
		got, err := Read(r)
		if err != nil || got.Kind != want.Kind || got.Chan != want.Chan || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("got %+v %v, want %+v", got, err, want)
		}
	}
	if _, err := Read(r); err != io.EOF {
		t.Fatalf("at the end: %v", err)
	}
	if err := Write(io.Discard, Frame{Kind: KindInput, Payload: make([]byte, MaxPayload+1)}); !errors.Is(err, ErrFrame) {
		t.Errorf("oversized payload written: %v", err)
	}
	huge := []byte{byte(KindOutput), 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff}
	if _, err := Read(bufio.NewReader(bytes.NewReader(huge))); !errors.Is(err, ErrFrame) {
		t.Errorf("a 4 GiB length: %v, want ErrFrame before any allocation", err)
	}
	if _, err := Read(bufio.NewReader(bytes.NewReader(frame('?', 1, "")))); !errors.Is(err, ErrFrame) {
		t.Errorf("unknown kind: %v", err)
	}
}

// TestClientWindow: output past the window the client granted ends the
// stream instead of growing a buffer; output within it is delivered, and
// reading it grants more.
func TestClientWindow(t *testing.T) {
	c := NewClient(bytes.NewReader(nil), io.Discard, nil)
	ch := &Channel{c: c, id: 1, credit: Window}
	ch.cond = sync.NewCond(&ch.mu)
	chunk := bytes.Repeat([]byte("y"), MaxPayload)
	for sent := 0; sent < Window; sent += len(chunk) {
		if err := ch.deliver(Frame{Kind: KindOutput, Chan: 1, Payload: chunk}); err != nil {
			t.Fatalf("within the window, after %d bytes: %v", sent, err)
		}
	}
	if err := ch.deliver(Frame{Kind: KindOutput, Chan: 1, Payload: []byte("y")}); !errors.Is(err, ErrFrame) {
		t.Fatalf("a byte over the window: %v, want ErrFrame", err)
	}
	buf := make([]byte, Window/2)
	if n, err := io.ReadFull(ch, buf); err != nil || n != len(buf) {
		t.Fatalf("read %d: %v", n, err)
	}
	if err := ch.deliver(Frame{Kind: KindOutput, Chan: 1, Payload: chunk}); err != nil {
		t.Fatalf("after half was read: %v", err)
	}
}

// FuzzClient feeds a client whatever a sandbox could write in the mux's
// place: it must neither panic nor hold more than the window per channel.
func FuzzClient(f *testing.F) {
	f.Add(append(frame(KindDone, 0, "0\nmux"), frame(KindOutput, 1, "hello")...))
	f.Add(append(frame(KindStderr, 1, "oops"), frame(KindExit, 1, "0")...))
	f.Add(frame(KindDone, 5, "x"))
	f.Add([]byte{byte(KindOutput), 0, 0, 0, 1, 0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewClient(bytes.NewReader(data), io.Discard, nil)
		ch, err := c.Open([]string{"x"})
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		total := 0
		for {
			n, err := ch.Read(buf)
			total += n
			if err != nil {
				break
			}
		}
		if total > Window {
			t.Fatalf("read %d bytes past a window of %d", total, Window)
		}
		_ = ch.Stderr()
	})
}

func FuzzRead(f *testing.F) {
	f.Add(frame(KindOpen, 1, "bash\x00-c\x00true"))
	f.Add([]byte{byte(KindInput), 0, 0, 0, 1, 0, 0, 0, 3, 'a'})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		for {
			fr, err := Read(r)
			if err != nil {
				return
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
		}
	})
}
