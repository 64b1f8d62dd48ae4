package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

var update = flag.Bool("update", false, "rewrite generated fixtures")

// tb2Row is a row in the layout of the terminal-bench-2 dataset.
type tb2Row struct {
	TaskName       string  `json:"task_name" parquet:"task_name"`
	Category       string  `json:"category" parquet:"category"`
	Difficulty     string  `json:"difficulty" parquet:"difficulty"`
	Instruction    string  `json:"instruction" parquet:"instruction"`
	DockerImage    string  `json:"docker_image" parquet:"docker_image"`
	EnvironmentTar string  `json:"environment_tar" parquet:"environment_tar"`
	TestsTar       string  `json:"tests_tar" parquet:"tests_tar"`
	SolutionTar    string  `json:"solution_tar" parquet:"solution_tar"`
	AgentTimeout   float64 `json:"agent_timeout_sec" parquet:"agent_timeout_sec"`
	TestTimeout    float64 `json:"test_timeout_sec" parquet:"test_timeout_sec"`
}

// tgz packs a folder as a deterministic gzip tar (base64).
func tgz(t *testing.T, dir string) string {
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	var files []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		rel, _ := filepath.Rel(dir, f)
		fi, _ := os.Stat(f)
		tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	tw.Close()
	zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func evilTar() string {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := []byte("FROM proctor-base:bookworm\n")
	tw.WriteHeader(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
	tw.Write(body)
	evil := []byte("owned\n")
	tw.WriteHeader(&tar.Header{Name: "../../etc/cron.d/evil", Mode: 0o644, Size: int64(len(evil)), Typeflag: tar.TypeReg})
	tw.Write(evil)
	tw.Close()
	zw.Close()
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func tomlValue(doc, section, key string) string {
	sec := ""
	for _, line := range strings.Split(doc, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "[") {
			sec = strings.Trim(line, "[]")
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && sec == section && strings.TrimSpace(k) == key {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

// TestTB2Datasets keeps testdata/tb2/dataset.{jsonl,parquet} in step with
// the task folders (go test -run TB2Datasets -update rewrites them).
func TestTB2Datasets(t *testing.T) {
	root := "../../testdata/tb2"
	entries, _ := os.ReadDir(filepath.Join(root, "tasks"))
	var rows []tb2Row
	for _, e := range entries {
		if e.Name() == "harbor-example" {
			// Its point is task.toml (users, env tables), which rows of
			// this layout do not carry.
			continue
		}
		dir := filepath.Join(root, "tasks", e.Name())
		ins, _ := os.ReadFile(filepath.Join(dir, "instruction.md"))
		toml, _ := os.ReadFile(filepath.Join(dir, "task.toml"))
		num := func(sec string, def float64) float64 {
			v, err := strconv.ParseFloat(tomlValue(string(toml), sec, "timeout_sec"), 64)
			if err != nil {
				return def
			}
			return v
		}
		rows = append(rows, tb2Row{
			TaskName: e.Name(), Category: tomlValue(string(toml), "metadata", "category"),
			Difficulty: tomlValue(string(toml), "metadata", "difficulty"), Instruction: string(ins),
			DockerImage:    tomlValue(string(toml), "environment", "docker_image"),
			EnvironmentTar: tgz(t, filepath.Join(dir, "environment")), TestsTar: tgz(t, filepath.Join(dir, "tests")),
			SolutionTar: tgz(t, filepath.Join(dir, "solution")), AgentTimeout: num("agent", 600), TestTimeout: num("verifier", 600),
		})
	}
	rows = append(rows, tb2Row{TaskName: "escape-attempt", Category: "broken", Instruction: "Nothing to do.",
		EnvironmentTar: evilTar(), TestsTar: tgz(t, filepath.Join(root, "tasks", "hello-file", "tests")), AgentTimeout: 60, TestTimeout: 60})

	var jsonl bytes.Buffer
	for _, r := range rows {
		b, _ := json.Marshal(r)
		jsonl.Write(append(b, '\n'))
	}
	var pq bytes.Buffer
	w := parquet.NewGenericWriter[tb2Row](&pq)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	w.Close()
	jpath, ppath := filepath.Join(root, "dataset.jsonl"), filepath.Join(root, "dataset.parquet")
	if *update {
		os.WriteFile(jpath, jsonl.Bytes(), 0o644)
		os.WriteFile(ppath, pq.Bytes(), 0o644)
	}
	got, err := os.ReadFile(jpath)
	if err != nil || !bytes.Equal(got, jsonl.Bytes()) {
		t.Fatalf("%s is out of date with the task folders: run go test ./cmd/proctor -run TB2Datasets -update", jpath)
	}
	if _, err := os.Stat(ppath); err != nil {
		t.Fatalf("%s missing: run with -update", ppath)
	}
}

// TestSwesmithFixturesCurrent runs the generator of the SWE-smith fixture
// instances (testdata/swesmith/mkinstances.py, which breaks the fixture
// repositories' functions and runs their tests) in each fixture image, and
// checks that every instance file is exactly what it makes, so every row's
// FAIL_TO_PASS and PASS_TO_PASS lists are what the tests really do
// (-update rewrites the files).
func TestSwesmithFixturesCurrent(t *testing.T) {
	sandboxtest.RequireDocker(t)
	dir, err := filepath.Abs("../../testdata/swesmith")
	if err != nil {
		t.Fatal(err)
	}
	for _, fx := range []struct {
		image, file string
		args        []string
		min         int
	}{
		{"proctor-swesmith-fixture:2", "instances.jsonl", nil, 6}, // at least 5 and the stale one
		{"proctor-swesmith-textkit:1", "textkit-pytest.jsonl", []string{"textkit", "pytest"}, 4},
		{"proctor-swesmith-textkit:1", "textkit-unittest.jsonl", []string{"textkit", "unittest"}, 4},
	} {
		if err := exec.Command("docker", "image", "inspect", fx.image).Run(); err != nil {
			t.Fatalf("no image %s: run `make fixture-images`", fx.image)
		}
		cmd := exec.Command("docker", append([]string{"run", "--rm", "--network", "none", "-v", dir + ":/fx:ro", fx.image, "python3", "/fx/mkinstances.py"}, fx.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mkinstances.py %v: %v\n%s", fx.args, err, stderr.String())
		}
		path := filepath.Join(dir, fx.file)
		if *update {
			os.WriteFile(path, out, 0o644)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, out) {
			t.Fatalf("%s is not what mkinstances.py makes: run go test ./cmd/proctor -run SwesmithFixturesCurrent -update", path)
		}
		if n := bytes.Count(out, []byte("\n")); n < fx.min {
			t.Fatalf("mkinstances.py %v made %d instances, want at least %d", fx.args, n, fx.min)
		}
	}
}
