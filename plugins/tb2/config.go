package main

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// TaskConfig is task.toml as Harbor's TaskConfig model reads it: the keys,
// defaults, legacy spellings and validation of harbor-framework/harbor
// src/harbor/models/task/config.py at 738fdfba (schema 1.3, June 2026).
// Like Harbor's pydantic models it ignores keys it does not know; a value
// of the wrong type or out of its range makes the task unreadable, as it
// does in Harbor.
type TaskConfig struct {
	SchemaVersion string
	Task          *PackageInfo
	Metadata      map[string]any
	Verifier      VerifierConfig
	Agent         AgentConfig
	Environment   EnvironmentConfig
	Solution      SolutionConfig
	Source        string
	// MultiStepReward is multi_step_reward_strategy ("mean", "final" or
	// empty); Steps counts the [[steps]] tables.
	MultiStepReward string
	Steps           int
	// Artifacts counts the top-level artifacts entries.
	Artifacts int
}

// PackageInfo is the [task] table.
type PackageInfo struct {
	Name        string
	Description string
	Authors     []Author
	Keywords    []string
}

// Author is one entry of [task].authors.
type Author struct{ Name, Email string }

// Phase network policy: [agent] and [verifier] may override the
// environment's baseline while their phase runs.
type phaseNetwork struct {
	NetworkMode  string   // "", "public", "no-network" or "allowlist"
	AllowedHosts []string // nil when not set
}

// VerifierConfig is the [verifier] table.
type VerifierConfig struct {
	TimeoutSec float64
	Env        map[string]string
	User       string // "" is the image's user
	phaseNetwork
	EnvironmentMode string // "", "shared" or "separate"
	HasEnvironment  bool   // a [verifier.environment] table
	Collect         int    // [[verifier.collect]] tables
}

// AgentConfig is the [agent] table.
type AgentConfig struct {
	TimeoutSec *float64 // nil: Harbor enforces no agent timeout
	User       string
	phaseNetwork
}

// SolutionConfig is the [solution] table.
type SolutionConfig struct {
	Env map[string]string
}

// EnvironmentConfig is the [environment] table.
type EnvironmentConfig struct {
	BuildTimeoutSec float64
	DockerImage     string
	OS              string // "linux" or "windows"
	CPUs            *int64
	MemoryMB        *int64
	StorageMB       *int64
	GPUs            *int64
	GPUTypes        []string
	TPU             *TPUSpec
	MCPServers      int
	Env             map[string]string
	SkillsDir       string
	Healthcheck     *Healthcheck
	Workdir         string
	// NetworkMode is the baseline after the legacy allow_internet is
	// applied: "public", "no-network" or "allowlist".
	NetworkMode  string
	AllowedHosts []string
}

// TPUSpec is [environment.tpu].
type TPUSpec struct{ Type, Topology string }

// Healthcheck is [environment.healthcheck], Docker HEALTHCHECK's options.
type Healthcheck struct {
	Command          string
	IntervalSec      float64
	TimeoutSec       float64
	StartPeriodSec   float64
	StartIntervalSec float64
	Retries          int64
}

// Network modes of Harbor's NetworkMode enum.
const (
	networkPublic    = "public"
	networkNone      = "no-network"
	networkAllowlist = "allowlist"
)

// Harbor's defaults.
const (
	defaultVerifierTimeout = 600.0
	defaultBuildTimeout    = 600.0
)

// ParseTaskConfig reads task.toml. The error says what Harbor would
// refuse, naming the key.
func ParseTaskConfig(src string) (TaskConfig, error) {
	var doc map[string]any
	if _, err := toml.Decode(src, &doc); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return TaskConfig{}, fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return TaskConfig{}, err
	}
	r := &reader{}
	c := r.taskConfig(doc)
	if len(r.errs) > 0 {
		return c, errors.New(strings.Join(r.errs, "; "))
	}
	return c, nil
}

// reader converts decoded TOML values as pydantic's lax mode does, and
// collects every error with its key.
type reader struct{ errs []string }

