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
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Task is one Terminal-Bench task, from a Harbor task folder or a dataset
// row, normalised. The tars are gzip tars of the environment, tests and
// solution folders.
type Task struct {
	Name               string  `json:"name"`
	Category           string  `json:"category,omitempty"`
	Difficulty         string  `json:"difficulty,omitempty"`
	Instruction        string  `json:"instruction"`
	DockerImage        string  `json:"docker_image,omitempty"`
	EnvironmentTar     []byte  `json:"environment_tar,omitempty"`
	TestsTar           []byte  `json:"tests_tar,omitempty"`
	SolutionTar        []byte  `json:"solution_tar,omitempty"`
	AgentTimeoutSec    float64 `json:"agent_timeout_sec,omitempty"`
	VerifierTimeoutSec float64 `json:"verifier_timeout_sec,omitempty"`
	CPUs               float64 `json:"cpus,omitempty"`
	MemoryMB           int64   `json:"memory_mb,omitempty"`
	AllowInternet      bool    `json:"allow_internet,omitempty"`
	// Broken says why the task cannot run; its rollouts fail with it.
	Broken string `json:"broken,omitempty"`
}

// Harbor's defaults when task.toml does not say.
const (
	defaultAgentTimeout    = 600.0
	defaultVerifierTimeout = 600.0
)

var canary = regexp.MustCompile(`(?i)canary`)

// StripCanary drops the canary lines (comments that carry a canary GUID)
// from an instruction, as the official harness does.
func StripCanary(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if (strings.HasPrefix(t, "<!--") || strings.HasPrefix(t, "#")) && canary.MatchString(t) {
			continue
		}
		out = append(out, line)
	}
	return strings.TrimSpace(strings.Join(out, "\n")) + "\n"
}

// Limits on one task's archives, checked before anything is read into
// memory: a dataset row is untrusted, and one bad row (a gzip bomb, a 1 GiB
// sparse file that compresses to a megabyte) must cost that row only.
var (
	maxTaskBytes   int64 = 64 << 20 // the files of one archive, decompressed
	maxTaskEntries       = 20000    // entries in one archive
)

// files reads a gzip (or plain) tar into a map of regular files, within
// the limits above.
func files(tgz []byte) (map[string][]byte, error) {
	var r io.Reader = bytes.NewReader(tgz)
	if len(tgz) > 2 && tgz[0] == 0x1f && tgz[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		r = zr
	}
	tr := tar.NewReader(r)
	out := map[string][]byte{}
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
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
			if h.Size < 0 || total+h.Size > maxTaskBytes {
				return nil, fmt.Errorf("archive holds over %d MiB once decompressed (entry %q is %d bytes)", maxTaskBytes>>20, h.Name, h.Size)
			}
			b, err := io.ReadAll(io.LimitReader(tr, h.Size))
			if err != nil {
				return nil, err
			}
			total += int64(len(b))
			out[path.Clean(strings.TrimPrefix(h.Name, "./"))] = b
		}
	}
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

