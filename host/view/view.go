// Package view serves the HTML report of a run directory over HTTP, live
// while the run goes on, to a browser on this machine: the page (written
// anew for each request), the run's status and its verifier logs. It
// reads the run directory and runs nothing.
package view

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/report"
)

// Listen listens on addr, which must be a loopback address unless
// allowRemote.
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &fault.Usage{Err: fmt.Errorf("--addr %q: %w", addr, err), Hint: "give HOST:PORT, such as 127.0.0.1:8080"}
	}
	if !allowRemote && !isLoopback(host) {
		return nil, &fault.Usage{Err: fmt.Errorf("--addr %s is not a loopback address", addr),
			Hint: "use 127.0.0.1:PORT, or add --allow-remote to serve the run's transcripts to the network"}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &fault.Infra{Err: fmt.Errorf("listen on %s: %w", addr, err)}
	}
	return ln, nil
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback()
}

// hostName is the name in a Host header, without its port if it has one
// (a browser sends none for the scheme's default port).
func hostName(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

// Handler serves the report of dir at / (written anew for each
// request, live while the run is not finished) and the run's status at
// /status. Unless allowRemote, it answers only requests addressed to a
// loopback name, so a web page cannot reach it by rebinding a DNS name.
func Handler(dir string, allowRemote bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		if err := report.WriteHTML(&buf, dir, report.HTMLOptions{Live: true}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(buf.Bytes())
	})
	mux.HandleFunc("GET /verifier/{name}", func(w http.ResponseWriter, r *http.Request) {
		serveVerifierLog(w, dir, r.PathValue("name"))
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		st, err := report.ReadStatus(dir)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(st)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if !allowRemote && !isLoopback(hostName(r.Host)) {
			http.Error(w, "this server answers only requests for 127.0.0.1 or localhost", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// serveVerifierLog serves one file of the run's verifier/ folder as plain
// text, as report.html links it; the name is one file's, opened inside
// that folder only.
func serveVerifierLog(w http.ResponseWriter, dir, name string) {
	root, err := os.OpenRoot(filepath.Join(dir, rundir.VerifierLogDir))
	if err != nil {
		http.Error(w, "no such verifier log", http.StatusNotFound)
		return
	}
	defer root.Close()
	// Non-blocking: a FIFO put there must not hold the server.
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		http.Error(w, "no such verifier log", http.StatusNotFound)
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		http.Error(w, "no such verifier log", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	io.Copy(w, f)
}

// Serve serves h on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return &fault.Infra{Err: err}
	}
	return nil
}
