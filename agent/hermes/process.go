package hermes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/agent/pystr"
	"github.com/proctor-dev/proctor/sandbox"
)

// Background processes are tools/process_registry.py's ProcessRegistry.
// hermes' container backends start them with nohup inside the sandbox, poll
// their log every two seconds, cannot feed their stdin and lose their exit
// code; its local backend gives them a pipe or a pseudo-terminal for stdin,
// exit codes, and kills their process group. proctor gives the local
// backend's behaviour inside the sandbox: each process runs in its own
// session with its stdin on a FIFO and, for pty=true, under script(1). Its
// files are where hermes puts them: /tmp/hermes_bg_<id>.log and .pid, plus
// .in (the FIFO), .pgid and .exit.

const (
	maxBufferChars = 200_000 // MAX_OUTPUT_CHARS of a process's output buffer
	finishedTTL    = 30 * time.Minute
	maxProcesses   = 64
	probeTimeout   = 10 * time.Second
)

type proc struct {
	id      string
	command any // as the model sent it
	cwd     string
	pid     *int
	started time.Time
	exited  bool
	code    int
	killed  bool
}

// registry holds a session's processes: running in start order, finished
// in the order they were seen to finish.
type registry struct {
	running, finished []*proc
	cwd               string // the sandbox's working directory, once known
}

func (r *registry) get(id string) *proc {
	for _, l := range [][]*proc{r.running, r.finished} {
		if i := slices.IndexFunc(l, func(p *proc) bool { return p.id == id }); i >= 0 {
			return l[i]
		}
	}
	return nil
}

func (r *registry) finish(p *proc) {
	r.running = slices.DeleteFunc(r.running, func(q *proc) bool { return q == p })
	r.finished = append(r.finished, p)
}

// prune is _prune_if_needed: finished sessions expire after 30 minutes, and
// at 64 sessions the oldest finished one goes.
func (r *registry) prune(now time.Time) {
	r.finished = slices.DeleteFunc(r.finished, func(p *proc) bool { return now.Sub(p.started) > finishedTTL })
	if len(r.running)+len(r.finished) >= maxProcesses && len(r.finished) > 0 {
		oldest := 0
		for i, p := range r.finished {
			if p.started.Before(r.finished[oldest].started) {
				oldest = i
			}
		}
		r.finished = slices.Delete(r.finished, oldest, oldest+1)
	}
}

func base(id string) string { return "/tmp/hermes_bg_" + id }

// bgWrapper starts $2 in the background with stdin on the FIFO $1.in,
// output to $1.log (for $3 = pty under script(1), on a 30x120
// pseudo-terminal), and records its pid, its group and its exit code.
const bgWrapper = `echo $$ > "$1.pgid"
exec 3<>"$1.in"
export PYTHONUNBUFFERED=1
if [ "$3" = pty ] && command -v script >/dev/null 2>&1; then
  HERMES_BG_CMD=$2 SHELL=/bin/bash script -qfec 'c=$HERMES_BG_CMD; unset HERMES_BG_CMD; stty cols 120 rows 30 2>/dev/null; exec bash -c "$c"' /dev/null <&3 >"$1.log" 2>&1 &
else
  bash -c "$2" <&3 >"$1.log" 2>&1 &
fi
echo $! > "$1.pid.tmp" && mv -f "$1.pid.tmp" "$1.pid"
wait $!
echo $? > "$1.exit.tmp" && mv -f "$1.exit.tmp" "$1.exit"
`

