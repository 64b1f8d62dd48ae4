//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox/mux"
)

// startMux serves the mux in this process over pipes and returns its
// client; the mux ends when the test does.
func startMux(t *testing.T) *mux.Client {
	c, _ := startCountedMux(t)
	return c
}

// startCountedMux is startMux, and how many bytes the mux has sent the
// client so far.
func startCountedMux(t *testing.T) (*mux.Client, *atomic.Int64) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		serveMux(inR, outW)
		outW.Close()
	}()
	sent := &countingReader{r: outR}
	c := mux.NewClient(sent, inW, inW.Close)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := poll.Context(t)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return c, &sent.n
}

type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readLine reads one line of a channel's output, or fails after a while
// (a channel that never answers would hang the test).
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := r.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		return line
	case <-poll.After(t):
		t.Fatal("no answer from the channel")
		return ""
	}
}

func TestMuxChannel(t *testing.T) {
	c := startMux(t)
	ch, err := c.Open([]string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(ch)
	big := strings.Repeat("x", 3*mux.MaxPayload) + "\n"
	for _, in := range []string{"hello\n", big} {
		if _, err := ch.Write([]byte(in)); err != nil {
			t.Fatal(err)
		}
		if got := readLine(t, r); got != in {
			t.Fatalf("echo of %d bytes: got %d bytes", len(in), len(got))
		}
	}
	ch.Close()
	if _, err := io.ReadAll(r); err != nil {
		t.Fatalf("after stdin closed: %v, want EOF", err)
	}
	if ch.Exit() != "0" {
		t.Errorf("exit %q, want 0", ch.Exit())
	}
	bad, err := c.Open([]string{"/no/such/program"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(bad); err != nil || !strings.Contains(bad.Exit(), "start") {
		t.Errorf("a program that cannot start: %v, exit %q", err, bad.Exit())
	}
}

// TestMuxUnreadChannelStallsAlone: output nobody reads (an agent writing
// to its shell's stdout between calls) stops at the window and holds up
// no other channel.
func TestMuxUnreadChannelStallsAlone(t *testing.T) {
	c, sent := startCountedMux(t)
	flood, err := c.Open([]string{"yes"})
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Drop()
	poll.Until(t, "the flood to fill its window", func() bool { return sent.Load() >= mux.Window })
	ch, err := c.Open([]string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	ch.Write([]byte("still here\n"))
	if got := readLine(t, bufio.NewReader(ch)); got != "still here\n" {
		t.Fatalf("got %q", got)
	}
	// The flood is still there, and delivers in order once read.
	got := make(chan error, 1)
	go func() {
		r := bufio.NewReader(flood)
		for range 3 * mux.Window / 2 {
			if line, err := r.ReadString('\n'); line != "y\n" {
				got <- fmt.Errorf("flood: %q %v", line, err)
				return
			}
		}
		got <- nil
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-poll.After(t):
		t.Fatal("the flood stalled for good")
	}
}

func TestMuxKillAndRun(t *testing.T) {
	c := startMux(t)
	ctx := context.Background()
	ch, err := c.Open([]string{"setsid", "sh", "-c", "echo $$; exec sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(readLine(t, bufio.NewReader(ch))))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx, 0, pgid); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, fmt.Sprintf("group %d to end", pgid), func() bool { return syscall.Kill(pgid, 0) != nil })
	// Never group 0 or 1 (everything), nor a namespace init below 2.
	for _, bad := range [][2]int{{0, 1}, {0, 0}, {0, -5}, {1, 5}} {
		if err := c.Kill(ctx, bad[0], bad[1]); err == nil {
			t.Errorf("kill %v: want refused", bad)
		}
	}
	code, msg, err := c.Run(ctx, []string{"sh", "-c", "echo oops >&2; exit 3"})
	if err != nil || code != 3 || strings.TrimSpace(msg) != "oops" {
		t.Errorf("run: %d %q %v", code, msg, err)
	}
}

// TestMuxEndsWithItsHost: when the host's stream ends, so does the mux.
func TestMuxEndsWithItsHost(t *testing.T) {
	inR, inW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveMux(inR, io.Discard) }()
	inW.Close()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, os.ErrClosed) {
			t.Fatal(err)
		}
	case <-poll.After(t):
		t.Fatal("the mux outlived its host")
	}
}
