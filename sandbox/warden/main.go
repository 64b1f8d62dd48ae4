//go:build linux

// Command warden is the small static program proctor puts into every
// isolated sandbox. It keeps what the agent starts apart from what the
// verifier reads:
//
//	warden mux [-no-network]
//	    the sandbox's first process: seals /.proctor read-only and serves
//	    the mux protocol (sandbox/mux) on its standard streams, starting
//	    the shells the host asks for on channels of their own, killing
//	    process groups and running remounts for it, until stdin ends.
//	    With -no-network (a container whose network the engine left
//	    off), it first checks that the container has no interface but
//	    the loopback, and writes the loopback /etc/hosts.
//	warden relay
//	    serves the mux protocol's relays alone (KindListen: a port of the
//	    sandbox's loopback whose connections are carried to the host) on
//	    its standard streams, until stdin ends; for a sandbox whose first
//	    process is not the mux.
//	warden plugin [-private DIR]... [-size MiB] [-user U] -- ARGV...
//	    seals /.proctor read-only, enters a mount namespace of its own in
//	    which every DIR is an empty private tmpfs, drops CAP_SYS_ADMIN on
//	    every thread, prints "@@PROCTOR NS <pid>" (its own pid, which holds
//	    the namespace) and runs ARGV there (the plugin's shell: setup,
//	    verification, teardown).
//	warden agent [-private DIR]... [-user U] -- ARGV...
//	    runs ARGV (the agent's shell) in new PID and mount namespaces, with
//	    /proc remounted (and masked as the container's was), every DIR and
//	    the folders on its path pinned (mount points of the namespace, which
//	    the agent cannot rename or remove), and CAP_SYS_ADMIN dropped for
//	    good: nothing the agent starts can see, signal or trace the
//	    plugin's processes, or reach its mounts. The namespace's init holds
//	    no more than the shell (U's ids, the same capabilities, on every
//	    thread) and cannot be traced. It prints "@@PROCTOR NS <pid>" (the
//	    init, as the container numbers it) before ARGV starts.
//	warden remount [-ns PID] [-size MiB] [-user U] DIR...
//	    replaces each DIR with a fresh empty tmpfs owned by U, in the mount
//	    namespace of PID (a plugin warden) or else the caller's.
//	warden kill NSINIT PGID
//	    kills process group PGID as numbered inside the PID namespace whose
//	    init is NSINIT (0: the caller's namespace).
//	warden put [-user U] DIR
//	                    extracts a tar stream from stdin into DIR (with
//	                    -user, as root: owned by U, modes exact)
//	warden get [-engine] PATH
//	                    writes PATH (file or folder) as a tar stream
//	warden read [-engine] PATH N
//	                    writes the first N bytes of file PATH; the file's
//	                    size goes to stderr as "size S". Anything but a
//	                    regular file reads as empty, as the engine's
//	                    archive gives it
//	warden id USER      prints the uid and gid USER runs as
//
// put -user, get -engine and read -engine are the host's root operations
// in the container's own mount namespace: they find paths as the engine's
// archive API does, links followed there and the container's /proc empty
// (resolve.go), never reaching the plugin's private folders.
//
// Exit codes of put, get and read: 0 ok, 3 not found (on /proc too), 4 a
// directory (read), 5 an unsafe archive (put), 1 anything else.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Dir is where the host puts the warden (read-only once sealed).
const Dir = "/.proctor"

func main() {
	if len(os.Args) < 2 {
		fail(2, "usage: warden mux|relay|plugin|agent|remount|kill|put|get|read|id ...")
	}
	args := os.Args[2:]
	var err error
	switch os.Args[1] {
	case "mux":
		err = runMux(args)
	case "relay":
		err = serveRelay(os.Stdin, os.Stdout)
	case "plugin":
		err = plugin(args)
	case "agent":
		err = agent(args)
	case "agent-init":
		err = agentInit(args)
	case "remount":
		err = remount(args)
	case "kill":
		err = muxKill(strings.Join(args, " "))
	case "put":
		err = put(args)
	case "get":
		err = get(args)
	case "read":
		err = read(args)
	case "id":
		err = id(args)
	default:
		fail(2, "unknown command %q", os.Args[1])
	}
	if err != nil {
		code := 1
		if c, ok := err.(exitCode); ok {
			code = c.code
		}
		fail(code, "%v", err)
	}
}

// runMux runs the sandbox's first process.
func runMux(args []string) error {
	switch {
	case len(args) == 1 && args[0] == "-no-network":
		if err := noNetwork(); err != nil {
			return err
		}
	case len(args) > 0:
		return fmt.Errorf("usage: warden mux [-no-network]")
	}
	return serveMux(os.Stdin, os.Stdout)
}

// exitCode is an error that asks for a given exit status.
type exitCode struct {
	code int
	err  error
}

func (e exitCode) Error() string { return e.err.Error() }

func fail(code int, format string, a ...any) {
	fmt.Fprintf(os.Stderr, "warden: "+format+"\n", a...)
	os.Exit(code)
}

// flags is the little option parser every command shares: repeated
// "-name value" pairs (and the switch -engine), then "--" and the
// command to run.
type flags struct {
	private []string
	size    int64
	user    string
	ns      int
	engine  bool
	argv    []string
	rest    []string
}

func parse(args []string) (flags, error) {
	var f flags
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			f.argv = args[i+1:]
			return f, nil
		}
		if !strings.HasPrefix(a, "-") {
			f.rest = append(f.rest, a)
			continue
		}
		if a == "-engine" {
			f.engine = true
			continue
		}
		if i+1 >= len(args) {
			return f, fmt.Errorf("%s needs a value", a)
		}
		v := args[i+1]
		i++
		switch a {
		case "-private":
			f.private = append(f.private, v)
		case "-user":
			f.user = v
		case "-ns":
			n, err := strconv.Atoi(v)
			if err != nil || n < 2 {
				return f, fmt.Errorf("-ns %q: want a process id", v)
			}
			f.ns = n
		case "-size":
			var n int64
			if _, err := fmt.Sscan(v, &n); err != nil || n <= 0 {
				return f, fmt.Errorf("-size %q: want a positive number of MiB", v)
			}
			f.size = n
		default:
			return f, fmt.Errorf("unknown option %s", a)
		}
	}
	return f, nil
}
