// Package doctor checks that this machine can run proctor: the Docker
// engine and base image, what an isolated sandbox refuses the agent, the
// network tasks get, disk space, the cache folder, the bundled plugins,
// and, for a run config, its Kubernetes cluster and Terminus-2's tmux. It
// returns the checks; proctor doctor prints them.
package doctor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/proctor-dev/proctor/agent/terminus/tmuxbin"
	"github.com/proctor-dev/proctor/host/assemble"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/plugin/bundled"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
)

// Check is one check's outcome.
type Check struct {
	Name string
	OK   bool
	// Warn marks a check that passed with something the user should know
	// (WARN, with its hint); it fails nothing.
	Warn bool
	Info string
	Hint string
}

// Options is what the checks look at.
type Options struct {
	Image  string         // the base image to look for
	Dir    string         // the folder whose free disk space is checked
	Config *config.Config // a run config whose backend is checked too; nil for none
}

// Run runs the checks, in the order they are printed.
func Run(ctx context.Context, o Options) []Check {
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var checks []Check

	info, err := docker.Ping(dctx)
	if err != nil {
		checks = append(checks, Check{Name: "docker engine", Info: err.Error(),
			Hint: "start one with `make engine` (scripts/engine.sh), or set DOCKER_HOST"})
	} else {
		checks = append(checks, Check{Name: "docker engine", OK: true,
			Info: fmt.Sprintf("server %s, API %s", info.ServerVersion, info.APIVersion)})
		checks = append(checks, imageChecks(dctx, o.Image)...)
	}
	if rc := o.Config; rc != nil {
		if rc.Sandbox.Backend == "kubernetes" {
			checks = append(checks, kubernetesChecks(ctx, rc, o.Image)...)
		}
		if rc.Agent.Kind == config.KindTerminus2 {
			checks = append(checks, tmuxCheck())
		}
	}
	checks = append(checks, diskCheck("disk space (run directory)", o.Dir, 2<<30))
	if info.RootDir != "" {
		checks = append(checks, diskCheck("disk space (docker)", info.RootDir, 10<<30))
	}
	checks = append(checks, cacheCheck())
	if names := bundled.Names(); len(names) == 0 {
		checks = append(checks, Check{Name: "bundled plugins", Info: "none in this binary", Hint: "build with `make build`"})
	} else {
		checks = append(checks, Check{Name: "bundled plugins", OK: true, Info: fmt.Sprint(names)})
	}
	return checks
}

// imageChecks looks for the base image and, when it is there, starts an
// isolated sandbox from it.
func imageChecks(ctx context.Context, image string) []Check {
	present, err := docker.ImagePresent(ctx, image)
	switch {
	case err != nil:
		return []Check{{Name: "base image", Info: err.Error()}}
	case !present:
		return []Check{{Name: "base image", Info: image + " not found",
			Hint: "build it from Debian packages with `make base-image`"}}
	}
	return append([]Check{{Name: "base image", OK: true, Info: image}}, isolationChecks(ctx, image)...)
}

// cacheCheck checks that proctor's cache folder, the one runs use
// (assemble.CacheDir), is writable.
func cacheCheck() Check {
	cache := assemble.CacheDir()
	if err := writable(cache); err != nil {
		return Check{Name: "cache directory", Info: err.Error(), Hint: "set PROCTOR_CACHE_DIR to a writable folder"}
	}
	return Check{Name: "cache directory", OK: true, Info: cache}
}

// isolationChecks starts one isolated sandbox from image and tries, as the
// agent, what the isolation must refuse; and says how the engine holds
// sandboxes to their disk limit.
func isolationChecks(ctx context.Context, image string) []Check {
	b, err := docker.New()
	if err != nil {
		return []Check{{Name: "sandbox isolation", Info: err.Error()}}
	}
	defer b.Close()
	var out []Check
	iso := Check{Name: "sandbox isolation", Hint: "the engine must allow CAP_SYS_ADMIN in a container's bounding set (the warden uses it and drops it before the agent runs); set [sandbox] isolation = false only for trusted agents"}
	sb, err := b.Start(ctx, sandbox.Spec{Image: image, Private: []string{"/tests"}, Labels: map[string]string{sandbox.LabelRun: "proctor-doctor"}})
	if err != nil {
		iso.Info = err.Error()
	} else {
		net := Check{Name: "sandbox network"}
		r, err := sb.(sandbox.Isolated).Agent().Exec(ctx, docker.ListInterfaces, sandbox.ExecOptions{Timeout: 10 * time.Second})
		switch ifs := strings.TrimSpace(r.Stdout); {
		case err != nil:
			net.Info = err.Error()
		case ifs != "lo":
			net.Info = fmt.Sprintf("a sandbox on network none has the interfaces %s", ifs)
		default:
			net.OK = true
			net.Info = "none: interfaces lo; " + b.OfflineNetwork()
		}
		out = append(out, net, internetCheck(ctx, b))
		r, err = sb.(sandbox.Isolated).Agent().Exec(ctx, "unshare --mount true 2>/dev/null && echo ESCAPED; ls /tests", sandbox.ExecOptions{Timeout: 10 * time.Second})
		_, serr := sb.(sandbox.Isolated).Seal(ctx)
		switch {
		case err != nil:
			iso.Info = err.Error()
		case serr != nil:
			iso.Info = serr.Error()
		case strings.Contains(r.Stdout, "ESCAPED"):
			iso.Info = "the agent could make namespaces of its own"
		default:
			iso.OK = true
			iso.Info = "the agent runs in its own PID and mount namespaces without CAP_SYS_ADMIN; the verifier's folders are private"
		}
		sb.Close(context.WithoutCancel(ctx))
	}
	out = append(out, iso)
	mode, err := b.DiskLimit(ctx, image)
	if err != nil {
		out = append(out, Check{Name: "disk limit", Info: err.Error()})
	} else {
		out = append(out, Check{Name: "disk limit", OK: true, Info: mode})
	}
	return out
}

