// Package wasm runs environment plugins: WebAssembly modules that speak ABI
// v1 (package sdk/abi), on wazero.
//
// A plugin is compiled once per process (and cached on disk across
// processes), checked for the ABI marker and for capabilities the run does
// not grant before any instance exists, then instantiated afresh for every
// rollout. An instance is used by one goroutine at a time; its host
// operations are function values bound to that rollout, so a plugin can
// reach only its own rollout's sandbox. A trap, a panic, a deadline or a
// size cap discards the instance and comes back as a *PluginError naming
// the plugin and the hook; the host and every other instance go on.
// Plugins get no WASI environment, arguments or network, and no files but
// the read-only ones they carry themselves (abi.FilesSection).
//
// Memory, at a thousand rollouts in flight: a module's code is checked and
// rewritten before it is compiled (module.go); an instance's linear memory
// is a reserved mapping whose untouched pages cost nothing (memory.go);
// and an instance that waits while its rollout's agent works can be
// parked, kept as the few bytes that differ from a fresh one, and
// re-created exactly at its next call (park.go).
package wasm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/experimental/sysfs"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/proctor-dev/proctor/internal/clip"
	"github.com/proctor-dev/proctor/sdk/abi"
)

// Config tunes a Runtime. Zero fields take the defaults.
type Config struct {
	CacheDir       string // compilation cache; default <user cache>/proctor/wasm or $PROCTOR_CACHE_DIR/wasm
	MemoryLimitMiB int    // per instance; default 256
	// HookTimeout bounds a hook call's own work (default 2m): the time its
	// code runs, not the time the host spends on its sandbox operations,
	// which the caller's context bounds. HookTimeoutName is how messages
	// name the limit (the config key that sets it; default "hook timeout").
	HookTimeout     time.Duration
	HookTimeoutName string
	MaxOutput       int // bytes of a hook's output or an operation's request; default 64 MiB
	// ResidentInstances is how many instances stay whole between their
	// calls; past it, an instance is parked as soon as its call returns.
	// Default 4 × GOMAXPROCS, at least 64.
	ResidentInstances int
	// StartingInstances is how many instances start at once (the rest
	// wait their turn). Default 4 × GOMAXPROCS.
	StartingInstances int
	// IdleInstances is how many instances stay whole while their
	// rollouts wait (Instance.Idle); past it, Idle parks. Parking saves
	// memory and costs CPU, for nothing where few rollouts are in
	// flight. Default 4 × GOMAXPROCS; negative: Idle always parks.
	IdleInstances int
	Log           *slog.Logger
}

// Runtime compiles and runs plugins. It is safe for concurrent use.
type Runtime struct {
	rt    wazero.Runtime
	cfg   Config
	whole atomic.Int64 // instances with a module: not parked, not closed
	peak  atomic.Int64 // the most instances whole at once
	// starting admits instantiations: starting one is CPU work, so more
	// at once only keeps more instances whole (a burst of rollouts
	// starting together) without starting any sooner.
	starting chan struct{}
}

// Sentinel errors; a *PluginError matches one of them with errors.Is.
var (
	ErrNotWasm    = errors.New("not a WebAssembly file")
	ErrABI        = errors.New("plugin ABI mismatch")
	ErrTrap       = errors.New("plugin trapped")
	ErrTimeout    = errors.New("plugin hook deadline exceeded")
	ErrTooLarge   = errors.New("plugin message over its size cap")
	ErrBadOutput  = errors.New("plugin returned invalid output")
	ErrDenied     = errors.New("capability not granted")
	ErrUnknown    = errors.New("plugin does not implement the hook")
	ErrHookFailed = errors.New("plugin hook failed")
)

// PluginError says which plugin and hook failed, and how.
type PluginError struct {
	Plugin string
	Hook   string
	Kind   error // one of the sentinels
	Class  string
	Err    error
}

func (e *PluginError) Error() string {
	s := fmt.Sprintf("plugin %s", e.Plugin)
	if e.Hook != "" {
		s += " hook " + e.Hook
	}
	if e.Err != nil {
		return s + ": " + e.Err.Error()
	}
	return s + ": " + e.Kind.Error()
}

// Unwrap matches both the kind and the cause.
func (e *PluginError) Unwrap() []error { return []error{e.Kind, e.Err} }