// spawn is the background branch of terminal_tool.
func (s *Session) spawn(ctx context.Context, args *pyjson.Object, command, workdir any) (reply, error) {
	cmd, ok := command.(string)
	switch {
	case command == nil:
		cmd = "" // shlex.quote(None) is ''
	case !ok:
		return terminalReply("", -1, fmt.Sprintf("Failed to start background process: expected string or bytes-like object, got '%s'", pyjson.TypeName(command))), nil
	}
	id := s.t.opts.NewID()
	b := base(id)
	mode := "pipe"
	if pyjson.Truthy(arg(args, "pty", false)) {
		mode = "pty"
	}
	// All in a subshell: a cd must not reach the sandbox's shell.
	var sc strings.Builder
	sc.WriteString("(\n")
	cwd := ""
	if pyjson.Truthy(workdir) {
		cwd = pyjson.Str(workdir)
		fmt.Fprintf(&sc, "d=%s\n[ -e \"$d\" ] || { echo 'nodir 2 No such file or directory'; exit 0; }\n[ -d \"$d\" ] || { echo 'nodir 20 Not a directory'; exit 0; }\ncd -- \"$d\" || { echo 'nodir 13 Permission denied'; exit 0; }\n", escapeArg(cwd))
	}
	fmt.Fprintf(&sc, "b=%s\nrm -f \"$b\".*\nmkfifo \"$b.in\" || exit 1\n", escapeArg(b))
	// Without setsid(1) the process stays in the batch's group; kill then
	// ends it by pid.
	sc.WriteString("s=setsid; command -v setsid >/dev/null 2>&1 || s=\n")
	fmt.Fprintf(&sc, "$s bash -c %s hermes-bg \"$b\" %s %s </dev/null >/dev/null 2>&1 &\n", escapeArg(bgWrapper), escapeArg(cmd), mode)
	sc.WriteString("for i in $(seq 500); do [ -s \"$b.pid\" ] && break; sleep 0.01; done\necho \"pid $(cat \"$b.pid\" 2>/dev/null)\"\necho \"cwd $PWD\"\n)\n")
	r, err := s.sh.Exec(ctx, sc.String(), sandbox.ExecOptions{Timeout: probeTimeout})
	if err != nil {
		return reply{}, err
	}
	if rest, ok := strings.CutPrefix(r.Stdout, "nodir "); ok {
		// Popen(cwd=...) raises FileNotFoundError, NotADirectoryError or
		// PermissionError.
		errno, msg, _ := strings.Cut(strings.TrimSpace(rest), " ")
		return terminalReply("", -1, fmt.Sprintf("Failed to start background process: [Errno %s] %s: %s", errno, msg, pyjson.Repr(cwd))), nil
	}
	if r.ExitCode != 0 {
		return terminalReply("", -1, "Failed to start background process: "+strings.TrimSpace(r.Stdout+r.Stderr)), nil
	}
	p := &proc{id: id, command: command, started: s.t.opts.Now()}
	if command == nil {
		p.command = ""
	}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if v, ok := strings.CutPrefix(line, "pid "); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				p.pid = &n
			}
		}
		if v, ok := strings.CutPrefix(line, "cwd "); ok && s.procs.cwd == "" {
			s.procs.cwd = v
		}
	}
	p.cwd = cwd
	if cwd == "" {
		p.cwd = s.procs.cwd
	}
	s.procs.prune(p.started)
	s.procs.running = append(s.procs.running, p)

	var pid any
	if p.pid != nil {
		pid = *p.pid
	}
	out := pyjson.NewObject().Set("output", "Background process started").Set("session_id", id).Set("pid", pid).Set("exit_code", 0).Set("error", nil)
	if ci := arg(args, "check_interval", nil); pyjson.Truthy(ci) {
		// effective_interval = max(30, check_interval)
		if _, err := pyCompare(ci, ">", 30); err != nil {
			return terminalReply("", -1, "Failed to start background process: "+err.Error()), nil
		}
		if less, err := pyCompare(ci, "<", 30); err != nil {
			return terminalReply("", -1, "Failed to start background process: "+err.Error()), nil
		} else if less {
			out.Set("check_interval_note", fmt.Sprintf("Requested %ss raised to minimum 30s", pyjson.Str(ci)))
		}
	}
	return reply{obj: out}, nil
}

