package docker

import (
	"fmt"
	"slices"

	"github.com/docker/docker/api/types/container"

	"github.com/proctor-dev/proctor/sandbox"
)

// plan is the container a spec makes, decided without the engine: what
// ContainerCreate gets, before the warden's folder and the backend's
// binds are placed (they need this machine's files).
type plan struct {
	cfg *container.Config
	hc  *container.HostConfig
	// user is who the shells run as: the spec's user, or the image's.
	user string
	// offline: the container is created with the engine's network off
	// (see containerPlan).
	offline bool
}

// engineFacts are what the backend knows of the engine, which a plan
// follows.
type engineFacts struct {
	isolate bool
	// seccomp is the profile of an isolated sandbox (seccomp.Docker).
	seccomp string
	// apparmor: the engine confines containers with AppArmor.
	apparmor bool
	// networked: a container with its network off did not work out on
	// this engine, so "none" is the engine's network "none".
	networked bool
	// quota: the engine may take a storage-opt size (not refused yet).
	quota bool
}

// containerPlan is the container of spec, on network (already checked),
// from image (its reference) whose own user is imageUser.
func containerPlan(spec sandbox.Spec, network sandbox.Network, image, imageUser string, e engineFacts) plan {
	sized := spec.WithDefaults()
	cpus, mem, pids := sized.CPUs, sized.MemoryMB, sized.PidsMax
	labels := map[string]string{sandbox.LabelManaged: "true"}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	init := true
	cfg := &container.Config{
		Image:      image,
		WorkingDir: spec.Workdir,
		Env:        envList(spec.Env),
		User:       spec.User,
		Labels:     labels,
	}
	hc := &container.HostConfig{
		NetworkMode: container.NetworkMode(network),
		Init:        &init,
		Privileged:  false,
		SecurityOpt: []string{"no-new-privileges"},
		CapDrop:     []string{"ALL"},
		CapAdd:      sandbox.Capabilities,
		Resources: container.Resources{
			NanoCPUs:   int64(cpus * 1e9),
			Memory:     mem << 20,
			MemorySwap: mem << 20,
			PidsLimit:  &pids,
		},
	}
	if e.isolate {
		isolated(cfg, hc, e)
	}
	// A sandbox on network "none" gets no network from the engine at
	// all: a network sandbox, even of mode "none", costs the engine a hook
	// on every start that re-executes its own binary (a fifth of a short
	// rollout's machine CPU here). The container still gets a network
	// namespace of its own, whose loopback runc brings up; its first
	// process (the warden's mux, or the shell controller's bash) checks
	// that it has nothing else and writes the /etc/hosts the engine would
	// have written. runc brings the loopback up with IPv6 on, where the
	// engine's "none" has it off (no ::1): a sysctl turns it off. Without
	// isolation the first process runs as the spec's user, so only a root
	// one can do it; for the others, the engine does it all.
	user := spec.User
	if user == "" {
		user = imageUser
	}
	offline := network == sandbox.NetworkNone && !e.networked && (e.isolate || rootUser(user))
	cfg.NetworkDisabled = offline
	if offline {
		hc.Sysctls = map[string]string{"net.ipv6.conf.all.disable_ipv6": "1"}
	}
	attachFirst(cfg, hc)
	if e.quota {
		hc.StorageOpt = map[string]string{"size": fmt.Sprintf("%dM", sized.DiskMB)}
	}
	return plan{cfg: cfg, hc: hc, user: user, offline: offline}
}

// isolated adds what the warden needs to a container's config.
func isolated(cfg *container.Config, hc *container.HostConfig, e engineFacts) {
	// The warden starts as root and runs the shells as the spec's user:
	// an exec as root into a container configured for another user gets
	// no capabilities.
	cfg.User = "0"
	// Only the warden uses CAP_SYS_ADMIN: it builds the namespaces and
	// drops the capability for good before the agent's shell starts.
	hc.CapAdd = append(slices.Clone(sandbox.Capabilities), sandbox.CapWarden)
	hc.SecurityOpt = append(hc.SecurityOpt, "seccomp="+e.seccomp)
	if e.apparmor {
		// Docker's AppArmor profile forbids every mount, the warden's
		// too; capabilities, seccomp and the namespaces still confine the
		// agent.
		hc.SecurityOpt = append(hc.SecurityOpt, "apparmor=unconfined")
	}
}