// NewRuntime makes a runtime with the on-disk compilation cache.
func NewRuntime(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.MemoryLimitMiB <= 0 {
		cfg.MemoryLimitMiB = 256
	}
	if cfg.MemoryLimitMiB > 4096 {
		// wazero panics past 65,536 pages: wasm32 addresses 4 GiB.
		return nil, fmt.Errorf("plugin memory limit %d MiB is over 4096 MiB, all a 32-bit WebAssembly module can address", cfg.MemoryLimitMiB)
	}
	if cfg.HookTimeout <= 0 {
		cfg.HookTimeout = 2 * time.Minute
	}
	if cfg.HookTimeoutName == "" {
		cfg.HookTimeoutName = "hook timeout"
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 64 << 20
	}
	if cfg.ResidentInstances <= 0 {
		cfg.ResidentInstances = max(64, 4*runtime.GOMAXPROCS(0))
	}
	if cfg.StartingInstances <= 0 {
		cfg.StartingInstances = 4 * runtime.GOMAXPROCS(0)
	}
	if cfg.IdleInstances == 0 {
		cfg.IdleInstances = 4 * runtime.GOMAXPROCS(0)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = DefaultCacheDir()
	}
	// No WithCloseOnContextDone, which passes through the host at every
	// turn of every loop: the host stops a hook with the flag prepare
	// adds (interruptible), and hooks run 3 to 9 times faster.
	rc := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(uint32(cfg.MemoryLimitMiB) * 16)
	if cfg.CacheDir != "" {
		if cache, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir); err == nil {
			rc = rc.WithCompilationCache(cache)
		} else {
			cfg.Log.Warn("wasm compilation cache unavailable", "dir", cfg.CacheDir, "err", err)
		}
	}
	r := &Runtime{rt: wazero.NewRuntimeWithConfig(ctx, rc), cfg: cfg, starting: make(chan struct{}, cfg.StartingInstances)}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, r.rt); err != nil {
		return nil, err
	}
	if err := r.hostModule(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// DefaultCacheDir is where compiled plugins are cached.
func DefaultCacheDir() string {
	if d := os.Getenv("PROCTOR_CACHE_DIR"); d != "" {
		return filepath.Join(d, "wasm")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "proctor", "wasm")
}

// Close releases every compiled plugin and instance.
func (r *Runtime) Close(ctx context.Context) error { return r.rt.Close(ctx) }

// Plugin is a compiled, checked plugin.
type Plugin struct {
	r        *Runtime
	name     string
	sha      string
	compiled wazero.CompiledModule
	files    *filesFS  // the plugin's own read-only files; nil when it has none
	image    *memImage // the memory every instance starts from; nil: a fresh one
	start    *image    // the memory before the start function; nil: the module writes its data
	info     moduleInfo
	base     *parkBase // nil: instances cannot be parked
	manifest abi.Manifest
	allowed  map[string]bool
	refused  error
	// hidden is set once the log was told that the plugin's output goes
	// to a level it does not show.
	hidden atomic.Bool
}

// LoadFile loads a plugin from a .wasm file.
func (r *Runtime) LoadFile(ctx context.Context, path string) (*Plugin, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load plugin %s: %w", path, err)
	}
	return r.Load(ctx, path, b)
}