func (r *reader) fail(key, format string, args ...any) {
	r.errs = append(r.errs, key+": "+fmt.Sprintf(format, args...))
}

// table returns v as a table; nil and a missing key are an empty table.
func (r *reader) table(v any, key string) map[string]any {
	switch t := v.(type) {
	case nil:
		return nil
	case map[string]any:
		return t
	}
	r.fail(key, "want a table, got %s", kind(v))
	return nil
}

func kind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case []any, []map[string]any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return "a date or time"
}

// str reads a string field (pydantic accepts no number for a str).
func (r *reader) str(v any, key string) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	}
	r.fail(key, "want a string, got %s", kind(v))
	return ""
}

// float reads a float field: a number, a boolean or a numeric string.
func (r *reader) float(v any, key string) (float64, bool) {
	switch t := v.(type) {
	case nil:
		return 0, false
	case float64:
		return t, true
	case int64:
		return float64(t), true
	case bool:
		if t {
			return 1, true
		}
		return 0, true
	case string:
		if f, ok := pyFloat(t); ok {
			return f, true
		}
	}
	r.fail(key, "want a number, got %s", kind(v))
	return 0, false
}

// integer reads an int field: an integer, a float without a fraction, a
// boolean or a string of an integer.
func (r *reader) integer(v any, key string) *int64 {
	var n int64
	switch t := v.(type) {
	case nil:
		return nil
	case int64:
		n = t
	case float64:
		if t != math.Trunc(t) || math.IsInf(t, 0) || math.Abs(t) > 1<<53 {
			r.fail(key, "want an integer, got %v", t)
			return nil
		}
		n = int64(t)
	case bool:
		if t {
			n = 1
		}
	case string:
		i, err := strconv.ParseInt(strings.TrimFunc(t, pyIsSpace), 10, 64)
		if err != nil {
			r.fail(key, "want an integer, got %q", t)
			return nil
		}
		n = i
	default:
		r.fail(key, "want an integer, got %s", kind(v))
		return nil
	}
	return &n
}

// boolean reads a bool field as pydantic does: true/false, 0/1, and the
// strings it knows.
func (r *reader) boolean(v any, key string) *bool {
	yes, no := true, false
	switch t := v.(type) {
	case nil:
		return nil
	case bool:
		return &t
	case int64:
		switch t {
		case 0:
			return &no
		case 1:
			return &yes
		}
	case float64:
		switch t {
		case 0:
			return &no
		case 1:
			return &yes
		}
	case string:
		switch strings.ToLower(t) {
		case "0", "off", "f", "false", "n", "no":
			return &no
		case "1", "on", "t", "true", "y", "yes":
			return &yes
		}
	}
	r.fail(key, "want a boolean, got %v", v)
	return nil
}

// user reads `str | int | None`: a user name or a uid.
func (r *reader) user(v any, key string) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	case int64:
		return strconv.FormatInt(t, 10)
	case float64:
		if t == math.Trunc(t) && math.Abs(t) < 1<<53 {
			return strconv.FormatInt(int64(t), 10)
		}
	}
	r.fail(key, "want a user name or uid, got %s", kind(v))
	return ""
}

// strMap reads dict[str, str].
func (r *reader) strMap(v any, key string) map[string]string {
	t := r.table(v, key)
	if len(t) == 0 {
		return nil
	}
	out := make(map[string]string, len(t))
	for k, val := range t {
		if s, ok := val.(string); ok {
			out[k] = s
		} else {
			r.fail(key+"."+k, "want a string, got %s", kind(val))
		}
	}
	return out
}

// list returns v as an array of any.
func (r *reader) list(v any, key string) ([]any, bool) {
	switch t := v.(type) {
	case nil:
		return nil, false
	case []any:
		return t, true
	case []map[string]any:
		out := make([]any, len(t))
		for i, m := range t {
			out[i] = m
		}
		return out, true
	}
	r.fail(key, "want an array, got %s", kind(v))
	return nil, false
}

