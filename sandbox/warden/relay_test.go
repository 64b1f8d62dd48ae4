//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/sandbox/mux"
)

// listen asks c's mux for a relay's listener.
func listen(t *testing.T, c *mux.Client) *mux.Listener {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := c.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRelayHTTP: an HTTP server on the host, served on the relay's
// listener, answers clients that connect to the port the mux listens on:
// requests and answers of several frames each way, several connections at
// once, keep-alive on one.
func TestRelayHTTP(t *testing.T) {
	l := listen(t, startMux(t))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %d %s", r.URL.Path, len(b), strings.Repeat("z", 3*mux.MaxPayload))
	})}
	go srv.Serve(l)
	defer srv.Close()
	url := fmt.Sprintf("http://127.0.0.1:%d", l.Port())
	body := strings.Repeat("b", 5*mux.MaxPayload)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			for j := range 3 {
				resp, err := http.Post(fmt.Sprintf("%s/%d/%d", url, i, j), "text/plain", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := fmt.Sprintf("/%d/%d %d ", i, j, len(body))
				if err != nil || !strings.HasPrefix(string(got), want) || len(got) != len(want)+3*mux.MaxPayload {
					errs <- fmt.Errorf("got %d bytes %q... %v, want %q and the rest", len(got), got[:min(len(got), 40)], err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRelayClosedListener: once the host closes its listener, connections
// to the port are closed by the host, and Accept returns.
func TestRelayClosedListener(t *testing.T) {
	l := listen(t, startMux(t))
	accepted := make(chan error, 1)
	go func() {
		_, err := l.Accept()
		accepted <- err
	}()
	l.Close()
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("accept after close: %v", err)
	}
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := conn.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection to a closed listener: read %d, %v; want it closed", n, err)
	}
}

// TestRelayDeadline: a read past the connection's deadline returns, as
// net/http's server needs to end a connection's background read.
func TestRelayDeadline(t *testing.T) {
	l := listen(t, startMux(t))
	peer, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(make([]byte, 8))
		read <- err
	}()
	conn.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	select {
	case err := <-read:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read: %v, want the deadline", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the read outlived its deadline")
	}
	conn.SetReadDeadline(time.Time{})
	peer.Write([]byte("hi"))
	b := make([]byte, 8)
	if n, err := conn.Read(b); err != nil || string(b[:n]) != "hi" {
		t.Fatalf("after clearing the deadline: %q %v", b[:n], err)
	}
	conn.Close()
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := peer.Read(b); err != io.EOF {
		t.Fatalf("the peer after the host closed: %v, want EOF", err)
	}
}

// TestRelayOnly: `warden relay` listens and relays, and runs nothing.
func TestRelayOnly(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		serveRelay(inR, outW)
		outW.Close()
	}()
	c := mux.NewClient(outR, inW, inW.Close)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	if code, msg, err := c.Run(ctx, []string{"true"}); err != nil || code == 0 {
		t.Errorf("run in a relay-only mux: %d %q %v, want refused", code, msg, err)
	}
	ch, err := c.Open([]string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(ch); err != nil || !strings.Contains(ch.Exit(), "only relays") {
		t.Errorf("open in a relay-only mux: %v, exit %q", err, ch.Exit())
	}
	l := listen(t, c)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "relayed") })}
	go srv.Serve(l)
	defer srv.Close()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", l.Port()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "relayed" {
		t.Fatalf("got %q", b)
	}
}