// subTar packs the files under prefix/ (renamed relative to it) as a tar.
func subTar(fs map[string][]byte, prefix string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	n := 0
	for _, name := range sortedKeys(fs) {
		rel, ok := strings.CutPrefix(name, prefix+"/")
		if !ok {
			continue
		}
		mode := int64(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		tw.WriteHeader(&tar.Header{Name: rel, Mode: mode, Size: int64(len(fs[name])), Typeflag: tar.TypeReg})
		tw.Write(fs[name])
		n++
	}
	tw.Close()
	if n == 0 {
		return nil
	}
	return buf.Bytes()
}

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// FromFolder reads a Harbor task folder (as files relative to it).
func FromFolder(name string, fs map[string][]byte) (Task, error) {
	t := Task{Name: name, AgentTimeoutSec: defaultAgentTimeout, VerifierTimeoutSec: defaultVerifierTimeout}
	ins, ok := fs["instruction.md"]
	if !ok {
		return t, errors.New("no instruction.md")
	}
	t.Instruction = StripCanary(string(ins))
	if raw, ok := fs["task.toml"]; ok {
		doc, err := ParseTOML(string(raw))
		if err != nil {
			return t, fmt.Errorf("task.toml: %w", err)
		}
		t.applyTOML(doc)
	}
	t.EnvironmentTar = subTar(fs, "environment")
	t.TestsTar = subTar(fs, "tests")
	t.SolutionTar = subTar(fs, "solution")
	if t.TestsTar == nil {
		return t, errors.New("no tests/ folder")
	}
	if t.DockerImage == "" && t.EnvironmentTar == nil {
		return t, errors.New("no environment/Dockerfile and no docker_image")
	}
	return t, nil
}

// applyTOML reads task.toml, schema 1.0 to 1.3 and legacy keys.
func (t *Task) applyTOML(doc map[string]map[string]any) {
	num := func(sec, key string) (float64, bool) {
		switch v := doc[sec][key].(type) {
		case float64:
			return v, true
		case int64:
			return float64(v), true
		}
		return 0, false
	}
	str := func(sec, key string) string { s, _ := doc[sec][key].(string); return s }
	if s := str("metadata", "category"); s != "" {
		t.Category = s
	}
	if s := str("metadata", "difficulty"); s != "" {
		t.Difficulty = s
	}
	if v, ok := num("agent", "timeout_sec"); ok {
		t.AgentTimeoutSec = v
	}
	if v, ok := num("verifier", "timeout_sec"); ok {
		t.VerifierTimeoutSec = v
	}
	if s := str("environment", "docker_image"); s != "" {
		t.DockerImage = s
	}
	if v, ok := num("environment", "cpus"); ok {
		t.CPUs = v
	}
	if v, ok := num("environment", "memory_mb"); ok {
		t.MemoryMB = int64(v)
	} else if s := str("environment", "memory"); s != "" {
		t.MemoryMB = parseMemory(s)
	}
	// Legacy: allow_internet at the top level or under [environment].
	for _, sec := range []string{"", "environment"} {
		if b, ok := doc[sec]["allow_internet"].(bool); ok {
			t.AllowInternet = b
		}
	}
}

func parseMemory(s string) int64 {
	s = strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "G"), strings.HasSuffix(s, "GB"), strings.HasSuffix(s, "GI"):
		mult = 1024
	}
	n, _ := strconv.ParseFloat(strings.TrimRight(s, "GMBI"), 64)
	return int64(n * float64(mult))
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
			return Task{Name: r.Name, Broken: err.Error()}, nil
		}
		return t, nil
	}
	if r.TaskName == "" {
		return Task{}, errors.New("row has no task_name")
	}
	t := Task{Name: r.TaskName, Category: r.Category, Difficulty: r.Difficulty, Instruction: StripCanary(r.Instruction),
		DockerImage: r.DockerImage, AgentTimeoutSec: defaultAgentTimeout, VerifierTimeoutSec: defaultVerifierTimeout}
	if r.AgentTimeout != nil {
		t.AgentTimeoutSec = *r.AgentTimeout
	}
	if r.TestTimeout != nil {
		t.VerifierTimeoutSec = *r.TestTimeout
	}
	decode := func(field, s string) []byte {
		if s == "" || t.Broken != "" {
			return nil
		}
		tgz, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Broken = field + ": not base64: " + err.Error()
			return nil
		}
		if _, err := files(tgz); err != nil {
			t.Broken = field + ": " + err.Error()
			return nil
		}
		return tgz
	}
	t.EnvironmentTar = decode("environment_tar", r.EnvironmentTar)
	t.TestsTar = decode("tests_tar", r.TestsTar)
	t.SolutionTar = decode("solution_tar", r.SolutionTar)
	if r.TestSh != "" && t.Broken == "" {
		// test.sh given on its own: add it to the tests archive.
		fs := map[string][]byte{}
		if t.TestsTar != nil {
			fs, _ = files(t.TestsTar)
		}
		fs["test.sh"] = []byte(r.TestSh)
		withPrefix := map[string][]byte{}
		for k, v := range fs {
			withPrefix["tests/"+k] = v
		}
		t.TestsTar = subTar(withPrefix, "tests")
	}
	if t.Broken == "" && t.TestsTar == nil {
		t.Broken = "row has no tests_tar or test_sh"
	}
	return t, nil
}