// strList reads list[str]; set reports whether the key was there.
func (r *reader) strList(v any, key string) (out []string, set bool) {
	items, ok := r.list(v, key)
	if !ok {
		return nil, false
	}
	out = []string{}
	for i, it := range items {
		if s, ok := it.(string); ok {
			out = append(out, s)
		} else {
			r.fail(fmt.Sprintf("%s[%d]", key, i), "want a string, got %s", kind(it))
		}
	}
	return out, true
}

func (r *reader) oneOf(v any, key string, allowed ...string) string {
	s := r.str(v, key)
	if s != "" && !slices.Contains(allowed, s) {
		r.fail(key, "%q is not one of %s", s, strings.Join(allowed, ", "))
		return ""
	}
	return s
}

func (r *reader) taskConfig(doc map[string]any) TaskConfig {
	// handle_version_rename: "version" is the old name of schema_version.
	if v, ok := doc["version"]; ok {
		if _, has := doc["schema_version"]; !has {
			doc["schema_version"] = v
		}
	}
	c := TaskConfig{SchemaVersion: "1.3"}
	if v, ok := doc["schema_version"]; ok {
		c.SchemaVersion = r.str(v, "schema_version")
	}
	if t := r.table(doc["task"], "[task]"); doc["task"] != nil {
		c.Task = r.packageInfo(t)
	}
	c.Metadata = r.table(doc["metadata"], "[metadata]")
	c.Verifier = r.verifier(r.table(doc["verifier"], "[verifier]"), "[verifier]")
	c.Agent = r.agent(r.table(doc["agent"], "[agent]"))
	c.Environment = r.environment(r.table(doc["environment"], "[environment]"), "[environment]")
	c.Solution.Env = r.strMap(r.table(doc["solution"], "[solution]")["env"], "[solution].env")
	c.Source = r.str(doc["source"], "source")
	c.MultiStepReward = r.oneOf(doc["multi_step_reward_strategy"], "multi_step_reward_strategy", "mean", "final")
	if steps, ok := r.list(doc["steps"], "[[steps]]"); ok {
		c.Steps = len(steps)
		for i, s := range steps {
			st := r.table(s, fmt.Sprintf("[[steps]] %d", i+1))
			if r.str(st["name"], fmt.Sprintf("[[steps]] %d: name", i+1)) == "" {
				r.fail(fmt.Sprintf("[[steps]] %d", i+1), "name is required")
			}
		}
	}
	if arts, ok := r.list(doc["artifacts"], "artifacts"); ok {
		c.Artifacts = len(arts)
		for i, a := range arts {
			r.artifact(a, fmt.Sprintf("artifacts[%d]", i))
		}
	}
	return c
}

