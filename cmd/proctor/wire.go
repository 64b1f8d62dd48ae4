package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/host"
	"github.com/proctor-dev/proctor/host/bundled"
	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/dataset"
	"github.com/proctor-dev/proctor/host/oci"
	"github.com/proctor-dev/proctor/host/repocache"
	"github.com/proctor-dev/proctor/host/results"
	"github.com/proctor-dev/proctor/host/wasm"
	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/local"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// loadConfig maps config mistakes to usage errors with their hint.
func loadConfig(path string, sets []string) (*config.Config, error) {
	c, err := config.Load(path, sets)
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return nil, &usageError{err: err, hint: ce.Hint}
		}
		return nil, &usageError{err: err}
	}
	return c, nil
}

func cacheDir() string {
	if d := os.Getenv("PROCTOR_CACHE_DIR"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "proctor-cache")
	}
	return filepath.Join(d, "proctor")
}

// loadedPlugin is a plugin with where it came from.
type loadedPlugin struct {
	*wasm.Plugin
	source string
	digest string // the OCI manifest digest, for oci:// plugins
}

// pluginFile is a plugin's bytes and where they came from, read without
// running anything.
type pluginFile struct {
	wasm   []byte
	sha256 string
	source string
	digest string      // the OCI manifest digest, for oci:// plugins
	pulled *oci.Pulled // for oci:// plugins
}

