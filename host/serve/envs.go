package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// A registration's states in serve-envs.jsonl; its last line is its state.
const (
	envRegistered   = "registered"   // the API gave this env_id: it may still count there
	envDisconnected = "disconnected" // POST /disconnect-env let it go
	envForgotten    = "forgotten"    // the API no longer holds it as this run's
)

// envLine is one line of serve-envs.jsonl.
type envLine struct {
	Reg   int    `json:"reg"` // numbers the run's registrations, from 1
	State string `json:"state"`
	API   string `json:"api"`
	EnvID int    `json:"env_id"`
	Name  string `json:"name,omitempty"` // the API's wandb_name: desired_name_N
	// Step is the trainer's step when the API gave the env_id.
	Step int       `json:"step"`
	At   time.Time `json:"at"`
	Why  string    `json:"why,omitempty"`
}

// envLog is serve-envs.jsonl: every env_id the rollout API gave the run,
// over every invocation, and what became of it, appended and synced. An
// environment that registers and never disconnects keeps counting at the
// API: with a min_batch_allocation and nothing queued, it stops every
// batch (utils.py grab_batch_with_minimum_allocations, lines 204-214 at
// 296a0bc5). So serve disconnects every env_id it no longer uses, also
// those a killed invocation left.
type envLog struct {
	mu   sync.Mutex
	f    *os.File
	last map[int]envLine // each registration's last line
	regs int
	cur  int // this invocation's registration in use (0: none)
}

// maxRegs bounds a registration's number: one beyond it is no line of
// this file.
const maxRegs = 1 << 30

