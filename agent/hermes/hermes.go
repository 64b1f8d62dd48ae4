// Package hermes is hermes-agent's terminal and file tools (terminal,
// process, read_file, write_file, patch, search_files) and the way its RL
// agent loop dispatches them, reimplemented on proctor's sandbox so a model
// trained in hermes' Terminal-Bench 2 and SWE environments receives, byte
// for byte, what it received there: the same tool definitions, the same
// results (key order, Python json.dumps spacing and escaping), the same
// answers to bad calls.
//
// The reference is NousResearch/hermes-agent at commit Commit. Commands run
// as hermes' container backends run them: each with `bash -c` from the
// task's working directory, so `cd` and `export` do not carry over between
// calls. docs/tools.md lists every place proctor differs on purpose.
package hermes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/proctor-dev/proctor/agent/pyjson"
	"github.com/proctor-dev/proctor/sandbox"
)

// Commit is the hermes-agent commit whose tools this package reproduces:
// the first at which its Terminal-Bench 2 environment runs again after the
// corruption of ed27b826 and answers invalid JSON arguments with an error
// instead of calling the tool with none (environments/agent_loop.py).
const Commit = "475205e30b9c50c410e7d1cbf5653c0827a1ca61"

// Shell is what the tools need of a sandbox.
type Shell interface {
	Exec(ctx context.Context, cmd string, opts sandbox.ExecOptions) (sandbox.ExecResult, error)
}

// Toolsets are hermes' toolsets (toolsets.py) by name.
var Toolsets = map[string][]string{
	"terminal": {"terminal", "process"},
	"file":     {"read_file", "write_file", "patch", "search_files"},
}

// DefaultCommandTimeout is hermes' TERMINAL_TIMEOUT when unset, in seconds.
const DefaultCommandTimeout = 180

// Options tune a toolset.
type Options struct {
	// CommandTimeout is hermes' TERMINAL_TIMEOUT in seconds: a terminal
	// command's default time limit and the most process(action="wait")
	// blocks. Zero means DefaultCommandTimeout. hermes' Terminal-Bench 2
	// environment sets 300, its SWE environment 120.
	CommandTimeout int
	// Now and NewID replace the clock and the random process session ids
	// ("proc_" and 12 hex digits), for tests.
	Now   func() time.Time
	NewID func() string
}

// Toolset is a set of hermes tools.
type Toolset struct {
	names []string
	opts  Options
}

