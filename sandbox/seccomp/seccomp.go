// Package seccomp builds the seccomp profile of a sandbox that keeps the
// agent apart from the verifier: Docker's default profile as it applies to
// a container without CAP_SYS_ADMIN, plus only what the warden needs
// (mount, umount2 and setns; unshare and clone without CLONE_NEWUSER).
// Granting the capability would otherwise make the default profile open
// bpf, perf_event_open, syslog and new user namespaces to every process in
// the sandbox, the agent's included, although only the warden holds the
// capability and it drops it before the agent's shell starts.
//
// The docker backend hands the profile to the engine in Docker's format
// (Docker); a Kubernetes node loads it from a file in the runtime's format
// (OCI), as a Localhost profile.
package seccomp

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox"
)

// isolated is the profile in Docker's format, rules still conditional on
// the architecture, the kernel and the container's capabilities.
var isolated = sync.OnceValue(func() *moby.Seccomp {
	p := moby.DefaultProfile()
	var rules []*moby.Syscall
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
		&moby.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"mount", "umount2", "setns"}, Action: specs.ActAllow}},
		&moby.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"unshare"}, Action: specs.ActAllow, Args: noUserNS(0)}},
		&moby.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow, Args: noUserNS(0)},
			Excludes: &moby.Filter{Arches: []string{"s390", "s390x"}}},
		&moby.Syscall{LinuxSyscall: specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow, Args: noUserNS(1)},
			Includes: &moby.Filter{Arches: []string{"s390", "s390x"}}},
	)
	p.Syscalls = rules
	return p
})

// Docker is the profile in Docker's format, for the engine's
// `--security-opt seccomp=...`.
var Docker = sync.OnceValues(func() (string, error) {
	b, err := json.Marshal(isolated())
	return string(b), err
})

// archs maps Go's architecture names to seccomp's, for the ones a node
// runs.
var archs = map[string]specs.Arch{
	"386": specs.ArchX86, "amd64": specs.ArchX86_64, "arm": specs.ArchARM, "arm64": specs.ArchAARCH64,
	"ppc64le": specs.ArchPPC64LE, "riscv64": specs.ArchRISCV64, "s390x": specs.ArchS390X,
}

// OCI is the profile as the container runtime applies it (the runtime
// spec's format, what a Kubernetes node reads from a Localhost profile's
// file), for a node of Go architecture arch running an isolated sandbox:
// its capabilities are sandbox.Capabilities and sandbox.CapWarden. Rules
// that depend on the kernel's version are taken as on a current kernel:
// every rule for a version at least some older one, none of those for
// older kernels.
func OCI(arch string) (*specs.LinuxSeccomp, error) {
	caps := []string{"CAP_" + sandbox.CapWarden}
	for _, c := range sandbox.Capabilities {
		caps = append(caps, "CAP_"+c)
	}
	sa, ok := archs[arch]
	if !ok {
		return nil, fmt.Errorf("seccomp profile for architecture %q: want one of amd64, arm64, 386, arm, ppc64le, riscv64, s390x", arch)
	}
	p := isolated()
	out := p.LinuxSeccomp
	out.Syscalls = nil
	for _, a := range p.ArchMap {
		if a.Arch == sa {
			out.Architectures = append([]specs.Arch{a.Arch}, a.SubArches...)
		}
	}
	native := nativeName(sa)
	for _, r := range p.Syscalls {
		if applies(r, native, caps) {
			out.Syscalls = append(out.Syscalls, r.LinuxSyscall)
		}
	}
	return &out, nil
}

// nativeName is libseccomp's name of an architecture, which rules'
// filters use ("amd64", "arm64", "s390x", ...).
func nativeName(a specs.Arch) string {
	switch a {
	case specs.ArchX86:
		return "x86"
	case specs.ArchX86_64:
		return "amd64"
	case specs.ArchARM:
		return "arm"
	case specs.ArchAARCH64:
		return "arm64"
	case specs.ArchPPC64LE:
		return "ppc64le"
	case specs.ArchRISCV64:
		return "riscv64"
	case specs.ArchS390X:
		return "s390x"
	}
	return ""
}

// applies reports whether a conditional rule holds on a current kernel of
// the native architecture, in a container with caps.
func applies(r *moby.Syscall, native string, caps []string) bool {
	if ex := r.Excludes; ex != nil {
		if slices.Contains(ex.Arches, native) || ex.MinKernel != nil {
			return false
		}
		for _, c := range ex.Caps {
			if slices.Contains(caps, c) {
				return false
			}
		}
	}
	if in := r.Includes; in != nil {
		if len(in.Arches) > 0 && !slices.Contains(in.Arches, native) {
			return false
		}
		for _, c := range in.Caps {
			if !slices.Contains(caps, c) {
				return false
			}
		}
	}
	return true
}