// Load compiles wasm bytes (a file's or a bundled plugin's), checks the ABI
// and reads the manifest through describe.
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte) (*Plugin, error) {
	sum := sha256.Sum256(wasm)
	p := &Plugin{r: r, name: name, sha: hex.EncodeToString(sum[:])}
	perr := func(kind error, err error) error { return &PluginError{Plugin: name, Kind: kind, Err: err} }
	if !bytes.HasPrefix(wasm, []byte("\x00asm")) {
		return nil, perr(ErrNotWasm, fmt.Errorf("not a WebAssembly file (build plugins with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared)"))
	}
	code, sections, err := splitSections(wasm)
	if err != nil {
		return nil, perr(ErrNotWasm, err)
	}
	if files, ok := sections[abi.FilesSection]; ok {
		if p.files, err = newFilesFS(files); err != nil {
			return nil, perr(ErrNotWasm, err)
		}
	}
	if image, ok := sections[abi.MemorySection]; ok {
		if p.image, err = parseImage(image, uint32(r.cfg.MemoryLimitMiB)*16); err != nil {
			return nil, perr(ErrNotWasm, err)
		}
	}
	if code, p.info, err = prepare(code); err != nil {
		return nil, perr(ErrNotWasm, fmt.Errorf("malformed module: %w", err))
	}
	compiled, err := r.rt.CompileModule(ctx, code)
	if err != nil {
		return nil, perr(ErrNotWasm, fmt.Errorf("compile: %w", err))
	}
	if err := checkABI(compiled); err != nil {
		compiled.Close(ctx)
		return nil, perr(ErrABI, err)
	}
	p.compiled = compiled
	if st := p.info.start; st != nil {
		p.start = newImage(int(st.pages)*pageSize, st.data)
		p.info.start = nil // its bytes are in the image now
	}
	inst, err := p.instantiate(ctx, InstanceConfig{}, nil, false)
	if err != nil {
		p.Close(ctx)
		return nil, err
	}
	defer inst.Close(ctx)
	if p.info.unparkable == "" {
		if p.base, err = p.newParkBase(ctx, inst); err != nil {
			p.info.unparkable = err.Error()
		}
	}
	if p.info.unparkable != "" {
		r.cfg.Log.Debug("plugin instances stay whole while they wait", "plugin", name, "reason", p.info.unparkable)
	}
	if err := inst.Call(ctx, abi.HookDescribe, abi.Empty{}, &p.manifest); err != nil {
		p.Close(ctx)
		return nil, err
	}
	if p.manifest.ABI != abi.Version {
		p.Close(ctx)
		return nil, perr(ErrABI, fmt.Errorf("describe says ABI v%d; rebuild the plugin against sdk v%d", p.manifest.ABI, abi.Version))
	}
	for _, c := range p.manifest.Capabilities {
		if !knownOp(c) {
			p.Close(ctx)
			return nil, perr(ErrDenied, fmt.Errorf("declares capability %q, which this proctor (ABI v%d.%d) does not have%s", c, abi.Version, abi.Minor, newer(p.manifest)))
		}
	}
	for _, c := range p.manifest.OptionalCapabilities {
		if !knownOp(c) {
			// A newer minor's operation: the plugin can do without it,
			// and its calls are denied (hostCall).
			r.cfg.Log.Debug("plugin declares an optional capability this host does not have", "plugin", name, "capability", c)
		}
	}
	return p, nil
}

// newer is the hint for a plugin built for a newer minor version.
func newer(m abi.Manifest) string {
	if m.ABIMinor > abi.Minor {
		return fmt.Sprintf(": the plugin was built for v%d.%d, so upgrade proctor, or make it an optional capability of the plugin", abi.Version, m.ABIMinor)
	}
	return ""
}

func knownOp(op string) bool { return slices.Contains(abi.Ops(), op) }

// Features is what HostInfo.Features says this host has: every hook it
// calls and every operation it serves.
func Features() []string { return append(abi.Hooks(), abi.Ops()...) }

// cShared is the hint for a Go module built as a command instead of a
// reactor.
const cShared = "it was built without -buildmode=c-shared: rebuild it with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"

func checkABI(m wazero.CompiledModule) error {
	exports := m.ExportedFunctions()
	if _, ok := exports["_initialize"]; !ok {
		if _, cmd := exports["_start"]; cmd {
			// A Go command: its exports trap with runtime.notInitialized,
			// since only _start would set the runtime up.
			return fmt.Errorf("the module is a WASI command (it exports _start, not _initialize): %s", cShared)
		}
	}
	if _, ok := exports[abi.MarkerExport]; !ok {
		for name := range exports {
			if v, ok := strings.CutPrefix(name, "proctor_abi_v"); ok {
				return fmt.Errorf("plugin was built for ABI v%s; this proctor speaks v%d: rebuild it against sdk v%d", v, abi.Version, abi.Version)
			}
		}
		return fmt.Errorf("no %s export: not a proctor plugin, or built without the proctor SDK", abi.MarkerExport)
	}
	if _, ok := exports[abi.HandleExport]; !ok {
		return fmt.Errorf("missing export %s", abi.HandleExport)
	}
	for _, f := range m.ImportedFunctions() {
		mod, name, _ := f.Import()
		if strings.HasPrefix(mod, "proctor_v") && mod != abi.ImportModule {
			return fmt.Errorf("plugin imports %s.%s: built for another ABI; rebuild it against sdk v%d", mod, name, abi.Version)
		}
	}
	return nil
}