// readPlugin reads a bundled plugin by short name, an oci:// reference
// (pulled, verified) or a .wasm file by path, and hashes the bytes.
func readPlugin(ctx context.Context, ref, baseDir string) (*pluginFile, error) {
	f := &pluginFile{}
	switch {
	case strings.HasPrefix(ref, oci.Scheme):
		pulled, err := oci.New(filepath.Join(cacheDir(), "oci")).Pull(ctx, ref)
		switch {
		case errors.Is(err, oci.ErrUnreachable) && errors.Is(err, oci.ErrTampered):
			return nil, &infraError{err: fmt.Errorf("plugin %s: %w", ref, err), hint: "the cached copy was altered and is never run: bring the registry back to pull the plugin again"}
		case errors.Is(err, oci.ErrUnreachable):
			return nil, &infraError{err: fmt.Errorf("plugin %s: %w", ref, err), hint: "check that the registry is up and try again, or pin the plugin by digest (oci://registry/repo@sha256:...) to run from the cache"}
		case err != nil:
			return nil, &usageError{err: fmt.Errorf("plugin %s: %w", ref, err), hint: "check the reference; a plugin whose bytes do not match its digest is never run"}
		}
		if pulled.Refused != nil {
			slog.Warn("cached plugin failed verification; the registry's copy replaced it", "plugin", ref, "err", pulled.Refused)
		}
		r := oci.Strip(ref)
		if base, _, ok := strings.Cut(r, "@"); ok {
			r = base
		}
		f.wasm, f.pulled = pulled.Wasm, pulled // the verified bytes, not the cache file again
		f.source, f.digest = "oci:"+r+"@"+pulled.Digest, pulled.Digest
		if pulled.FromCache {
			f.source += " (cached)"
		}
	case bundled.IsName(ref):
		b, err := bundled.Lookup(ref)
		if err != nil {
			return nil, &usageError{err: fmt.Errorf("plugin %s: %w", ref, err)}
		}
		f.wasm, f.source = b, "bundled:"+ref
	default:
		path := ref
		if !filepath.IsAbs(path) && baseDir != "" {
			path = filepath.Join(baseDir, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, &usageError{err: fmt.Errorf("plugin %s: %w", ref, err), hint: "give a bundled name (" + strings.Join(bundled.Known, ", ") + ") or the path of a .wasm file"}
		}
		f.wasm, f.source = b, "file:"+path
	}
	if f.pulled != nil {
		f.sha256 = f.pulled.SHA256 // Pull hashed these very bytes to verify them
	} else {
		sum := sha256.Sum256(f.wasm)
		f.sha256 = hex.EncodeToString(sum[:])
	}
	return f, nil
}

// loadPlugin reads a plugin (see readPlugin) and loads it. A sha256 pin is
// compared with the bytes before anything of the plugin runs: other bytes
// are never compiled, initialised or asked to describe themselves.
func loadPlugin(ctx context.Context, rt *wasm.Runtime, ref, pin string, baseDir string) (*loadedPlugin, error) {
	f, err := readPlugin(ctx, ref, baseDir)
	if err != nil {
		return nil, err
	}
	if pin != "" && !strings.EqualFold(strings.TrimPrefix(pin, "sha256:"), f.sha256) {
		return nil, &usageError{err: fmt.Errorf("plugin %s has sha256 %s, but the config pins %s", ref, f.sha256, pin), hint: "refusing to run other bytes than pinned: update the pin only if you trust the new plugin"}
	}
	p, err := rt.Load(ctx, ref, f.wasm)
	if err != nil {
		return nil, &infraError{err: err}
	}
	return &loadedPlugin{Plugin: p, source: f.source, digest: f.digest}, nil
}

func newRuntime(ctx context.Context, c *config.Config) (*wasm.Runtime, error) {
	rt, err := wasm.NewRuntime(ctx, wasm.Config{
		CacheDir:       filepath.Join(cacheDir(), "wasm"),
		MemoryLimitMiB: c.Env.MemoryMB,
		HookTimeout:    c.Env.HookTimeout.Duration,
	})
	if err != nil {
		return nil, &infraError{err: fmt.Errorf("plugin runtime: %w", err)}
	}
	return rt, nil
}

// environment loads the config's plugin and wraps it for the runner.
func environment(ctx context.Context, c *config.Config) (*host.PluginEnv, *loadedPlugin, *wasm.Runtime, error) {
	rt, err := newRuntime(ctx, c)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := loadPlugin(ctx, rt, c.Env.Plugin, c.Env.SHA256, c.BaseDir)
	if err != nil {
		rt.Close(ctx)
		return nil, nil, nil, err
	}
	if err := p.Grant(c.Env.Grants); err != nil {
		rt.Close(ctx)
		return nil, nil, nil, &usageError{err: err, hint: "grant the capabilities in [env]: " + grantsWith(c.Env.Grants, p.Manifest().Capabilities) + ", or check that this is the plugin you meant"}
	}
	ds := &dataset.Reader{BaseDir: c.BaseDir, Hub: dataset.NewHub(filepath.Join(cacheDir(), "hf"))}
	env := &host.PluginEnv{
		Plugin:           p.Plugin,
		Config:           c.PluginConfig(),
		Dataset:          ds.Read,
		Repos:            repocache.New(filepath.Join(cacheDir(), "repos")),
		Info:             abi.HostInfo{ProctorVersion: version, Backend: c.Sandbox.Backend},
		AllowHostNetwork: c.Sandbox.Network == "host",
		Log:              slog.Default(),
	}
	return env, p, rt, nil
}

// backend makes the sandbox backend and checks that it answers.
func backend(ctx context.Context, c *config.Config) (sandbox.Backend, func(ctx context.Context, runID string) (int, error), error) {
	switch c.Sandbox.Backend {
	case "local":
		return local.Backend{}, nil, nil
	case "kubernetes":
		b, err := kubernetesBackend(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		return b, b.Prune, nil
	default:
		b, err := docker.New()
		if err == nil {
			pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			_, err = b.Ping(pctx)
			cancel()
		}
		if err != nil {
			return nil, nil, &infraError{err: err, hint: "start the engine with `make engine`, or set [sandbox] backend = \"local\" for trusted development tasks"}
		}
		return b, b.Prune, nil
	}
}

// agentFor builds the configured agent; an llm agent's requests go
// through lim, the run's limiter.
func agentFor(c *config.Config, lim *openai.Limiter) (host.Agent, error) {
	switch c.Agent.Kind {
	case "oracle":
		return agentFunc(func(ctx context.Context, in host.AgentInput) (host.AgentOutput, error) {
			tr, err := agent.Oracle(ctx, in.Oracle)
			if errors.Is(err, host.ErrNoOracle) {
				err = host.WithClass(results.ClassPlugin, fmt.Errorf("the environment has no oracle for task %s", in.Task.ID))
			}
			return host.AgentOutput{Transcript: transcript(in, tr), StopReason: tr.StopReason}, err
		}), nil
	case "nop":
		return agentFunc(func(ctx context.Context, in host.AgentInput) (host.AgentOutput, error) {
			tr := agent.Nop()
			return host.AgentOutput{Transcript: transcript(in, tr), StopReason: tr.StopReason}, nil
		}), nil
	case "replay":
		script, err := agent.LoadScript(c.Resolve(c.Agent.Script))
		if err != nil {
			return nil, &usageError{err: err, hint: "agent.script is relative to the config file's folder"}
		}
		tools, err := agent.NewToolset(c.Agent.Tools)
		if err != nil {
			return nil, &usageError{err: err}
		}
		return loopAgent(func(host.AgentInput) agent.Model { return &agent.Replay{Script: script} }, tools, c, "replay"), nil
	case "llm":
		tools, err := agent.NewToolset(c.Agent.Tools)
		if err != nil {
			return nil, &usageError{err: err}
		}
		newModel, err := models(c, lim)
		if err != nil {
			return nil, err
		}
		return loopAgent(newModel, tools, c, "llm"), nil
	}
	return nil, &usageError{err: fmt.Errorf("unknown agent kind %q", c.Agent.Kind)}
}

type agentFunc func(ctx context.Context, in host.AgentInput) (host.AgentOutput, error)

func (f agentFunc) Run(ctx context.Context, in host.AgentInput) (host.AgentOutput, error) {
	return f(ctx, in)
}

func loopAgent(model func(in host.AgentInput) agent.Model, tools *agent.Toolset, c *config.Config, kind string) host.Agent {
	return agentFunc(func(ctx context.Context, in host.AgentInput) (host.AgentOutput, error) {
		system := c.Agent.SystemPrompt
		if system == "" {
			system = in.System
		}
		l := &agent.Loop{Model: model(in), Tools: tools, MaxTurns: c.Agent.MaxTurns, System: system, Name: c.Model.Name}
		tr, err := l.Run(ctx, in.Sandbox, in.Prompt)
		tr.Agent = kind
		u := tr.Usage
		out := host.AgentOutput{Transcript: transcript(in, tr), Turns: len(tr.Turns), StopReason: tr.StopReason,
			Usage: results.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens}}
		if err != nil {
			err = host.WithClass(results.ClassModel, err)
		}
		return out, err
	})
}

// transcript is what transcripts/<id>.json holds.
func transcript(in host.AgentInput, tr agent.Trajectory) agent.Transcript {
	return agent.Transcript{RolloutID: in.RolloutID, TaskID: in.Task.ID, Seed: in.Seed, Prompt: in.Prompt, System: in.System, Trajectory: &tr}
}

func newRunID(name string) string {
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%s-%s", name, time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(b[:]))
}
