package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/host/plugin/bundled"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
)

type doctorCmd struct {
	Image  string `help:"Base image to look for." default:"proctor-base:bookworm" env:"PROCTOR_BASE_IMAGE"`
	Dir    string `help:"Folder whose free disk space is checked (run directories go here)." default:"."`
	Config string `help:"A run config whose sandbox backend is checked too (kubernetes: the cluster, permissions, network isolation)." type:"existingfile"`
}

type check struct {
	name string
	ok   bool
	// warn marks a check that passed with something the user should know
	// (WARN, with its hint); it fails nothing.
	warn bool
	info string
	hint string
}

func (c doctorCmd) Run(g *globals) error {
	ctx, cancel := context.WithTimeout(g.ctx, 20*time.Second)
	defer cancel()
	var checks []check

	info, err := docker.Ping(ctx)
	if err != nil {
		checks = append(checks, check{name: "docker engine", info: err.Error(),
			hint: "start one with `make engine` (scripts/engine.sh), or set DOCKER_HOST"})
	} else {
		checks = append(checks, check{name: "docker engine", ok: true,
			info: fmt.Sprintf("server %s, API %s", info.ServerVersion, info.APIVersion)})
		present, err := docker.ImagePresent(ctx, c.Image)
		switch {
		case err != nil:
			checks = append(checks, check{name: "base image", info: err.Error()})
		case !present:
			checks = append(checks, check{name: "base image", info: c.Image + " not found",
				hint: "build it from Debian packages with `make base-image`"})
		default:
			checks = append(checks, check{name: "base image", ok: true, info: c.Image})
			checks = append(checks, isolationChecks(ctx, c.Image)...)
		}
	}

	if c.Config != "" {
		rc, err := loadConfig(c.Config, nil)
		if err != nil {
			return err
		}
		if rc.Sandbox.Backend == "kubernetes" {
			checks = append(checks, kubernetesChecks(g.ctx, rc, c.Image)...)
		}
	}

	checks = append(checks, diskCheck("disk space (run directory)", c.Dir, 2<<30))
	if info.RootDir != "" {
		checks = append(checks, diskCheck("disk space (docker)", info.RootDir, 10<<30))
	}

	cache, err := os.UserCacheDir()
	if v := os.Getenv("PROCTOR_CACHE_DIR"); v != "" {
		cache, err = v, nil
	}
	if err == nil {
		err = writable(filepath.Join(cache, "proctor"))
	}
	if err != nil {
		checks = append(checks, check{name: "cache directory", info: err.Error(), hint: "set PROCTOR_CACHE_DIR to a writable folder"})
	} else {
		checks = append(checks, check{name: "cache directory", ok: true, info: cache})
	}

	if names := bundled.Names(); len(names) == 0 {
		checks = append(checks, check{name: "bundled plugins", info: "none in this binary", hint: "build with `make build`"})
	} else {
		checks = append(checks, check{name: "bundled plugins", ok: true, info: fmt.Sprint(names)})
	}

	failed := 0
	for _, ch := range checks {
		mark := "ok  "
		switch {
		case !ch.ok:
			mark = "FAIL"
			failed++
		case ch.warn:
			mark = "WARN"
		}
		fmt.Fprintf(g.stdout, "%s %-28s %s\n", mark, ch.name, ch.info)
		if (!ch.ok || ch.warn) && ch.hint != "" {
			fmt.Fprintf(g.stdout, "     %-28s hint: %s\n", "", ch.hint)
		}
	}
	if failed > 0 {
		return &fault.Infra{Err: fmt.Errorf("%d of %d checks failed", failed, len(checks))}
	}
	return nil
}

// isolationChecks starts one isolated sandbox from image and tries, as the
// agent, what the isolation must refuse; and says how the engine holds
// sandboxes to their disk limit.
func isolationChecks(ctx context.Context, image string) []check {
	b, err := docker.New()
	if err != nil {
		return []check{{name: "sandbox isolation", info: err.Error()}}
	}
	defer b.Close()
	var out []check
	iso := check{name: "sandbox isolation", hint: "the engine must allow CAP_SYS_ADMIN in a container's bounding set (the warden uses it and drops it before the agent runs); set [sandbox] isolation = false only for trusted agents"}
	sb, err := b.Start(ctx, sandbox.Spec{Image: image, Private: []string{"/tests"}, Labels: map[string]string{sandbox.LabelRun: "proctor-doctor"}})
	if err != nil {
		iso.info = err.Error()
	} else {
		net := check{name: "sandbox network"}
		r, err := sb.(sandbox.Isolated).Agent().Exec(ctx, docker.ListInterfaces, sandbox.ExecOptions{Timeout: 10 * time.Second})
		switch ifs := strings.TrimSpace(r.Stdout); {
		case err != nil:
			net.info = err.Error()
		case ifs != "lo":
			net.info = fmt.Sprintf("a sandbox on network none has the interfaces %s", ifs)
		default:
			net.ok = true
			net.info = "none: interfaces lo; " + b.OfflineNetwork()
		}
		out = append(out, net, internetCheck(ctx, b))
		r, err = sb.(sandbox.Isolated).Agent().Exec(ctx, "unshare --mount true 2>/dev/null && echo ESCAPED; ls /tests", sandbox.ExecOptions{Timeout: 10 * time.Second})
		_, serr := sb.(sandbox.Isolated).Seal(ctx)
		switch {
		case err != nil:
			iso.info = err.Error()
		case serr != nil:
			iso.info = serr.Error()
		case strings.Contains(r.Stdout, "ESCAPED"):
			iso.info = "the agent could make namespaces of its own"
		default:
			iso.ok = true
			iso.info = "the agent runs in its own PID and mount namespaces without CAP_SYS_ADMIN; the verifier's folders are private"
		}
		sb.Close(context.WithoutCancel(ctx))
	}
	out = append(out, iso)
	mode, err := b.DiskLimit(ctx, image)
	if err != nil {
		out = append(out, check{name: "disk limit", info: err.Error()})
	} else {
		out = append(out, check{name: "disk limit", ok: true, info: mode})
	}
	return out
}

// internetCheck says what a task that asks for the internet (Harbor's
// default) gets under the default [sandbox] network = "auto": the
// engine's bridge, or, on an engine without one, nothing, and what to set.
func internetCheck(ctx context.Context, b *docker.Backend) check {
	c := check{name: "internet for tasks", ok: true}
	why := b.NoDefaultNetwork(ctx)
	if why == "" {
		c.info = `tasks that ask for the internet get the engine's bridge network ([sandbox] network = "auto")`
		return c
	}
	c.warn = true
	c.info = fmt.Sprintf(`%s: under [sandbox] network = "auto", tasks that ask for the internet (Harbor's default; most Terminal-Bench tasks) run without it, and their records say network_withheld`, why)
	c.hint = `set [sandbox] network = "host" to give them the host's network (it reaches the host's loopback), or start the engine with a bridge network (dockerd without --bridge=none); tasks that must stay offline set network_mode = "no-network" or allow_internet = false`
	return c
}

func diskCheck(name, dir string, want uint64) check {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return check{name: name, info: err.Error()}
	}
	free := st.Bavail * uint64(st.Bsize)
	c := check{name: name, ok: free >= want, info: fmt.Sprintf("%.1f GiB free in %s", float64(free)/(1<<30), dir)}
	if !c.ok {
		c.hint = fmt.Sprintf("free some space: proctor wants at least %.0f GiB there", float64(want)/(1<<30))
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

// dockerAvailable reports whether an engine answers (testscript condition).
func dockerAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := docker.Ping(ctx)
	return err == nil
}