// Name is how the plugin was named when loaded (a path or a bundled name).
func (p *Plugin) Name() string { return p.name }

// SHA256 is the hex sha256 of the plugin's bytes.
func (p *Plugin) SHA256() string { return p.sha }

// Manifest is what describe returned.
func (p *Plugin) Manifest() abi.Manifest { return p.manifest }

// Grant checks the plugin's declared capabilities against what the run
// grants. Every declared capability must be granted; the error lists the
// missing ones and says where to grant them. Optional capabilities are
// allowed when granted and denied otherwise.
func (p *Plugin) Grant(grants []string) error {
	var missing []string
	p.allowed = map[string]bool{}
	for _, c := range p.manifest.Capabilities {
		if slices.Contains(grants, c) {
			p.allowed[c] = true
		} else {
			missing = append(missing, c)
		}
	}
	for _, c := range p.manifest.OptionalCapabilities {
		if slices.Contains(grants, c) {
			p.allowed[c] = true
		}
	}
	if len(missing) > 0 {
		p.allowed = nil
		p.refused = &PluginError{Plugin: p.name, Kind: ErrDenied, Err: fmt.Errorf("declares %s, which the run does not grant", strings.Join(missing, ", "))}
		return p.refused
	}
	p.refused = nil
	return nil
}

// Close releases the compiled module and the images its instances start
// from.
func (p *Plugin) Close(ctx context.Context) error {
	p.start.close()
	if p.base != nil {
		p.base.img.close()
	}
	return p.compiled.Close(ctx)
}

// Op is a host operation bound to one rollout: it gets the JSON request and
// returns the JSON response. An *OpError chooses the status.
type Op func(ctx context.Context, req []byte) ([]byte, error)

// OpError fails an operation with a given status (abi.Status*).
type OpError struct {
	Status uint32
	Err    error
}

func (e *OpError) Error() string { return e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// InstanceConfig binds an instance to its rollout.
type InstanceConfig struct {
	Ops  map[string]Op // by abi.Op* name
	Seed uint64        // seeds the plugin's random source
	Log  *slog.Logger

	// clock, when not 0, gives the instance clocks of its own that start
	// there (see stepClock) instead of the host's.
	clock int64
}

// Instance is one plugin instance, for one rollout. Calls are serialised.
type Instance struct {
	p      *Plugin
	env    *instanceEnv
	mod    api.Module // nil while parked
	from   *image     // the image mod's memory maps; nil: a copy, or a memory of its own
	handle api.Function
	ops    map[string]Op
	log    *slog.Logger

	mu     sync.Mutex
	broken error
	parked *parkedState
}

// instanceEnv is the host side of one instance, the same objects for as
// long as the instance lives, also across a park.
type instanceEnv struct {
	rand      io.Reader
	out, errw *logWriter
	logLeft   atomic.Int64   // what the log import may still log (abi.MaxLog)
	files     *instanceFiles // nil: the plugin has no files
	clock     *stepClock     // nil: the host's clocks
}

// flush logs the lines of output a call left unfinished.
func (e *instanceEnv) flush() {
	e.out.flush()
	e.errw.flush()
}

// newInstanceEnv makes the host side of an instance seeded with seed.
func newInstanceEnv(p *Plugin, seed uint64, log *slog.Logger) *instanceEnv {
	var key [32]byte
	for i := range 4 {
		v := seed + uint64(i)*0x9e3779b97f4a7c15
		for j := range 8 {
			key[i*8+j] = byte(v >> (8 * j))
		}
	}
	env := &instanceEnv{
		rand: rand.NewChaCha8(key),
		out:  newLogWriter(p, log, "stdout", slog.LevelInfo),
		errw: newLogWriter(p, log, "stderr", slog.LevelInfo),
	}
	env.logLeft.Store(abi.MaxLog)
	if p.files != nil {
		env.files = newInstanceFiles(p.files)
	}
	return env
}

// filesOpen reports whether the plugin holds one of its files open.
func (e *instanceEnv) filesOpen() bool {
	return e.files != nil && e.files.open.Load() != 0
}

// newModule instantiates the plugin's module on env, its memory starting
// as img (nil: as the module writes it), running its start functions (the
// start section's, then _initialize) when start is set, within the hook
// timeout. mapped says whether the memory maps img, so that the kernel
// tells which of its pages the instance writes.
func (p *Plugin) newModule(ctx context.Context, env *instanceEnv, img *image, start bool) (mod api.Module, mapped bool, err error) {
	mc := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions().
		WithRandSource(env.rand).
		WithSysNanosleep().
		WithStdout(env.out).
		WithStderr(env.errw)
	if env.clock != nil {
		mc = mc.WithWalltime(env.clock.walltime, stepClockTick).WithNanotime(env.clock.nanotime, stepClockTick)
	} else {
		mc = mc.WithSysWalltime().WithSysNanotime()
	}
	if env.files != nil {
		mc = mc.WithFSConfig(wazero.NewFSConfig().(sysfs.FSConfig).WithSysFSMount(env.files, "/"))
	}
	var alloc experimental.MemoryAllocator = memoryAllocator
	if img != nil {
		alloc = img.allocator(&mapped)
	}
	mod, err = p.r.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, alloc), p.compiled, mc)
	if err != nil || !start {
		return mod, mapped, err
	}
	sctx, cancel := context.WithTimeout(ctx, p.r.cfg.HookTimeout)
	defer cancel()
	for _, name := range []string{startExport, "_initialize"} {
		f := mod.ExportedFunction(name)
		if f == nil {
			continue
		}
		err := interruptible(sctx, mod, func() error { _, err := f.Call(sctx); return err })
		env.flush()
		if err != nil {
			mod.Close(ctx)
			if sctx.Err() != nil {
				return nil, false, fmt.Errorf("%s: no answer within %s (%s): %w", name, p.r.cfg.HookTimeout, p.r.cfg.HookTimeoutName, sctx.Err())
			}
			return nil, false, fmt.Errorf("%s: %w", name, err)
		}
	}
	return mod, mapped, nil
}