// openEnvLog reads serve-envs.jsonl of the run directory dir, cutting a
// torn last line.
func openEnvLog(dir string) (*envLog, error) {
	f, err := os.OpenFile(filepath.Join(dir, rundir.ServeEnvsFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	l := &envLog{f: f, last: map[int]envLine{}}
	err = readJSONL(f, func(b []byte) bool {
		var e envLine
		if json.Unmarshal(b, &e) != nil || e.Reg <= 0 || e.Reg > maxRegs {
			return false
		}
		l.last[e.Reg] = e
		l.regs = max(l.regs, e.Reg)
		return true
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// readJSONL calls each for every whole line of f until it returns false,
// then cuts f after the last line it took (a torn tail, a line that is not
// the file's) and leaves the offset there, for appends.
func readJSONL(f *os.File, each func([]byte) bool) error {
	b, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	var good int64
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 || !each(b[:i]) {
			break
		}
		good += int64(i + 1)
		b = b[i+1:]
	}
	if err := f.Truncate(good); err != nil {
		return err
	}
	_, err = f.Seek(good, io.SeekStart)
	return err
}

// add appends e, synced; a new registration gets the next number.
func (l *envLog) add(e envLine) (envLine, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.State == envRegistered {
		l.regs++
		e.Reg = l.regs
	}
	e.At = time.Now().UTC()
	b, err := json.Marshal(e)
	if err != nil {
		return e, err
	}
	if _, err := l.f.Write(append(b, '\n')); err != nil {
		return e, fmt.Errorf("write %s: %w", rundir.ServeEnvsFile, err)
	}
	if err := l.f.Sync(); err != nil {
		return e, fmt.Errorf("sync %s: %w", rundir.ServeEnvsFile, err)
	}
	l.last[e.Reg] = e
	return e, nil
}

// held is the registrations at api still registered, oldest first, but
// the one in use.
func (l *envLog) held(api string) []envLine {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []envLine
	for reg := 1; reg <= l.regs; reg++ {
		if e, ok := l.last[reg]; ok && e.State == envRegistered && e.API == api && reg != l.cur {
			out = append(out, e)
		}
	}
	return out
}

// current is the registration in use, if any.
func (l *envLog) current() (envLine, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.last[l.cur]
	return e, ok && e.State == envRegistered
}

func (l *envLog) use(reg int) {
	l.mu.Lock()
	l.cur = reg
	l.mu.Unlock()
}

func (l *envLog) close() error { return l.f.Close() }

// stillOurs reports whether the API that answered the registration now
// still holds old as this run's environment, and if not, why. server.py
// register_env_url (lines 296-313 at 296a0bc5) numbers environments by
// their place in its list and names them desired_name_N, N counting those
// of that name before it; its list only grows, until a new run-api
// process starts it afresh. So old is still there when the API gave now a
// larger env_id and a larger N, and the trainer's step did not go back;
// an API started afresh meanwhile gives smaller numbers (or someone
// else's environment old's env_id, which must not be disconnected).
func stillOurs(old, now envLine) (bool, string) {
	switch {
	case now.EnvID <= old.EnvID:
		return false, fmt.Sprintf("the API gave env_id %d after %d: it started afresh", now.EnvID, old.EnvID)
	case now.Step < old.Step:
		return false, fmt.Sprintf("the trainer's step went from %d to %d: the API started afresh", old.Step, now.Step)
	}
	ob, on, ok1 := nameIndex(old.Name)
	nb, nn, ok2 := nameIndex(now.Name)
	if ok1 && ok2 && ob == nb && nn <= on {
		return false, fmt.Sprintf("the API named this run %s after %s: it started afresh", now.Name, old.Name)
	}
	return true, ""
}

// nameIndex splits a wandb_name desired_name_N.
func nameIndex(name string) (string, int, bool) {
	i := strings.LastIndexByte(name, '_')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(name[i+1:])
	return name[:i], n, err == nil && n >= 0
}

// registeredAs records a registration the API just gave, before anything
// uses it, and lets go of the run's earlier ones that the API still holds
// (stillOurs): those a killed invocation left, and those of this one
// given up while the API failed. The rest are recorded as forgotten.
func (s *Serve) registeredAs(ctx context.Context, env atropos.Env) {
	now, err := s.envs.add(envLine{State: envRegistered, API: s.api.URL(), EnvID: env.ID, Name: env.Name, Step: env.StartingStep})
	if err != nil {
		s.notify("warning", "%v: env %d may stay registered at the rollout API if serving is killed", err, env.ID)
	}
	s.envs.use(now.Reg)
	for _, old := range s.envs.held(now.API) {
		if ok, why := stillOurs(old, now); !ok {
			s.settleEnv(old, envForgotten, why)
			continue
		}
		if s.letGo(ctx, old, true) {
			s.notify("", "disconnected env %d (%s), which this run registered earlier and no longer uses", old.EnvID, old.Name)
		} else {
			s.notify("warning", "could not disconnect env %d (%s), which this run registered earlier: it stays registered at the rollout API until serving stops or starts again", old.EnvID, old.Name)
		}
	}
}

// forgetAll records the earlier registrations at the API as forgotten:
// the API said it started afresh (the trainer's step went back).
func (s *Serve) forgetAll(why string) {
	for _, old := range s.envs.held(s.api.URL()) {
		s.settleEnv(old, envForgotten, why)
	}
	if cur, ok := s.envs.current(); ok {
		s.settleEnv(cur, envForgotten, why)
	}
	s.envs.use(0)
}

// letGo disconnects a registration the API holds as this run's. Patient,
// it asks again with backoff while the API fails, for a few seconds at
// most; else it asks once (serving stops). One still registered then is
// let go by the next registration or start.
func (s *Serve) letGo(ctx context.Context, e envLine, patient bool) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	wait := s.opts.Backoff
	for {
		known, msg, err := s.api.Disconnect(ctx, e.EnvID)
		switch {
		case err == nil && known:
			s.settleEnv(e, envDisconnected, "")
			return true
		case err == nil:
			s.settleEnv(e, envForgotten, "POST /disconnect-env: "+msg)
			return true
		case !patient || refusal(err) || !sleep(ctx, wait):
			s.opts.Log.Debug("disconnect-env", "env_id", e.EnvID, "err", err)
			return false
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// settleEnv records what became of a registration.
func (s *Serve) settleEnv(e envLine, state, why string) {
	e.State, e.Why = state, why
	if _, err := s.envs.add(e); err != nil {
		s.opts.Log.Debug("serve-envs", "err", err)
	}
}

// leave disconnects the registration in use, and the earlier ones the
// API holds as this run's, when serving stops.
func (s *Serve) leave(ctx context.Context) {
	cur, ok := s.envs.current()
	if !ok {
		return
	}
	for _, old := range s.envs.held(cur.API) {
		if ok, _ := stillOurs(old, cur); ok {
			s.letGo(ctx, old, false)
		}
	}
	if s.letGo(ctx, cur, false) {
		s.envs.use(0)
	}
}