// probe learns which running processes have finished and reads the last
// bytes of the logs asked for (tails: session id -> characters wanted).
// wait, when positive, first blocks until p exits or that many seconds
// pass.
func (s *Session) probe(ctx context.Context, tails map[string]int, waitFor *proc, wait float64) (map[string]string, error) {
	var sc strings.Builder
	tok := make([]byte, 8)
	_, _ = rand.Read(tok)
	mark := "@@HERMES-" + hex.EncodeToString(tok) + "@@"
	if waitFor != nil && wait > 0 {
		fmt.Fprintf(&sc, "i=0; while [ ! -e %s ] && [ $i -lt %d ]; do sleep 0.1; i=$((i+1)); done\n",
			escapeArg(base(waitFor.id)+".exit"), int64(math.Ceil(wait*10)))
	}
	for _, p := range s.procs.running {
		fmt.Fprintf(&sc, "[ -e %[1]s.exit ] && echo \"X %[2]s $(cat %[1]s.exit) $(stat -c %%Y %[1]s.exit)\"\n", escapeArg(base(p.id)), p.id)
	}
	ids := make([]string, 0, len(tails))
	want := 1 << 16
	for id, n := range tails {
		ids = append(ids, id)
		want += 4*n + 256
	}
	sort.Strings(ids)
	for _, id := range ids {
		// Up to four bytes a character.
		fmt.Fprintf(&sc, "echo %s; tail -c %d %s.log 2>/dev/null; echo; echo %s\n", mark+id, 4*tails[id], escapeArg(base(id)), mark)
	}
	timeout := probeTimeout + time.Duration(max(wait, 0)*float64(time.Second))
	r, err := s.sh.Exec(ctx, sc.String(), sandbox.ExecOptions{Timeout: timeout, MaxOutput: want})
	if err != nil {
		return nil, err
	}
	out := r.Stdout
	logs := map[string]string{}
	type done struct {
		p     *proc
		code  int
		mtime int64
	}
	var fin []done
	for _, id := range ids {
		start := strings.Index(out, mark+id+"\n")
		if start < 0 {
			continue
		}
		body := out[start+len(mark+id)+1:]
		end := strings.Index(body, "\n"+mark+"\n")
		if end < 0 {
			continue
		}
		logs[id] = pystr.Tail(pyjson.ValidUTF8([]byte(body[:end])), tails[id])
		out = out[:start] + body[end+len(mark)+2:]
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "X" {
			continue
		}
		p := s.procs.get(f[1])
		code, err1 := strconv.Atoi(f[2])
		mtime, err2 := strconv.ParseInt(f[3], 10, 64)
		if p == nil || p.exited || err1 != nil || err2 != nil {
			continue
		}
		fin = append(fin, done{p, code, mtime})
	}
	sort.SliceStable(fin, func(i, j int) bool { return fin[i].mtime < fin[j].mtime })
	for _, d := range fin {
		d.p.exited, d.p.code = true, d.code
		s.procs.finish(d.p)
	}
	return logs, nil
}

// process is the process tool's handler (_handle_process).
func (s *Session) process(ctx context.Context, args *pyjson.Object) (reply, error) {
	action := arg(args, "action", "")
	sid := ""
	if v := arg(args, "session_id", nil); v != nil {
		sid = pyjson.Str(v)
	}
	a, _ := action.(string)
	switch a {
	case "list":
		return s.listProcs(ctx)
	case "poll", "log", "wait", "kill", "write", "submit":
	default:
		return errorReply(false, "Unknown process action: %s. Use: list, poll, log, wait, kill, write, submit", pyjson.Str(action)), nil
	}
	if sid == "" {
		return errorReply(false, "session_id is required for %s", a), nil
	}
	switch a {
	case "poll":
		return s.pollProc(ctx, sid)
	case "log":
		return s.logProc(ctx, sid, arg(args, "offset", 0), arg(args, "limit", 200))
	case "wait":
		return s.waitProc(ctx, sid, arg(args, "timeout", nil))
	case "kill":
		return s.killProc(ctx, sid)
	}
	data := pyjson.Str(arg(args, "data", ""))
	if a == "submit" {
		data += "\n"
	}
	return s.writeProc(ctx, sid, data)
}

func deref(r *reply) reply {
	if r == nil {
		return reply{}
	}
	return *r
}

func notFound(sid string) reply {
	return reply{obj: pyjson.NewObject().Set("status", "not_found").Set("error", "No process with ID "+sid)}
}