// interruptible runs f, which runs the module's code, until it returns or
// ctx ends; then it raises the module's stop flag, which the code checks
// every few thousand turns of a loop (instrument), and f returns with a
// trap. The module is unusable after a trap; a flag raised as f returned
// on its own is lowered again.
func interruptible(ctx context.Context, mod api.Module, f func() error) error {
	s, err := newStopper(mod)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, s.raise)
	err = f()
	stop()
	s.end(err)
	return err
}

// stopper raises a module's stop flag, until the call it watches ends.
type stopper struct {
	flag api.MutableGlobal

	mu            sync.Mutex
	ended, raised bool
}

func newStopper(mod api.Module) (*stopper, error) {
	flag, ok := mod.ExportedGlobal(stopExport).(api.MutableGlobal)
	if !ok {
		return nil, fmt.Errorf("the module has no %s flag: it was not prepared by the host", stopExport)
	}
	return &stopper{flag: flag}, nil
}

// raise raises the flag, unless the call ended.
func (s *stopper) raise() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.flag.Set(1)
		s.raised = true
	}
}

// end says the call ended with err; a flag raised for a call that ended
// on its own is lowered.
func (s *stopper) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if s.raised && err == nil {
		s.flag.Set(0)
	}
}

// Instantiate makes a fresh instance for one rollout.
func (p *Plugin) Instantiate(ctx context.Context, cfg InstanceConfig) (*Instance, error) {
	if p.refused != nil {
		return nil, p.refused
	}
	if p.allowed == nil && len(p.manifest.Capabilities) > 0 {
		return nil, &PluginError{Plugin: p.name, Kind: ErrDenied, Err: errors.New("capabilities not checked: call Grant before Instantiate")}
	}
	select {
	case p.r.starting <- struct{}{}:
	case <-ctx.Done():
		return nil, &PluginError{Plugin: p.name, Hook: "_initialize", Kind: ErrTimeout, Err: ctx.Err()}
	}
	defer func() { <-p.r.starting }()
	inst, err := p.instantiate(ctx, cfg, p.allowed, false)
	if err == nil {
		inst.relieve(ctx)
	}
	return inst, err
}