// internetCheck says what a task that asks for the internet (Harbor's
// default) gets under the default [sandbox] network = "auto": the
// engine's bridge, or, on an engine without one, nothing, and what to set.
func internetCheck(ctx context.Context, b *docker.Backend) Check {
	c := Check{Name: "internet for tasks", OK: true}
	why := b.NoDefaultNetwork(ctx)
	if why == "" {
		c.Info = `tasks that ask for the internet get the engine's bridge network ([sandbox] network = "auto")`
		return c
	}
	c.Warn = true
	c.Info = fmt.Sprintf(`%s: under [sandbox] network = "auto", tasks that ask for the internet (Harbor's default; most Terminal-Bench tasks) run without it, and their records say network_withheld`, why)
	c.Hint = `set [sandbox] network = "host" to give them the host's network (it reaches the host's loopback), or start the engine with a bridge network (dockerd without --bridge=none); tasks that must stay offline set network_mode = "no-network" or allow_internet = false`
	return c
}

func diskCheck(name, dir string, want uint64) Check {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Check{Name: name, Info: err.Error()}
	}
	free := st.Bavail * uint64(st.Bsize)
	c := Check{Name: name, OK: free >= want, Info: fmt.Sprintf("%.1f GiB free in %s", float64(free)/(1<<30), dir)}
	if !c.OK {
		c.Hint = fmt.Sprintf("free some space: proctor wants at least %.0f GiB there", float64(want)/(1<<30))
	}
	return c
}

func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// kubernetesChecks are doctor's checks of the cluster a config names.
func kubernetesChecks(ctx context.Context, c *config.Config, image string) []Check {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	b, err := assemble.Kubernetes(ctx, c)
	if err != nil {
		return []Check{{Name: "kubernetes API", Info: err.Error(), Hint: assemble.KubernetesHint}}
	}
	info, _ := b.Ping(ctx)
	checks := []Check{{Name: "kubernetes API", OK: true, Info: fmt.Sprintf("%s at %s, namespace %s", info.Version, info.Server, info.Namespace)}}

	missing, err := b.Access(ctx)
	switch {
	case err != nil:
		checks = append(checks, Check{Name: "kubernetes permissions", Info: err.Error()})
	default:
		var need, nice []string
		for _, p := range missing {
			if p.Optional {
				nice = append(nice, p.String())
			} else {
				need = append(need, p.String())
			}
		}
		ch := Check{Name: "kubernetes permissions", OK: len(need) == 0, Info: "all granted"}
		if len(need) > 0 {
			ch.Info = "missing: " + strings.Join(need, ", ")
			ch.Hint = "bind the Role in docs/kubernetes.md to proctor's user in namespace " + info.Namespace
		} else if len(nice) > 0 {
			ch.Info = "granted; without " + strings.Join(nice, ", ") + " proctor cannot create the deny-all NetworkPolicy itself (apply it from docs/kubernetes.md)"
		}
		checks = append(checks, ch)
	}

	iso, err := b.CheckNetwork(ctx, image)
	switch {
	case err != nil:
		checks = append(checks, Check{Name: "kubernetes network none", Info: err.Error(),
			Hint: "the check starts a pod from " + image + "; make it pullable by the cluster, or name another with --image"})
	case iso.Isolated:
		checks = append(checks, Check{Name: "kubernetes network none", OK: true,
			Info: fmt.Sprintf("isolated (interfaces: %s; %s)", iso.Interfaces, iso.Detail)})
	default:
		checks = append(checks, Check{Name: "kubernetes network none",
			Info: fmt.Sprintf("NOT isolated: a network-none pod %s (interfaces: %s)", iso.Detail, iso.Interfaces),
			Hint: "this cluster does not enforce NetworkPolicies: use a CNI that does (Calico, Cilium, GKE Dataplane V2), or run tasks only with trusted network access"})
	}
	return checks
}

// tmuxCheck is the word on the static tmux, for a Terminus-2 config.
func tmuxCheck() Check {
	dir, err := tmuxbin.Find()
	if err != nil {
		return Check{Name: "static tmux (terminus-2)", Info: "not built: tasks whose image has no tmux fail", Hint: "build it once with `make tmux`"}
	}
	return Check{Name: "static tmux (terminus-2)", OK: true, Info: dir}
}