func status(p *proc) string {
	if p.exited {
		return "exited"
	}
	return "running"
}

func (p *proc) pidValue() any {
	if p.pid == nil {
		return nil
	}
	return *p.pid
}

func (s *Session) uptime(p *proc) int {
	return int(s.t.opts.Now().Sub(p.started) / time.Second)
}

func (s *Session) listProcs(ctx context.Context) (reply, error) {
	tails := map[string]int{}
	all := append(slices.Clone(s.procs.running), s.procs.finished...)
	for _, p := range all {
		tails[p.id] = 200
	}
	logs, err := s.probe(ctx, tails, nil, 0)
	if err != nil {
		return reply{}, err
	}
	var l []any
	for _, p := range append(slices.Clone(s.procs.running), s.procs.finished...) {
		e := pyjson.NewObject().Set("session_id", p.id).Set("command", pystr.Head(pyjson.Str(p.command), 200)).
			Set("cwd", p.cwd).Set("pid", p.pidValue()).Set("started_at", p.started.Local().Format("2006-01-02T15:04:05")).
			Set("uptime_seconds", s.uptime(p)).Set("status", status(p)).Set("output_preview", logs[p.id])
		if p.exited {
			e.Set("exit_code", p.code)
		}
		l = append(l, e)
	}
	if l == nil {
		l = []any{}
	}
	return reply{obj: pyjson.NewObject().Set("processes", l)}, nil
}

// lookup finds a process, brings its state up to date and reads the last
// tail characters of its output; no process answers not_found.
func (s *Session) lookup(ctx context.Context, sid string, tail int) (*proc, string, *reply, error) {
	if s.procs.get(sid) == nil {
		r := notFound(sid)
		return nil, "", &r, nil
	}
	var tails map[string]int
	if tail > 0 {
		tails = map[string]int{sid: tail}
	}
	logs, err := s.probe(ctx, tails, nil, 0)
	if err != nil {
		return nil, "", nil, err
	}
	return s.procs.get(sid), logs[sid], nil, nil
}

func (s *Session) pollProc(ctx context.Context, sid string) (reply, error) {
	p, log, nf, err := s.lookup(ctx, sid, 1000)
	if nf != nil || err != nil {
		return deref(nf), err
	}
	out := pyjson.NewObject().Set("session_id", p.id).Set("command", p.command).Set("status", status(p)).
		Set("pid", p.pidValue()).Set("uptime_seconds", s.uptime(p)).Set("output_preview", stripANSI(log))
	if p.exited {
		out.Set("exit_code", p.code)
	}
	return reply{obj: out}, nil
}

// logProc is read_log: lines of the output buffer, by default the last 200.
func (s *Session) logProc(ctx context.Context, sid string, offset, limit any) (reply, error) {
	p, log, nf, err := s.lookup(ctx, sid, maxBufferChars)
	if nf != nil || err != nil {
		return deref(nf), err
	}
	lines := pystr.SplitLines(stripANSI(log), false)
	var sel []string
	// if offset == 0 and limit > 0: lines[-limit:] else lines[offset:offset + limit]
	last := false
	if pyEqual(offset, big.NewInt(0)) {
		if last, err = pyCompare(limit, ">", 0); err != nil {
			return reply{}, err
		}
	}
	if last {
		n, err := sliceIndex(limit)
		if err != nil {
			return reply{}, err
		}
		sel = pySlice(lines, -n, len(lines))
	} else {
		stop, err := pyAdd(offset, limit)
		if err != nil {
			return reply{}, err
		}
		i, err := sliceIndex(offset)
		if err != nil {
			return reply{}, err
		}
		j, err := sliceIndex(stop)
		if err != nil {
			return reply{}, err
		}
		sel = pySlice(lines, i, j)
	}
	return reply{obj: pyjson.NewObject().Set("session_id", p.id).Set("status", status(p)).
		Set("output", strings.Join(sel, "\n")).Set("total_lines", len(lines)).Set("showing", fmt.Sprintf("%d lines", len(sel)))}, nil
}