// wholeAdd counts one more instance whole.
func (r *Runtime) wholeAdd() {
	n := r.whole.Add(1)
	for {
		p := r.peak.Load()
		if n <= p || r.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// relieve parks the instance when more are whole than the runtime keeps
// (a burst of rollouts starting): it waits for its next call parked.
func (i *Instance) relieve(ctx context.Context) {
	if i.p.r.whole.Load() > int64(i.p.r.cfg.ResidentInstances) {
		i.Park(ctx)
	}
}

// instantiate makes an instance; fresh leaves out the memory image.
func (p *Plugin) instantiate(ctx context.Context, cfg InstanceConfig, allowed map[string]bool, fresh bool) (*Instance, error) {
	log := cfg.Log
	if log == nil {
		log = p.r.cfg.Log
	}
	log = log.With("plugin", p.manifest.Name)
	ops := map[string]Op{}
	for name, op := range cfg.Ops {
		if allowed[name] {
			ops[name] = op
		}
	}
	env := newInstanceEnv(p, cfg.Seed, log)
	if cfg.clock != 0 {
		env.clock = &stepClock{now: cfg.clock}
	}
	mod, mapped, err := p.newModule(ctx, env, p.start, true)
	if err != nil {
		kind := ErrTrap
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			kind = ErrTimeout
		}
		return nil, &PluginError{Plugin: p.name, Hook: "_initialize", Kind: kind, Err: err}
	}
	if p.image != nil && !fresh {
		if err := p.image.apply(mod.Memory()); err != nil {
			mod.Close(ctx)
			return nil, &PluginError{Plugin: p.name, Hook: "_initialize", Kind: ErrTrap, Err: err}
		}
	}
	p.r.wholeAdd()
	inst := &Instance{p: p, env: env, mod: mod, handle: mod.ExportedFunction(abi.HandleExport), ops: ops, log: log}
	if mapped {
		inst.from = p.start
	}
	return inst, nil
}

// Close discards the instance.
func (i *Instance) Close(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.broken == nil {
		i.broken = errors.New("instance closed")
	}
	i.parked = nil
	return i.dropModule(ctx)
}

// dropModule closes the instance's module, if it has one. The caller
// holds i.mu.
func (i *Instance) dropModule(ctx context.Context) error {
	if i.mod == nil {
		return nil
	}
	err := i.mod.Close(context.WithoutCancel(ctx))
	i.mod, i.handle, i.from = nil, nil, nil
	i.p.r.whole.Add(-1)
	return err
}

// Call runs one hook with in encoded as JSON and decodes the result into
// out (unless out is nil). A hook that fails on its own terms (status
// error) leaves the instance usable; anything else discards it.
func (i *Instance) Call(ctx context.Context, hook string, in, out any) error {
	input, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s input: %w", hook, err)
	}
	res, err := i.CallRaw(ctx, hook, input)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(res, out); err != nil {
			i.mu.Lock()
			i.discard()
			i.mu.Unlock()
			return &PluginError{Plugin: i.p.name, Hook: hook, Kind: ErrBadOutput, Err: fmt.Errorf("hook output is not the expected JSON: %v", err)}
		}
	}
	return nil
}

// callState is what the host functions of one hook call work on.
type callState struct {
	inst    *Instance
	method  []byte
	input   []byte
	output  []byte
	outErr  error
	pending []byte
	maxOut  int
	clock   *hookClock // the hook's own time
}

type stateKey struct{}

