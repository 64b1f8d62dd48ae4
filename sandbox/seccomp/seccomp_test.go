package seccomp

import (
	"encoding/json"
	"reflect"
	"runtime"
	"slices"
	"testing"

	moby "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/proctor-dev/proctor/sandbox"
)

// OCI resolves the rules as the engine itself would for a container with
// the isolated sandbox's capabilities on this machine: pins the behaviour
// of moby/profiles' seccomp/seccomp_linux.go (setupSeccomp).
func TestOCIAsTheEngineResolvesIt(t *testing.T) {
	body, err := Docker()
	if err != nil {
		t.Fatal(err)
	}
	caps := []string{"CAP_" + sandbox.CapWarden}
	for _, c := range sandbox.Capabilities {
		caps = append(caps, "CAP_"+c)
	}
	want, err := moby.LoadProfile(body, &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: caps}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := OCI(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("OCI(%s) differs from the engine's resolution:\n got %s\nwant %s", runtime.GOARCH, g, w)
	}
}

// What the warden needs is allowed, and no rule lets anyone make a user
// namespace.
func TestOCIWardenWithoutUserNamespaces(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		p, err := OCI(arch)
		if err != nil {
			t.Fatal(err)
		}
		if p.DefaultAction != specs.ActErrno || len(p.Architectures) == 0 {
			t.Errorf("%s: default %s, architectures %v", arch, p.DefaultAction, p.Architectures)
		}
		allowed := map[string]bool{}
		for _, r := range p.Syscalls {
			for _, n := range r.Names {
				if r.Action != specs.ActAllow {
					continue
				}
				if n == "unshare" || n == "clone" {
					masked := slices.ContainsFunc(r.Args, func(a specs.LinuxSeccompArg) bool {
						return a.Op == specs.OpMaskedEqual && a.Value&unix.CLONE_NEWUSER != 0 && a.ValueTwo == 0
					})
					if !masked {
						t.Errorf("%s: %s allowed without the CLONE_NEWUSER mask: %+v", arch, n, r)
					}
				}
				allowed[n] = true
			}
		}
		for _, n := range []string{"mount", "umount2", "setns", "unshare", "clone", "chroot"} {
			if !allowed[n] {
				t.Errorf("%s: %s is not allowed", arch, n)
			}
		}
		for _, n := range []string{"bpf", "perf_event_open", "syslog", "open_by_handle_at", "kexec_load", "init_module"} {
			if allowed[n] {
				t.Errorf("%s: %s is allowed", arch, n)
			}
		}
	}
	if _, err := OCI("sparc"); err == nil {
		t.Error("an unknown architecture got a profile")
	}
}