// orgName is Harbor's ORG_NAME_PATTERN (harbor/constants.py).
var orgName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$`)

func (r *reader) packageInfo(t map[string]any) *PackageInfo {
	p := &PackageInfo{Name: r.str(t["name"], "[task].name"), Description: r.str(t["description"], "[task].description")}
	switch {
	case t["name"] == nil:
		r.fail("[task].name", "required")
	case !orgName.MatchString(p.Name) || strings.Contains(p.Name, ".."):
		r.fail("[task].name", "%q is not in org/name format (letters, digits, '.', '_', '-'; no '..')", p.Name)
	}
	p.Keywords, _ = r.strList(t["keywords"], "[task].keywords")
	authors, _ := r.list(t["authors"], "[task].authors")
	for i, a := range authors {
		key := fmt.Sprintf("[task].authors[%d]", i)
		at := r.table(a, key)
		if at["name"] == nil {
			r.fail(key, "name is required")
		}
		p.Authors = append(p.Authors, Author{Name: r.str(at["name"], key+".name"), Email: r.str(at["email"], key+".email")})
	}
	return p
}

// network reads network_mode and allowed_hosts of a section; a missing
// network_mode is "".
func (r *reader) network(t map[string]any, sec string) phaseNetwork {
	n := phaseNetwork{NetworkMode: r.oneOf(t["network_mode"], sec+".network_mode", networkPublic, networkNone, networkAllowlist)}
	hosts, set := r.strList(t["allowed_hosts"], sec+".allowed_hosts")
	if set {
		n.AllowedHosts = hosts
		if n.NetworkMode != networkAllowlist {
			r.fail(sec+".allowed_hosts", "only valid when network_mode = \"allowlist\"")
		}
	}
	return n
}

func (r *reader) verifier(t map[string]any, sec string) VerifierConfig {
	v := VerifierConfig{TimeoutSec: defaultVerifierTimeout}
	if f, ok := r.float(t["timeout_sec"], sec+".timeout_sec"); ok {
		v.TimeoutSec = f
	}
	v.Env = r.strMap(t["env"], sec+".env")
	v.User = r.user(t["user"], sec+".user")
	v.phaseNetwork = r.network(t, sec)
	v.EnvironmentMode = r.oneOf(t["environment_mode"], sec+".environment_mode", "shared", "separate")
	if env := r.table(t["environment"], sec+".environment"); t["environment"] != nil {
		v.HasEnvironment = true
		r.environment(env, sec+".environment")
		if v.EnvironmentMode == "shared" {
			r.fail(sec+".environment_mode", "\"shared\" is incompatible with [verifier.environment]")
		}
	}
	if col, ok := r.list(t["collect"], sec+".collect"); ok {
		v.Collect = len(col)
		for i, c := range col {
			ct := r.table(c, fmt.Sprintf("[[verifier.collect]] %d", i+1))
			if ct["command"] == nil {
				r.fail(fmt.Sprintf("[[verifier.collect]] %d", i+1), "command is required")
			}
		}
	}
	return v
}

func (r *reader) agent(t map[string]any) AgentConfig {
	a := AgentConfig{User: r.user(t["user"], "[agent].user"), phaseNetwork: r.network(t, "[agent]")}
	if f, ok := r.float(t["timeout_sec"], "[agent].timeout_sec"); ok {
		a.TimeoutSec = &f
	}
	return a
}

func (r *reader) environment(t map[string]any, sec string) EnvironmentConfig {
	e := EnvironmentConfig{BuildTimeoutSec: defaultBuildTimeout, OS: "linux"}
	if f, ok := r.float(t["build_timeout_sec"], sec+".build_timeout_sec"); ok {
		e.BuildTimeoutSec = f
	}
	e.DockerImage = r.str(t["docker_image"], sec+".docker_image")
	if t["os"] != nil {
		if s, ok := t["os"].(string); ok {
			t["os"] = strings.ToLower(s) // normalize_os
		}
		e.OS = r.oneOf(t["os"], sec+".os", "linux", "windows")
	}
	e.CPUs = r.integer(t["cpus"], sec+".cpus")
	e.MemoryMB = r.integer(t["memory_mb"], sec+".memory_mb")
	e.StorageMB = r.integer(t["storage_mb"], sec+".storage_mb")
	// _migrate_legacy_resource_fields: memory and storage as "2G"; a
	// value that is not a string is dropped.
	for _, f := range []struct {
		legacy string
		field  **int64
	}{{"memory", &e.MemoryMB}, {"storage", &e.StorageMB}} {
		s, ok := t[f.legacy].(string)
		if !ok {
			continue
		}
		mb, err := parseSizeMB(s)
		if err != nil {
			r.fail(sec+"."+f.legacy, "%v", err)
			continue
		}
		if *f.field != nil && **f.field != mb {
			r.fail(sec+"."+f.legacy, "%q (%d MB) conflicts with %s_mb = %d", s, mb, f.legacy, **f.field)
			continue
		}
		*f.field = &mb
	}
	e.GPUs = r.integer(t["gpus"], sec+".gpus")
	if types, set := r.strList(t["gpu_types"], sec+".gpu_types"); set {
		e.GPUTypes = types
	}
	if tpu := r.table(t["tpu"], sec+".tpu"); t["tpu"] != nil {
		e.TPU = &TPUSpec{Type: r.str(tpu["type"], sec+".tpu.type"), Topology: r.str(tpu["topology"], sec+".tpu.topology")}
		if e.TPU.Type == "" {
			r.fail(sec+".tpu.type", "required")
		}
		if !tpuTopology.MatchString(strings.TrimSpace(e.TPU.Topology)) {
			r.fail(sec+".tpu.topology", "%q is not like 2x4 or 2x2x1", e.TPU.Topology)
		}
	}
	if mcp, ok := r.list(t["mcp_servers"], sec+".mcp_servers"); ok {
		e.MCPServers = len(mcp)
		for i, m := range mcp {
			mt := r.table(m, fmt.Sprintf("%s.mcp_servers[%d]", sec, i))
			if mt["name"] == nil {
				r.fail(fmt.Sprintf("%s.mcp_servers[%d]", sec, i), "name is required")
			}
		}
	}
	e.Env = r.strMap(t["env"], sec+".env")
	e.SkillsDir = r.str(t["skills_dir"], sec+".skills_dir")
	if hc := r.table(t["healthcheck"], sec+".healthcheck"); t["healthcheck"] != nil {
		e.Healthcheck = r.healthcheck(hc, sec+".healthcheck")
	}
	e.Workdir = r.str(t["workdir"], sec+".workdir")

	// The baseline network: network_mode (default public), or the legacy
	// allow_internet when network_mode and allowed_hosts are both absent
	// (TaskConfig.handle_deprecated_environment_allow_internet).
	n := r.network(t, sec)
	e.NetworkMode, e.AllowedHosts = n.NetworkMode, n.AllowedHosts
	allow := r.boolean(t["allow_internet"], sec+".allow_internet")
	switch {
	case t["network_mode"] != nil || n.AllowedHosts != nil:
		if e.NetworkMode == "" {
			e.NetworkMode = networkPublic
		}
	case allow != nil && !*allow:
		e.NetworkMode = networkNone
	default:
		e.NetworkMode = networkPublic
	}
	return e
}

var tpuTopology = regexp.MustCompile(`^[1-9]\d*(x[1-9]\d*)+$`)

func (r *reader) healthcheck(t map[string]any, sec string) *Healthcheck {
	h := &Healthcheck{IntervalSec: 5, TimeoutSec: 30, StartIntervalSec: 5, Retries: 3}
	if t["command"] == nil {
		r.fail(sec+".command", "required")
	}
	h.Command = r.str(t["command"], sec+".command")
	for _, f := range []struct {
		key string
		to  *float64
	}{{"interval_sec", &h.IntervalSec}, {"timeout_sec", &h.TimeoutSec}, {"start_period_sec", &h.StartPeriodSec}, {"start_interval_sec", &h.StartIntervalSec}} {
		if v, ok := r.float(t[f.key], sec+"."+f.key); ok {
			*f.to = v
		}
	}
	if n := r.integer(t["retries"], sec+".retries"); n != nil {
		h.Retries = *n
	}
	return h
}

func (r *reader) artifact(v any, key string) {
	switch t := v.(type) {
	case string:
		return
	case map[string]any:
		src := r.str(t["source"], key+".source")
		if t["source"] == nil {
			r.fail(key+".source", "required")
		}
		for _, p := range strings.Split(src, "/") {
			if p == ".." {
				r.fail(key+".source", "must not contain '..'")
			}
		}
		return
	}
	r.fail(key, "want a path or a table, got %s", kind(v))
}

// parseSizeMB is EnvironmentConfig._parse_size_to_mb: "2G", "512M",
// "1024K", nothing else.
func parseSizeMB(s string) (int64, error) {
	u := strings.ToUpper(strings.TrimFunc(s, pyIsSpace))
	mult := 0.0
	switch {
	case strings.HasSuffix(u, "G"):
		mult = 1024
	case strings.HasSuffix(u, "M"):
		mult = 1
	case strings.HasSuffix(u, "K"):
		mult = 1.0 / 1024
	default:
		return 0, fmt.Errorf("invalid size format %q: want one like \"1G\" or \"512M\"", s)
	}
	f, ok := pyFloat(u[:len(u)-1])
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size format %q: want one like \"1G\" or \"512M\"", s)
	}
	if u[len(u)-1] == 'K' {
		return int64(f / 1024), nil
	}
	return int64(f * mult), nil
}