// CallRaw runs one hook with raw JSON in and out.
func (i *Instance) CallRaw(ctx context.Context, hook string, input []byte) ([]byte, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	perr := func(kind, err error) error {
		return &PluginError{Plugin: i.p.name, Hook: hook, Kind: kind, Err: err}
	}
	if i.broken != nil {
		return nil, perr(ErrTrap, fmt.Errorf("instance unusable: %w", i.broken))
	}
	if i.parked != nil {
		if err := i.unpark(ctx); err != nil {
			i.broken = err
			return nil, perr(ErrTrap, fmt.Errorf("re-create the parked instance: %w", err))
		}
	}
	st := &callState{inst: i, method: []byte(hook), input: input, maxOut: maxAnswer(hook, i.p.r.cfg.MaxOutput)}
	hctx, cancel := context.WithCancelCause(context.WithValue(ctx, stateKey{}, st))
	defer cancel(nil)
	st.clock = startHookClock(i.p.r.cfg.HookTimeout, func() { cancel(errHookTime) })
	defer st.clock.stop()
	outOfTime := func() bool { return context.Cause(hctx) == errHookTime && ctx.Err() == nil }
	var res []uint64
	err := interruptible(hctx, i.mod, func() (err error) {
		res, err = i.handle.Call(hctx, uint64(len(st.method)), uint64(len(input)))
		return err
	})
	i.env.flush()
	if err != nil {
		i.broken = err
		i.dropModule(ctx)
		switch {
		case outOfTime():
			return nil, perr(ErrTimeout, i.p.r.outOfTime())
		case ctx.Err() != nil:
			return nil, perr(ErrTimeout, ctx.Err())
		case st.outErr != nil:
			return nil, perr(ErrTooLarge, st.outErr)
		}
		if strings.Contains(err.Error(), "runtime.notInitialized") {
			err = fmt.Errorf("%w (%s)", err, cShared)
		}
		return nil, perr(ErrTrap, err)
	}
	if st.outErr != nil {
		i.discard()
		return nil, perr(ErrTooLarge, st.outErr)
	}
	if i.p.r.whole.Load() > int64(i.p.r.cfg.ResidentInstances) {
		// See relieve; i.mu is held.
		defer i.park(ctx)
	}
	status := uint32(res[0])
	switch status {
	case abi.StatusOK:
		if !json.Valid(st.output) {
			i.discard()
			return nil, perr(ErrBadOutput, fmt.Errorf("hook output is not JSON (%d bytes)", len(st.output)))
		}
		return st.output, nil
	case abi.StatusUnknown:
		return nil, perr(ErrUnknown, errors.New("not implemented by the plugin"))
	default:
		var e abi.Error
		if json.Unmarshal(st.output, &e) != nil || e.Error == "" {
			e.Error = fmt.Sprintf("status %d: %.200q", status, st.output)
		}
		if outOfTime() {
			// An operation the plugin waited on was cut by its time.
			return nil, perr(ErrTimeout, fmt.Errorf("%w; the plugin said: %s", i.p.r.outOfTime(), e.Error))
		}
		pe := perr(ErrHookFailed, errors.New(clip.Text(e.Error, abi.MaxErrorText))).(*PluginError)
		pe.Class = e.Class
		return nil, pe
	}
}

// discard drops an instance that answered badly. The caller holds i.mu.
func (i *Instance) discard() {
	i.broken = errors.New("discarded after a bad answer")
	i.parked = nil
	i.dropModule(context.Background())
}

// hostModule defines the proctor_v1 imports once per runtime; each call
// finds its instance's state in the context.
// promptAnswer bounds a prompt.format answer: two prompts of
// abi.MaxPrompt, each byte escaped to at most six. A larger answer is
// refused before the host copies it out of the instance (a 50 MiB prompt,
// copied and decoded, took 160 MiB of the host's memory).
const promptAnswer = 2*6*abi.MaxPrompt + 64<<10

// maxAnswer is the most hook may answer, under max.
func maxAnswer(hook string, max int) int {
	if hook == abi.HookPrompt {
		return min(max, promptAnswer)
	}
	return max
}

