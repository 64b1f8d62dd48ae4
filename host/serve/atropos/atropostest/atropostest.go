// Package atropostest is a rollout API for tests, written in Go from
// Atropos' atroposlib/api/server.py and atroposlib/api/utils.py (commit
// 296a0bc5): the same endpoints and answers, the same request validation
// (422 for a missing field, a non-integer token, a message without role or
// content; 400 for a bad gzip body), the same queue, buffering of groups
// whose length is not the environment's group size, batch packing, status
// arithmetic and server errors (500 for /status-env of an unknown
// environment). Each handler cites the function it reproduces.
//
// A test plays the trainer through Trainer (register, then take batches at
// the pace it wants) and injects what goes wrong between an environment
// and the API: Restart (a new run-api process on the same address: every
// state lost), Down and Up (connections refused), and Fault (an answer
// replaced by an HTTP status or a malformed body, or lost after the
// request was handled).
package atropostest

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// Server is the rollout API.
type Server struct {
	mu     sync.Mutex
	st     state
	addr   string
	ln     net.Listener
	srv    *http.Server
	faults []*Fault
	reqs   []Request
	taken  []Taken
	life   int // incremented by Restart
}

// Request is one request the server got, its body decompressed.
type Request struct {
	Method, Path string
	Gzip         bool
	Body         []byte
	Life         int // which server process got it (Restart counts)
}

// Taken is one group the API queued or buffered (a /scored_data or an
// item of /scored_data_list that passed validation).
type Taken struct {
	Life   int
	EnvID  *int
	Group  map[string]json.RawMessage
	At     time.Time
	Status string // "received" or "buffered"
}

// Fault replaces the answers to requests for Path ("/scored_data").
type Fault struct {
	Path  string
	Times int // how many requests it takes (0: one)
	// Status and Body answer instead of the handler, which does not run
	// (Body defaults to a plain "Internal Server Error" for 5xx).
	Status int
	Body   string
	// Lost runs the handler, then cuts the connection without an answer:
	// the request took effect, the client cannot know it.
	Lost bool
}

// New starts the API on 127.0.0.1 and stops it when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	s.serve(ln)
	t.Cleanup(s.Close)
	return s
}

// URL is the API's address, what an environment's rollout_server_url is.
func (s *Server) URL() string { return "http://" + s.addr }

func (s *Server) serve(ln net.Listener) {
	s.ln = ln
	s.srv = &http.Server{Handler: http.HandlerFunc(s.handle), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
}

// Close stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	srv := s.srv
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Down stops the server: connections are refused until Up. Its state is
// kept (a network outage, not a restart).
func (s *Server) Down() { s.Close() }

// Up listens again on the same address after Down or Restart.
func (s *Server) Up() error {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment after Close
		if ln, err = net.Listen("tcp", s.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serve(ln)
	return nil
}

// Restart is a new run-api process on the same address: connections are
// cut, every state is lost (trainer, environments, queue), and it
// listens again at once.
func (s *Server) Restart() error {
	s.Close()
	s.mu.Lock()
	s.st = state{}
	s.life++
	s.mu.Unlock()
	return s.Up()
}

// Inject adds a fault; faults apply in the order added.
func (s *Server) Inject(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// Requests is every request so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Taken is every group the API queued or buffered so far, across
// restarts.
func (s *Server) Taken() []Taken {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Taken(nil), s.taken...)
}

// QueuedSequences is how many sequences wait in the queue for the
// trainer.
func (s *Server) QueuedSequences() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, g := range s.st.queue {
		n += g.size
	}
	return n
}

// Step is the trainer's step as the API counts it.
func (s *Server) Step() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.step
}

// Envs is the environments registered, as server.py keeps them.
func (s *Server) Envs() []env {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]env(nil), s.st.envs...)
}

// handle reads the request (gunzipping as GZipRequestMiddleware does),
// applies a fault if one matches, and routes.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	gz := strings.Contains(strings.ToLower(r.Header.Get("Content-Encoding")), "gzip")
	if gz && len(body) > 0 {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err == nil {
			body, err = io.ReadAll(zr)
		}
		if err != nil {
			plain(w, http.StatusBadRequest, "Invalid gzip payload")
			return
		}
	}
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Gzip: gz, Body: body, Life: s.life})
	f := s.fault(r.URL.Path)
	if f != nil && !f.Lost {
		s.mu.Unlock()
		if f.Body == "" && f.Status >= 500 {
			plain(w, f.Status, "Internal Server Error")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Status)
		io.WriteString(w, f.Body)
		return
	}
	status, answer := s.route(r.Method, r.URL.Path, body)
	s.mu.Unlock()
	if f != nil { // Lost: the handler ran; the answer never arrives
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	switch a := answer.(type) {
	case plainText:
		plain(w, status, string(a))
	default:
		b, _ := json.Marshal(a)
		w.Header().Set("Content-Type", "application/json")
		// GZipMiddleware(minimum_size=1000) compresses large answers
		// for clients that accept it.
		if len(b) >= 1000 && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			b = atropos.Gzip(b)
			w.Header().Set("Content-Encoding", "gzip")
		}
		w.WriteHeader(status)
		w.Write(b)
	}
}

// fault takes the first fault for path, if any; s.mu is held.
func (s *Server) fault(path string) *Fault {
	for i, f := range s.faults {
		if f.Path == path {
			f.Times--
			if f.Times <= 0 {
				s.faults = append(s.faults[:i], s.faults[i+1:]...)
			}
			return f
		}
	}
	return nil
}

type plainText string

func plain(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// errServer is an exception in a handler: FastAPI answers 500 with a
// plain "Internal Server Error".
var errServer = errors.New("Internal Server Error")

// route dispatches as FastAPI's routes do: an unknown path is 404, a
// known path with another method is 405.
func (s *Server) route(method, path string, body []byte) (int, any) {
	type handler func([]byte) (any, error)
	routes := map[string]map[string]handler{
		"/":                 {"GET": s.root},
		"/register":         {"POST": s.register},
		"/register-env":     {"POST": s.registerEnv},
		"/disconnect-env":   {"POST": s.disconnectEnv},
		"/wandb_info":       {"GET": s.wandbInfo},
		"/info":             {"GET": s.info},
		"/batch":            {"GET": s.batch},
		"/latest_example":   {"GET": s.latestExample},
		"/scored_data":      {"POST": s.scoredData},
		"/scored_data_list": {"POST": s.scoredDataList},
		"/status":           {"GET": s.status},
		"/status-env":       {"GET": s.statusEnv},
		"/reset_data":       {"GET": s.resetData},
	}
	byMethod, ok := routes[path]
	if !ok {
		return http.StatusNotFound, map[string]string{"detail": "Not Found"}
	}
	h, ok := byMethod[method]
	if !ok {
		return http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"}
	}
	answer, err := h(body)
	var ve *validationError
	switch {
	case errors.As(err, &ve):
		return http.StatusUnprocessableEntity, map[string]any{"detail": ve.detail}
	case err != nil:
		return http.StatusInternalServerError, plainText("Internal Server Error")
	}
	if p, ok := answer.(plainText); ok {
		return http.StatusOK, p
	}
	return http.StatusOK, answer
}

// pyIndex is Python's list indexing: a negative index counts from the end.
func pyIndex(i, n int) (int, bool) {
	if i < 0 {
		i += n
	}
	return i, i >= 0 && i < n
}

// floorDiv is Python's //.
func floorDiv(a, b int) (int, error) {
	if b == 0 {
		return 0, errServer // ZeroDivisionError
	}
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q, nil
}

func (s *Server) String() string { return fmt.Sprintf("atropostest at %s", s.addr) }