// waitProc is wait: block until the process exits or the time is up, at
// most TERMINAL_TIMEOUT seconds.
func (s *Session) waitProc(ctx context.Context, sid string, timeout any) (reply, error) {
	max := s.t.opts.CommandTimeout
	effective := timeout
	note := ""
	over := false
	if pyjson.Truthy(timeout) {
		var err error
		if over, err = pyCompare(timeout, ">", max); err != nil {
			return reply{}, err
		}
	}
	if over {
		effective = max
		note = fmt.Sprintf("Requested wait of %ss was clamped to configured limit of %ds", pyjson.Str(timeout), max)
	} else if !pyjson.Truthy(timeout) {
		effective = max
	}
	p := s.procs.get(sid)
	if p == nil {
		return notFound(sid), nil
	}
	secs := 0.0
	if n, ok := asNum(effective); ok {
		secs = n.float()
	}
	var logs map[string]string
	var err error
	if !p.exited && secs > 0 {
		logs, err = s.probe(ctx, map[string]int{sid: 2000}, p, secs)
	} else {
		logs, err = s.probe(ctx, map[string]int{sid: 2000}, nil, 0)
	}
	if err != nil {
		return reply{}, err
	}
	out := pyjson.NewObject()
	if p.exited && secs > 0 {
		out.Set("status", "exited").Set("exit_code", p.code).Set("output", stripANSI(logs[sid]))
		if note != "" {
			out.Set("timeout_note", note)
		}
		return reply{obj: out}, nil
	}
	out.Set("status", "timeout").Set("output", stripANSI(pystr.Tail(logs[sid], 1000)))
	if note == "" {
		note = fmt.Sprintf("Waited %ss, process still running", pyjson.Str(effective))
	}
	return reply{obj: out.Set("timeout_note", note)}, nil
}

func (s *Session) killProc(ctx context.Context, sid string) (reply, error) {
	p, _, nf, err := s.lookup(ctx, sid, 0)
	if nf != nil || err != nil {
		return deref(nf), err
	}
	if p.exited {
		return reply{obj: pyjson.NewObject().Set("status", "already_exited").Set("exit_code", p.code)}, nil
	}
	b := escapeArg(base(p.id))
	cmd := fmt.Sprintf("g=$(cat %[1]s.pgid 2>/dev/null) && kill -TERM -- -\"$g\" 2>/dev/null; p=$(cat %[1]s.pid 2>/dev/null) && kill -TERM \"$p\" 2>/dev/null; true", b)
	if _, err := s.sh.Exec(ctx, cmd, sandbox.ExecOptions{Timeout: probeTimeout}); err != nil {
		return reply{}, err
	}
	p.exited, p.code, p.killed = true, -15, true
	s.procs.finish(p)
	return reply{obj: pyjson.NewObject().Set("status", "killed").Set("session_id", p.id)}, nil
}

// writeProc is write_stdin: data to the process's stdin, no newline added.
func (s *Session) writeProc(ctx context.Context, sid, data string) (reply, error) {
	p, _, nf, err := s.lookup(ctx, sid, 0)
	if nf != nil || err != nil {
		return deref(nf), err
	}
	if p.exited {
		return reply{obj: pyjson.NewObject().Set("status", "already_exited").Set("error", "Process has already finished")}, nil
	}
	r, err := s.sh.Exec(ctx, "exec 4<>"+escapeArg(base(p.id)+".in")+" && cat >&4", sandbox.ExecOptions{Timeout: probeTimeout, Stdin: []byte(data)})
	if err != nil {
		return reply{}, err
	}
	if r.TimedOut || r.ExitCode != 0 {
		msg := strings.TrimSpace(r.Stdout + r.Stderr)
		if r.TimedOut {
			msg = "the process did not read its stdin within 10 seconds"
		}
		return reply{obj: pyjson.NewObject().Set("status", "error").Set("error", msg)}, nil
	}
	return reply{obj: pyjson.NewObject().Set("status", "ok").Set("bytes_written", pystr.Len(data))}, nil
}
