package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Task is one Terminal-Bench task, from a Harbor task folder or a dataset
// row, normalised. The tars are tars (maybe gzipped) of the environment,
// tests and solution folders, with file modes and symlinks as they were.
type Task struct {
	Name           string   `json:"name"`
	Category       string   `json:"category,omitempty"`
	Difficulty     string   `json:"difficulty,omitempty"`
	Tags           []string `json:"tags,omitempty"`
	Instruction    string   `json:"instruction"`
	DockerImage    string   `json:"docker_image,omitempty"`
	EnvironmentTar []byte   `json:"environment_tar,omitempty"`
	// HasDockerfile: environment/ holds a Dockerfile (a prebuilt image's
	// environment/ without one is copied into the workdir instead).
	HasDockerfile bool   `json:"has_dockerfile,omitempty"`
	TestsTar      []byte `json:"tests_tar,omitempty"`
	SolutionTar   []byte `json:"solution_tar,omitempty"`
	// AgentTimeoutSec 0 is the run's agent timeout (Harbor: none).
	AgentTimeoutSec    float64 `json:"agent_timeout_sec,omitempty"`
	VerifierTimeoutSec float64 `json:"verifier_timeout_sec,omitempty"`
	BuildTimeoutSec    float64 `json:"build_timeout_sec,omitempty"`
	CPUs               float64 `json:"cpus,omitempty"`
	MemoryMB           int64   `json:"memory_mb,omitempty"`
	StorageMB          int64   `json:"storage_mb,omitempty"`
	// Internet: the task asks for the network (Harbor's default).
	Internet     bool              `json:"internet,omitempty"`
	Env          map[string]string `json:"env,omitempty"`           // [environment].env: every command
	VerifierEnv  map[string]string `json:"verifier_env,omitempty"`  // [verifier].env: test.sh
	SolutionEnv  map[string]string `json:"solution_env,omitempty"`  // [solution].env: solve.sh
	AgentUser    string            `json:"agent_user,omitempty"`    // [agent].user: the agent, solve.sh
	VerifierUser string            `json:"verifier_user,omitempty"` // [verifier].user: test.sh
	Workdir      string            `json:"workdir,omitempty"`
	Healthcheck  *Healthcheck      `json:"healthcheck,omitempty"`
	MissingSolve bool              `json:"missing_solve,omitempty"` // no solution/solve.sh
	// Broken says why the task cannot be read; its rollouts fail with it.
	Broken string `json:"broken,omitempty"`
	// VerifierTimeoutFrom says where VerifierTimeoutSec comes from, for
	// the message when test.sh runs past it.
	VerifierTimeoutFrom string `json:"verifier_timeout_from,omitempty"`
	// FromRow: the task is a terminal-bench-2 dataset row, without a
	// task.toml.
	FromRow bool `json:"from_row,omitempty"`
	// Refused says which Harbor feature the task needs that proctor does
	// not have; the task is listed as skipped with it.
	Refused string `json:"-"`
	// Ignored lists task.toml keys read without effect on a rollout.
	Ignored []string `json:"-"`
}

// Harbor's canary lines: an HTML comment or a # comment that says
// "canary" (harbor-framework/harbor src/harbor/models/task/task.py).
var canaryLine = regexp.MustCompile(`(?i)^(<!--.*canary.*-->|#.*canary.*)$`)

// StripCanary is Harbor's strip_canary: the canary lines at the very start
// of an instruction go, with the blank lines after them; the rest stays as
// it is, canary lines further down included.
func StripCanary(s string) string {
	lines := strings.Split(s, "\n")
	i := 0
	for i < len(lines) && canaryLine.MatchString(pyStrip(lines[i])) {
		i++
	}
	for i < len(lines) && pyStrip(lines[i]) == "" {
		i++
	}
	return strings.Join(lines[i:], "\n")
}

// Limits on one task's archives, checked before anything is read into
// memory: a dataset row is untrusted, and one bad row (a gzip bomb, a 1 GiB
// sparse file that compresses to a megabyte) must cost that row only.
var (
	maxTaskBytes   int64 = 64 << 20 // the files of one archive, decompressed
	maxTaskEntries       = 20000    // entries in one archive
)