func (r *Runtime) hostModule(ctx context.Context) error {
	i32 := api.ValueTypeI32
	b := r.rt.NewHostModuleBuilder(abi.ImportModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		st := ctx.Value(stateKey{}).(*callState)
		mem := m.Memory()
		if len(st.method) > 0 && !mem.Write(uint32(s[0]), st.method) || len(st.input) > 0 && !mem.Write(uint32(s[1]), st.input) {
			panic("read_input: pointer out of range")
		}
	}), []api.ValueType{i32, i32}, nil).Export(abi.ImportReadInput)

	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		st := ctx.Value(stateKey{}).(*callState)
		n := uint32(s[1])
		if int(n) > st.maxOut {
			st.outErr = fmt.Errorf("hook output of %d bytes is over the cap of %d", n, st.maxOut)
			if string(st.method) == abi.HookPrompt && st.maxOut == promptAnswer {
				st.outErr = fmt.Errorf("the answer is %d bytes, over the %d a prompt.format answer may be (two prompts of abi.MaxPrompt, escaped)", n, promptAnswer)
			}
			panic(st.outErr)
		}
		buf, ok := m.Memory().Read(uint32(s[0]), n)
		if !ok {
			panic("set_output: pointer out of range")
		}
		st.output = append([]byte(nil), buf...)
	}), []api.ValueType{i32, i32}, nil).Export(abi.ImportSetOutput)

	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		st := ctx.Value(stateKey{}).(*callState)
		status, resp := st.inst.hostCall(ctx, m, uint32(s[0]), uint32(s[1]), uint32(s[2]), uint32(s[3]))
		st.pending = nil
		if len(resp) <= int(uint32(s[5])) {
			if len(resp) > 0 && !m.Memory().Write(uint32(s[4]), resp) {
				panic("call: response pointer out of range")
			}
		} else {
			st.pending = resp
		}
		s[0] = uint64(status)<<32 | uint64(uint32(len(resp)))
	}), []api.ValueType{i32, i32, i32, i32, i32, i32}, []api.ValueType{api.ValueTypeI64}).Export(abi.ImportCall)

	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		st := ctx.Value(stateKey{}).(*callState)
		if st.pending == nil {
			panic("take_response: no response kept")
		}
		if !m.Memory().Write(uint32(s[0]), st.pending) {
			panic("take_response: pointer out of range")
		}
		st.pending = nil
	}), []api.ValueType{i32}, nil).Export(abi.ImportTakeResponse)

	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, s []uint64) {
		st, _ := ctx.Value(stateKey{}).(*callState)
		n := min(uint32(s[2]), 8<<10)
		buf, ok := m.Memory().Read(uint32(s[1]), n)
		if !ok || st == nil {
			return
		}
		st.inst.env.logLine(ctx, st.inst.log, slog.Level(int32(s[0])), buf)
	}), []api.ValueType{i32, i32, i32}, nil).Export(abi.ImportLog)

	_, err := b.Instantiate(ctx)
	return err
}

// hostCall runs one host operation for the guest.
func (i *Instance) hostCall(ctx context.Context, m api.Module, opPtr, opLen, reqPtr, reqLen uint32) (uint32, []byte) {
	fail := func(status uint32, msg string) (uint32, []byte) {
		b, _ := json.Marshal(abi.Error{Error: msg})
		return status, b
	}
	if int(reqLen) > i.p.r.cfg.MaxOutput {
		return fail(abi.StatusTooLarge, fmt.Sprintf("request of %d bytes is over the cap", reqLen))
	}
	opb, ok1 := m.Memory().Read(opPtr, min(opLen, 256))
	req, ok2 := m.Memory().Read(reqPtr, reqLen)
	if !ok1 || !ok2 {
		return fail(abi.StatusBadRequest, "pointer out of range")
	}
	op := string(opb)
	f, ok := i.ops[op]
	if !ok {
		switch {
		case knownOp(op):
			return fail(abi.StatusDenied, fmt.Sprintf("%s was not declared by the plugin or not granted by the run", op))
		case slices.Contains(i.p.manifest.OptionalCapabilities, op):
			return fail(abi.StatusDenied, fmt.Sprintf("%s is an optional capability this proctor (ABI v%d.%d) does not have", op, abi.Version, abi.Minor))
		}
		return fail(abi.StatusUnknown, fmt.Sprintf("unknown operation %q", op))
	}
	if st, ok := ctx.Value(stateKey{}).(*callState); ok && st.clock != nil && waitsOnSandbox(op) {
		st.clock.pause()
		defer st.clock.resume()
	}
	resp, err := f(ctx, append([]byte(nil), req...))
	if err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			return fail(oe.Status, oe.Error())
		}
		if ctx.Err() != nil {
			return fail(abi.StatusDeadline, err.Error())
		}
		return fail(abi.StatusError, err.Error())
	}
	return abi.StatusOK, resp
}

// logLine logs a line of the plugin's log import, until the instance
// used its abi.MaxLog; then one line says the rest is dropped.
func (e *instanceEnv) logLine(ctx context.Context, log *slog.Logger, level slog.Level, line []byte) {
	left := e.logLeft.Add(-int64(len(line)))
	switch {
	case left >= 0:
		log.Log(ctx, level, string(line))
	case left+int64(len(line)) >= 0:
		log.Warn("plugin log over its budget: further lines of this instance are dropped", "budget", abi.MaxLog)
	}
}
