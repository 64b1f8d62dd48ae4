package docker

import (
	"encoding/json"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// isolatedSeccomp is Docker's default seccomp profile as it applies to a
// container without CAP_SYS_ADMIN, plus only what the warden needs: mount,
// umount2 and setns, unshare and clone without CLONE_NEWUSER. Granting the
// capability would otherwise make the default profile open bpf,
// perf_event_open, syslog and new user namespaces to every process in the
// container, the agent's included, although only the warden holds the
// capability and it drops it before the agent's shell starts.
var isolatedSeccomp = sync.OnceValues(func() (string, error) {
	p := seccomp.DefaultProfile()
	var rules []*seccomp.Syscall
	for _, r := range p.Syscalls {
		if r.Includes != nil && slices.Contains(r.Includes.Caps, "CAP_SYS_ADMIN") {
			continue // the rules the capability would turn on
		}
		if r.Excludes != nil && slices.Contains(r.Excludes.Caps, "CAP_SYS_ADMIN") {
			// The limits it would lift (clone's namespace flags, clone3)
			// hold anyway.
			c, ex := *r, *r.Excludes
			ex.Caps = slices.DeleteFunc(slices.Clone(ex.Caps), func(c string) bool { return c == "CAP_SYS_ADMIN" })
			c.Excludes = &ex
			r = &c
		}
		rules = append(rules, r)
	}
	noUserNS := func(index uint) []specs.LinuxSeccompArg {
		return []specs.LinuxSeccompArg{{Index: index, Value: unix.CLONE_NEWUSER, ValueTwo: 0, Op: specs.OpMaskedEqual}}
	}
	rules = append(rules,
		&seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"mount", "umount2", "setns"}, Action: specs.ActAllow}},
		&seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"unshare"}, Action: specs.ActAllow, Args: noUserNS(0)}},
		&seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow, Args: noUserNS(0)},
			Excludes: &seccomp.Filter{Arches: []string{"s390", "s390x"}}},
		&seccomp.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow, Args: noUserNS(1)},
			Includes: &seccomp.Filter{Arches: []string{"s390", "s390x"}}},
	)
	p.Syscalls = rules
	b, err := json.Marshal(p)
	return string(b), err
})