// entry is one archive member: its header (mode, type, link) and, for a
// regular file, its bytes.
type entry struct {
	hdr  tar.Header
	data []byte
}

// files reads a gzip (or plain) tar into its entries by cleaned path,
// within the limits above.
func files(tgz []byte) (map[string]entry, error) {
	var r io.Reader = bytes.NewReader(tgz)
	if len(tgz) > 2 && tgz[0] == 0x1f && tgz[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	out := map[string]entry{}
	var total int64
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if n >= maxTaskEntries {
			return nil, fmt.Errorf("archive has over %d entries", maxTaskEntries)
		}
		if err := CheckEntry(h); err != nil {
			return nil, err
		}
		name := path.Clean(strings.TrimPrefix(strings.ReplaceAll(h.Name, `\`, "/"), "./"))
		if name == "." || h.Typeflag == tar.TypeXHeader || h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		e := entry{hdr: *h}
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
			if h.Size < 0 || total+h.Size > maxTaskBytes {
				return nil, fmt.Errorf("archive holds over %d MiB once decompressed (entry %q is %d bytes)", maxTaskBytes>>20, h.Name, h.Size)
			}
			b, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return nil, err
			}
			total += int64(len(b))
			e.data = b
		}
		out[name] = e
	}
}

// regular returns the bytes of a regular file of the archive.
func regular(fs map[string]entry, name string) ([]byte, bool) {
	e, ok := fs[name]
	if !ok || (e.hdr.Typeflag != tar.TypeReg && e.hdr.Typeflag != tar.TypeRegA) {
		return nil, false
	}
	return e.data, true
}

// CheckEntry refuses archive entries that would escape their folder:
// absolute paths, "..", links pointing outside, devices.
func CheckEntry(h *tar.Header) error {
	name := strings.ReplaceAll(h.Name, `\`, "/")
	bad := func(why string) error { return fmt.Errorf("unsafe archive entry %q: %s", h.Name, why) }
	if path.IsAbs(name) {
		return bad("absolute path")
	}
	for _, p := range strings.Split(name, "/") {
		if p == ".." {
			return bad(`".." in path`)
		}
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeDir, tar.TypeXHeader, tar.TypeXGlobalHeader:
	case tar.TypeSymlink:
		if path.IsAbs(h.Linkname) || escapes(path.Dir(name)+"/"+h.Linkname) {
			return bad("symlink escapes the archive")
		}
	case tar.TypeLink:
		if path.IsAbs(h.Linkname) || escapes(h.Linkname) {
			return bad("hard link escapes the archive")
		}
	default:
		return bad("file type not allowed")
	}
	return nil
}

func escapes(p string) bool {
	depth := 0
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}

// subTar packs the entries under prefix/ as a tar of their own, named
// relative to it, with their modes, folders and links as they were (owner
// and times dropped, so the same files make the same archive). A link that
// leaves prefix/ is an error naming it. nil when nothing is under prefix/.
func subTar(fs map[string]entry, prefix string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	n := 0
	for _, name := range slices.Sorted(maps.Keys(fs)) {
		rel, ok := strings.CutPrefix(name, prefix+"/")
		if !ok {
			continue
		}
		e := fs[name]
		h := tar.Header{Name: rel, Mode: e.hdr.Mode & 0o7777, Typeflag: e.hdr.Typeflag, Format: tar.FormatPAX}
		switch e.hdr.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.hdr.Linkname
			if escapes(path.Dir(rel) + "/" + h.Linkname) {
				return nil, fmt.Errorf("%s: symlink to %q leaves %s/", name, h.Linkname, prefix)
			}
		case tar.TypeLink:
			target := path.Clean(strings.TrimPrefix(e.hdr.Linkname, "./"))
			lrel, ok := strings.CutPrefix(target, prefix+"/")
			if !ok {
				return nil, fmt.Errorf("%s: hard link to %q leaves %s/", name, e.hdr.Linkname, prefix)
			}
			h.Linkname = lrel
		default:
			continue
		}
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		tw.Write(e.data)
		n++
	}
	tw.Close()
	if n == 0 {
		return nil, nil
	}
	return buf.Bytes(), nil
}

// FromFolder reads a Harbor task folder (as archive entries relative to
// it), as harbor-framework/harbor's Task does: task.toml, instruction.md
// and tests/test.sh must be there, and environment/ must define the
// sandbox (a Dockerfile, or [environment].docker_image).
func FromFolder(name string, fs map[string]entry) (Task, error) {
	t := Task{Name: name, VerifierTimeoutSec: defaultVerifierTimeout, BuildTimeoutSec: defaultBuildTimeout, Internet: true}
	src, err := text(fs, "task.toml")
	if err != nil {
		return t, err
	}
	c, err := ParseTaskConfig(src)
	if err != nil {
		return t, fmt.Errorf("task.toml: %w", err)
	}
	t.apply(c)
	if c.Steps > 0 {
		// Harbor reads a multi-step task's instructions from steps/;
		// proctor refuses it (see refusals), so there is nothing more to
		// read.
		return t, nil
	}
	ins, err := text(fs, "instruction.md")
	if err != nil {
		return t, err
	}
	t.Instruction = StripCanary(ins)
	if t.EnvironmentTar, err = subTar(fs, "environment"); err != nil {
		return t, err
	}
	if t.TestsTar, err = subTar(fs, "tests"); err != nil {
		return t, err
	}
	if t.SolutionTar, err = subTar(fs, "solution"); err != nil {
		return t, err
	}
	_, t.HasDockerfile = regular(fs, "environment/Dockerfile")
	_, solve := fs["solution/solve.sh"]
	t.MissingSolve = !solve
	if _, ok := fs["tests/test.sh"]; !ok && c.Environment.OS == "linux" {
		return t, errors.New("no tests/test.sh")
	}
	if _, ok := fs["environment/docker-compose.yaml"]; ok && t.Refused == "" {
		t.Refused = "environment/docker-compose.yaml: tasks with Docker Compose services are not supported"
	}
	if t.DockerImage == "" && !t.HasDockerfile && t.Refused == "" {
		return t, errors.New("no environment definition: set [environment].docker_image or add environment/Dockerfile")
	}
	return t, nil
}

// text reads a file of the folder as Python's read_text does.
func text(fs map[string]entry, name string) (string, error) {
	b, ok := regular(fs, name)
	if !ok {
		return "", errors.New("no " + name)
	}
	s, ok := pyText(b)
	if !ok {
		return "", errors.New(name + " is not UTF-8")
	}
	return s, nil
}

// apply takes what a rollout needs from task.toml, and notes what proctor
// refuses or ignores.
func (t *Task) apply(c TaskConfig) {
	if s, ok := c.Metadata["category"].(string); ok {
		t.Category = s
	}
	if s, ok := c.Metadata["difficulty"].(string); ok {
		t.Difficulty = s
	}
	if tags, ok := c.Metadata["tags"].([]any); ok {
		for _, tag := range tags {
			if s, ok := tag.(string); ok {
				t.Tags = append(t.Tags, s)
			}
		}
	}
	e := c.Environment
	if c.Agent.TimeoutSec != nil {
		t.AgentTimeoutSec = *c.Agent.TimeoutSec
	}
	t.VerifierTimeoutSec = c.Verifier.TimeoutSec
	t.BuildTimeoutSec = e.BuildTimeoutSec
	t.DockerImage = e.DockerImage
	if e.CPUs != nil {
		t.CPUs = float64(*e.CPUs)
	}
	if e.MemoryMB != nil {
		t.MemoryMB = *e.MemoryMB
	}
	if e.StorageMB != nil {
		t.StorageMB = *e.StorageMB
	}
	t.Internet = e.NetworkMode == networkPublic
	t.Workdir = e.Workdir
	t.Healthcheck = e.Healthcheck
	t.AgentUser, t.VerifierUser = c.Agent.User, c.Verifier.User
	var refused []string
	for _, env := range []struct {
		sec string
		m   map[string]string
		to  *map[string]string
	}{{"[environment].env", e.Env, &t.Env}, {"[verifier].env", c.Verifier.Env, &t.VerifierEnv}, {"[solution].env", c.Solution.Env, &t.SolutionEnv}} {
		resolved, err := resolveEnv(env.m, env.sec)
		if err != nil {
			refused = append(refused, err.Error())
		}
		*env.to = resolved
	}
	refused = append(refused, refusals(c)...)
	t.Refused = strings.Join(refused, "; ")
	t.Ignored = ignored(c)
}

// refusals lists the Harbor features a task uses that proctor does not
// have, each with the key that asks for it.
func refusals(c TaskConfig) []string {
	var out []string
	refuse := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	e := c.Environment
	if c.Steps > 0 {
		refuse("[[steps]]: multi-step tasks are not supported")
	}
	if e.OS == "windows" {
		refuse(`[environment].os = "windows": the sandboxes run Linux containers`)
	}
	if e.GPUs != nil && *e.GPUs > 0 {
		types := ""
		if len(e.GPUTypes) > 0 {
			types = " (" + strings.Join(e.GPUTypes, ", ") + ")"
		}
		refuse("[environment].gpus = %d%s: the sandbox backends have no GPUs", *e.GPUs, types)
	}
	if e.TPU != nil {
		refuse("[environment.tpu]: the sandbox backends have no TPUs")
	}
	if e.MCPServers > 0 {
		refuse("[[environment.mcp_servers]]: proctor's agents take no MCP servers")
	}
	for _, n := range []struct{ sec, mode string }{{"[environment]", e.NetworkMode}, {"[agent]", c.Agent.NetworkMode}, {"[verifier]", c.Verifier.NetworkMode}} {
		if n.mode == networkAllowlist {
			refuse(`%s.network_mode = "allowlist": host allowlists are not supported`, n.sec)
		}
	}
	for _, n := range []struct{ sec, mode string }{{"[agent]", c.Agent.NetworkMode}, {"[verifier]", c.Verifier.NetworkMode}} {
		if n.mode != "" && n.mode != networkAllowlist && n.mode != e.NetworkMode {
			refuse(`%s.network_mode = %q differs from the environment's %q: the network cannot change between phases (as on Harbor's docker environment)`, n.sec, n.mode, e.NetworkMode)
		}
	}
	if c.Verifier.EnvironmentMode == "separate" || c.Verifier.HasEnvironment {
		refuse(`[verifier] environment_mode = "separate": a separate verifier container is not supported`)
	}
	if c.Verifier.Collect > 0 {
		refuse("[[verifier.collect]]: collect hooks in Compose services are not supported")
	}
	if c.Verifier.User != "" && c.Agent.User == "" {
		refuse("[verifier].user = %q without [agent].user: the agent would run as the image's user, which proctor cannot name apart from the verifier's; set [agent].user too", c.Verifier.User)
	}
	return out
}

// ignored lists the keys a task sets that change nothing in a rollout.
func ignored(c TaskConfig) []string {
	var out []string
	if c.Artifacts > 0 {
		out = append(out, "artifacts (not collected)")
	}
	if c.Environment.SkillsDir != "" {
		out = append(out, "[environment].skills_dir (proctor's agents load no skills)")
	}
	return out
}

// envTemplate is Harbor's ${VAR} / ${VAR:-default} (harbor/utils/env.py).
var envTemplate = regexp.MustCompile(`^\$\{([^}:]+)(?::-(.*))?\}$`)

// resolveEnv resolves an env table as Harbor's resolve_env_vars does, but
// without the host's environment, which never reaches a sandbox: a literal
// stays, ${VAR:-default} is its default, and ${VAR} with no default is an
// error naming the variable.
func resolveEnv(m map[string]string, sec string) (map[string]string, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	var missing []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		sm := envTemplate.FindStringSubmatchIndex(v)
		switch {
		case sm == nil:
			out[k] = v
		case sm[4] >= 0:
			out[k] = v[sm[4]:sm[5]]
		default:
			missing = append(missing, fmt.Sprintf("%s.%s = %q", sec, k, v))
		}
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("%s: proctor passes no host variables into sandboxes; give each a default (${VAR:-value})", strings.Join(missing, ", "))
	}
	return out, nil
}

// Row is a dataset row in the layout of NousResearch/terminal-bench-2.
type Row struct {
	TaskName       string   `json:"task_name"`
	Category       string   `json:"category"`
	Instruction    string   `json:"instruction"`
	DockerImage    string   `json:"docker_image"`
	EnvironmentTar string   `json:"environment_tar"`
	TestsTar       string   `json:"tests_tar"`
	SolutionTar    string   `json:"solution_tar"`
	TestSh         string   `json:"test_sh"`
	Difficulty     string   `json:"difficulty"`
	AgentTimeout   *float64 `json:"agent_timeout_sec"`
	TestTimeout    *float64 `json:"test_timeout_sec"`
	// A folder row from the host: {"name": ..., "tar": ...}.
	Name string `json:"name"`
	Tar  string `json:"tar"`
}

// FromRow reads one dataset row. A row whose archives are unsafe or
// unreadable comes back with Broken set, so its rollouts record why.
func FromRow(raw json.RawMessage) (Task, error) {
	var r Row
	if err := json.Unmarshal(raw, &r); err != nil {
		return Task{}, err
	}
	if r.Name != "" && r.Tar != "" {
		tgz, err := base64.StdEncoding.DecodeString(r.Tar)
		if err != nil {
			return Task{Name: r.Name, Broken: "task folder archive: " + err.Error()}, nil
		}
		fs, err := files(tgz)
		if err != nil {
			return Task{Name: r.Name, Broken: err.Error()}, nil
		}
		t, err := FromFolder(r.Name, fs)
		if err != nil {
			t.Broken = err.Error()
		}
		return t, nil
	}
	if r.TaskName == "" {
		return Task{}, errors.New("row has no task_name")
	}
	// The hermes-agent TB2 environment gives the row's instruction to the
	// model as it is, and its sandboxes have the network.
	t := Task{Name: r.TaskName, Category: r.Category, Difficulty: r.Difficulty, Instruction: r.Instruction,
		DockerImage: r.DockerImage, VerifierTimeoutSec: defaultVerifierTimeout, BuildTimeoutSec: defaultBuildTimeout, Internet: true, FromRow: true}
	if r.AgentTimeout != nil {
		t.AgentTimeoutSec = *r.AgentTimeout
	}
	if r.TestTimeout != nil {
		t.VerifierTimeoutSec = *r.TestTimeout
	}
	decode := func(field, s string) ([]byte, map[string]entry) {
		if s == "" || t.Broken != "" {
			return nil, nil
		}
		tgz, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Broken = field + ": not base64: " + err.Error()
			return nil, nil
		}
		fs, err := files(tgz)
		if err != nil {
			t.Broken = field + ": " + err.Error()
			return nil, nil
		}
		return tgz, fs
	}
	var envFiles, testFiles, solFiles map[string]entry
	t.EnvironmentTar, envFiles = decode("environment_tar", r.EnvironmentTar)
	t.TestsTar, testFiles = decode("tests_tar", r.TestsTar)
	t.SolutionTar, solFiles = decode("solution_tar", r.SolutionTar)
	_, t.HasDockerfile = regular(envFiles, "Dockerfile")
	_, solve := solFiles["solve.sh"]
	t.MissingSolve = !solve
	if r.TestSh != "" && t.Broken == "" {
		// test.sh given on its own: add it to the tests archive.
		withPrefix := map[string]entry{}
		for k, v := range testFiles {
			withPrefix["tests/"+k] = v
		}
		withPrefix["tests/test.sh"] = entry{hdr: tar.Header{Typeflag: tar.TypeReg, Mode: 0o755}, data: []byte(r.TestSh)}
		tests, err := subTar(withPrefix, "tests")
		if err != nil {
			t.Broken = "tests_tar: " + err.Error()
		}
		t.TestsTar = tests
	}
	if t.Broken == "" && t.TestsTar == nil {
		t.Broken = "row has no tests_tar or test_sh"
	}
	return t, nil
}