// New selects tools by toolset name ("terminal", "file").
func New(sets []string, o Options) (*Toolset, error) {
	var names []string
	for _, s := range sets {
		ns, ok := Toolsets[s]
		if !ok {
			return nil, fmt.Errorf("unknown toolset %q: want terminal or file", s)
		}
		for _, n := range ns {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	// hermes' registry hands out definitions sorted by name.
	sort.Strings(names)
	if o.CommandTimeout <= 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.NewID == nil {
		o.NewID = randomID
	}
	return &Toolset{names: names, opts: o}, nil
}

// Names lists the tools, sorted.
func (t *Toolset) Names() []string { return slices.Clone(t.names) }

// Definition is one tool as the model is told of it.
type Definition struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON Schema, keys in hermes' order
}

// Definitions are the tools' definitions, in the order hermes sends them.
func (t *Toolset) Definitions() []Definition {
	var out []Definition
	for _, n := range t.names {
		s := schemas[n]
		desc, _ := s.Get("description")
		p, _ := s.Get("parameters")
		out = append(out, Definition{Name: n, Description: desc.(string), Parameters: json.RawMessage(pyjson.Dumps(p, false))})
	}
	return out
}

// DefinitionsJSON is the definitions as hermes' get_tool_definitions
// returns them, through json.dumps: what golden tests pin.
func (t *Toolset) DefinitionsJSON() string {
	var l []any
	for _, n := range t.names {
		l = append(l, pyjson.NewObject().Set("type", "function").Set("function", schemas[n]))
	}
	return pyjson.Dumps(l, true)
}

// Session is one rollout's use of the tools: the state hermes keeps per
// task (background processes, the read loop tracker, which commands the
// sandbox has) and per agent loop (the last tool result).
type Session struct {
	t     *Toolset
	sh    Shell
	procs registry
	reads struct {
		last        []any // the last read or search call's key, nil after another tool
		consecutive int
	}
	has  map[string]bool
	last *answer
}

// NewSession starts a rollout's session on sh.
func (t *Toolset) NewSession(sh Shell) *Session {
	return &Session{t: t, sh: fresh{sh}, has: map[string]bool{}}
}

// fresh runs every command from the sandbox's starting state: hermes' own
// backends start each command in a process of its own from the working
// directory, so nothing persists between its calls, and the persistent
// shell's state would only cost a restore and a save on each (and, where
// the plugin shares the shell, carry its cd and exports to the agent).
type fresh struct{ sh Shell }

func (f fresh) Exec(ctx context.Context, cmd string, opts sandbox.ExecOptions) (sandbox.ExecResult, error) {
	opts.Fresh = true
	return f.sh.Exec(ctx, cmd, opts)
}

// envTimeout is a file operation's time limit: the backend's default,
// TERMINAL_TIMEOUT.
func (s *Session) envTimeout() time.Duration {
	return time.Duration(s.t.opts.CommandTimeout) * time.Second
}

// reply is a tool's answer before it is written out: a dict for json.dumps
// (ascii: with ensure_ascii=True), and text hermes appends after it.
type reply struct {
	obj    *pyjson.Object
	ascii  bool
	suffix string
	// again is a previous answer sent as it was.
	again *answer
}

// answer is a written reply.
type answer struct {
	text   string
	failed bool
}

func (r reply) answer() answer {
	if r.again != nil {
		return *r.again
	}
	v, _ := r.obj.Get("error")
	return answer{pyjson.Dumps(r.obj, r.ascii) + r.suffix, pyjson.Truthy(v)}
}

func errorReply(ascii bool, format string, args ...any) reply {
	return reply{obj: pyjson.NewObject().Set("error", fmt.Sprintf(format, args...)), ascii: ascii}
}

// toolFailed is what hermes' registry answers when a handler raises.
func toolFailed(err error) reply {
	var pe *pyError
	if errors.As(err, &pe) {
		return errorReply(true, "Tool execution failed: %s: %s", pe.Type, pe.Msg)
	}
	return errorReply(true, "Tool execution failed: %s", err)
}

// Call runs one tool call as hermes' RL agent loop does
// (environments/agent_loop.py, then model_tools.handle_function_call) and
// returns what the model receives. failed is set when the call was refused
// or the answer carries an error.
func (s *Session) Call(ctx context.Context, name, arguments string) (out string, failed bool) {
	a := s.call(ctx, name, arguments).answer()
	s.last = &a
	return a.text, a.failed
}

func (s *Session) call(ctx context.Context, name, arguments string) reply {
	if !slices.Contains(s.t.names, name) {
		return errorReply(true, "Unknown tool '%s'. Available tools: %s", name, pyjson.Repr(s.t.names))
	}
	v, err := pyjson.Decode(arguments)
	if err != nil {
		// A RecursionError escapes hermes' loop and ends the rollout;
		// proctor answers it like any undecodable arguments.
		return errorReply(true, "Invalid JSON in tool arguments: %s. Please retry with valid JSON.", err)
	}
	if v == nil {
		// Arguments of `null` decode to None, which hermes neither
		// dispatches nor answers: the model receives the previous call's
		// result again. With none, hermes' loop fails; proctor says why.
		if s.last != nil {
			return reply{again: s.last}
		}
		return errorReply(true, "Tool execution failed: UnboundLocalError: cannot access local variable 'tool_result' where it is not associated with a value")
	}
	args, isDict := v.(*pyjson.Object)
	if name == "terminal" {
		// The loop logs args.get("command", "")[:80] before dispatching.
		if !isDict {
			return toolFailed(attrErr(v, "get"))
		}
		if err := sliceable(args, "command"); err != nil {
			return toolFailed(err)
		}
	}
	if name != "read_file" && name != "search_files" {
		s.reads.last, s.reads.consecutive = nil, 0
	}
	if !isDict {
		return toolFailed(attrErr(v, "get"))
	}
	r, err := handlers[name](s, ctx, args)
	if err != nil {
		var pe *pyError
		if errors.As(err, &pe) {
			return toolFailed(err)
		}
		// The sandbox failed under the tool: not the model's doing.
		return errorReply(false, "%s failed: %v", name, err)
	}
	return r
}

// handlers are the tools' handlers, by name.
var handlers = map[string]func(*Session, context.Context, *pyjson.Object) (reply, error){
	"terminal":     (*Session).terminal,
	"process":      (*Session).process,
	"read_file":    (*Session).readFile,
	"write_file":   (*Session).writeFile,
	"patch":        (*Session).patch,
	"search_files": (*Session).searchFiles,
}

// sliceable checks that args.get(key, "")[:80] works.
func sliceable(args *pyjson.Object, key string) error {
	v, ok := args.Get(key)
	if !ok {
		return nil
	}
	switch v.(type) {
	case string, []any:
		return nil
	case *pyjson.Object:
		return typeErr("unhashable type: 'slice'")
	}
	return typeErr("'%s' object is not subscriptable", pyjson.TypeName(v))
}

// arg is args.get(key, def).
func arg(args *pyjson.Object, key string, def any) any {
	if v, ok := args.Get(key); ok {
		return v
	}
	return def
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "proc_" + hex.EncodeToString(b)
}
