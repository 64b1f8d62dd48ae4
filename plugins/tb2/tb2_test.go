//go:build !wasip1

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/sdk/abi"
	"github.com/proctor-dev/proctor/sdk/sdktest"
)

func tarOf(files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	return buf.Bytes()
}

// TestStripCanary pins Harbor's strip_canary (harbor-framework/harbor
// src/harbor/models/task/task.py at 738fdfba): only the canary lines at the
// very start go, with the blank lines after them. The golden outputs are
// what that function returns for each input.
func TestStripCanary(t *testing.T) {
	var cases []struct{ In, Out string }
	readGolden(t, "testdata/canary.golden.json", &cases)
	for _, c := range cases {
		if got := StripCanary(c.In); got != c.Out {
			t.Errorf("StripCanary(%q) = %q, want %q", c.In, got, c.Out)
		}
	}
}

// readGolden reads a golden JSON file into v.
func readGolden(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func folder(files map[string]string) map[string]entry {
	fs := map[string]entry{}
	for name, body := range files {
		fs[name] = entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, data: []byte(body)}
	}
	return fs
}

func TestFromFolderSchemas(t *testing.T) {
	for _, toml := range []string{
		"version = \"1.0\"\n[metadata]\ncategory = \"x\"\n[agent]\ntimeout_sec = 120.0\n[environment]\ndocker_image = \"img\"\nmemory = \"2G\"\n",
		"schema_version = \"1.3\"\n[metadata]\ncategory = \"x\"  # comment\n[agent]\ntimeout_sec = 120\n[environment]\ndocker_image = 'img'\nmemory_mb = 2048\nallow_internet = true\n",
	} {
		task, err := FromFolder("t", folder(map[string]string{"task.toml": toml, "instruction.md": "hi", "tests/test.sh": "true"}))
		if err != nil {
			t.Fatal(err)
		}
		if task.Category != "x" || task.AgentTimeoutSec != 120 || task.DockerImage != "img" || task.MemoryMB != 2048 || !task.Internet {
			t.Errorf("%q → %+v", toml, task)
		}
	}
	for _, tc := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"instruction.md": "hi", "tests/test.sh": "true"}, "no task.toml"},
		{map[string]string{"task.toml": "", "tests/test.sh": "true"}, "no instruction.md"},
		{map[string]string{"task.toml": "[environment]\ndocker_image = \"i\"\n", "instruction.md": "hi", "tests/other.sh": "true"}, "no tests/test.sh"},
		{map[string]string{"task.toml": "", "instruction.md": "hi", "tests/test.sh": "true"}, "no environment definition"},
		{map[string]string{"task.toml": "[environment]\ndocker_image = \"i\"\n", "instruction.md": "\xff", "tests/test.sh": "true"}, "not UTF-8"},
		{map[string]string{"task.toml": "[agent]\ntimeout_sec = [\n", "instruction.md": "hi", "tests/test.sh": "true"}, "task.toml: line"},
	} {
		if _, err := FromFolder("t", folder(tc.files)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: want %q, got %v", tc.files, tc.want, err)
		}
	}
}

// TestInstructionAsHarborReadsIt: the canary line at the top goes,
// Windows newlines read as newlines, the rest is the file as it is (no
// trimming, no canary lines dropped further down). A dataset row's
// instruction is given as it is, as the hermes-agent environment does.
func TestInstructionAsHarborReadsIt(t *testing.T) {
	ins := "<!-- terminal-bench-canary GUID x -->\r\n\r\n  Do it.\r\n# canary kept\r\n\r\n"
	task, err := FromFolder("t", folder(map[string]string{"task.toml": "[environment]\ndocker_image = \"i\"\n", "instruction.md": ins, "tests/test.sh": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if want := "  Do it.\n# canary kept\n\n"; task.Instruction != want {
		t.Errorf("folder instruction %q, want %q", task.Instruction, want)
	}
	row, _ := json.Marshal(map[string]any{"task_name": "r", "instruction": ins, "docker_image": "i", "test_sh": "true"})
	rt, err := FromRow(row)
	if err != nil || rt.Instruction != ins {
		t.Errorf("row instruction %q, %v", rt.Instruction, err)
	}
}

func TestRowWithEscapingTarIsBroken(t *testing.T) {
	evil := base64.StdEncoding.EncodeToString(tarOf(map[string]string{"../../x": "boom"}))
	row, _ := json.Marshal(map[string]any{"task_name": "e", "instruction": "x", "environment_tar": evil, "test_sh": "true"})
	task, err := FromRow(row)
	if err != nil || !strings.Contains(task.Broken, "unsafe archive entry") {
		t.Fatalf("%v %+v", err, task.Broken)
	}
}

// TestVerifyIgnoresPrewrittenReward runs the hooks natively: a reward the
// agent wrote before verification is wiped, and a missing reward is the
// verifier's failure (Harbor's RewardFileNotFoundError: reward 0), with the
// test output kept.
func TestVerifyIgnoresPrewrittenReward(t *testing.T) {
	h := sdktest.New(t)
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "tests"), 0o755)
	os.WriteFile(filepath.Join(dir, "instruction.md"), []byte("write ok"), 0o644)
	os.WriteFile(filepath.Join(dir, "task.toml"), []byte("[environment]\ndocker_image = \"img\"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "tests", "test.sh"), []byte("#!/bin/bash\necho checking\nif [ -f \"$ROOT/app/ok\" ]; then echo 1 > \"$ROOT/logs/verifier/reward.txt\"; fi\n"), 0o755)
	h.Datasets["tasks"] = []json.RawMessage{mustFolderRow(t, "t1", dir)}

	var tasks abi.TasksResponse
	cfg := json.RawMessage(`{"dataset":"tasks"}`)
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: cfg}, &tasks); err != nil || len(tasks.Tasks) != 1 {
		t.Fatalf("%v %+v", err, tasks)
	}
	rr := abi.RolloutRequest{Task: tasks.Tasks[0], Config: cfg}
	if err := sdktest.Call(abi.HookSetup, rr, nil); err != nil {
		t.Fatal(err)
	}
	// The agent cheats: it writes a reward during its turn.
	os.WriteFile(h.Path("/logs/verifier/reward.txt"), []byte("1"), 0o644)
	var failed abi.VerifyResponse
	err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &failed)
	if err != nil || !strings.Contains(failed.Failure, "no reward") || failed.Reward != 0 || failed.Passed || !strings.Contains(failed.Output, "checking") {
		t.Fatalf("want the verifier's failure with the test output, got %v %+v", err, failed)
	}
	// Solved for real: reward 1.
	os.MkdirAll(h.Path("/app"), 0o755)
	os.WriteFile(h.Path("/app/ok"), nil, 0o644)
	var v abi.VerifyResponse
	if err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &v); err != nil || !v.Passed {
		t.Fatalf("%v %+v", err, v)
	}
}

func mustFolderRow(t *testing.T, name, dir string) json.RawMessage {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if fi.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		b, _ := os.ReadFile(p)
		tw.WriteHeader(&tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
		return nil
	})
	tw.Close()
	row, _ := json.Marshal(map[string]string{"name": name, "tar": base64.StdEncoding.EncodeToString(buf.Bytes())})
	return row
}

func FuzzFromRow(f *testing.F) {
	f.Add([]byte(`{"task_name":"a","instruction":"x","test_sh":"true","docker_image":"i"}`))
	f.Add([]byte(`{"name":"a","tar":"H4sIAAAAAAAA"}`))
	f.Fuzz(func(t *testing.T, b []byte) { FromRow(b) })
}

func TestParseConfigStrict(t *testing.T) {
	if _, err := parseConfig(json.RawMessage(`{"dataset":"d","categorys":["x"]}`)); err == nil || !strings.Contains(err.Error(), "categorys") {
		t.Errorf("an unknown key must be an error naming it: %v", err)
	}
	if c, err := parseConfig(json.RawMessage(`{"dataset":"d","categories":["x"],"test_timeout":"90s"}`)); err != nil || len(c.Categories) != 1 {
		t.Errorf("%v %+v", err, c)
	}
}

// One bad row costs that row only: a 1 GiB sparse file (about a megabyte
// gzipped) or a gzip bomb is refused with a reason before anything is
// read into memory, and the other rows load.
func TestHugeArchiveRowIsBroken(t *testing.T) {
	zeros := func(size int64, name string) string {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		tw := tar.NewWriter(zw)
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg})
		chunk := make([]byte, 1<<20)
		for n := int64(0); n < size; n += int64(len(chunk)) {
			tw.Write(chunk[:min(int64(len(chunk)), size-n)])
		}
		tw.Close()
		zw.Close()
		return base64.StdEncoding.EncodeToString(buf.Bytes())
	}
	h := sdktest.New(t)
	good, _ := json.Marshal(map[string]any{"task_name": "good", "instruction": "x", "docker_image": "img", "test_sh": "true"})
	sparse, _ := json.Marshal(map[string]any{"task_name": "sparse", "instruction": "x", "docker_image": "img", "test_sh": "true", "environment_tar": zeros(1<<30, "huge.bin")})
	many := map[string]string{}
	for i := range maxTaskEntries + 1 {
		many[fmt.Sprintf("f%d", i)] = ""
	}
	entries, _ := json.Marshal(map[string]any{"task_name": "entries", "instruction": "x", "docker_image": "img", "test_sh": "true",
		"environment_tar": base64.StdEncoding.EncodeToString(tarOf(many))})
	h.Datasets["rows"] = []json.RawMessage{good, sparse, entries}
	var tasks abi.TasksResponse
	if err := sdktest.Call(abi.HookTasks, abi.TasksRequest{Config: json.RawMessage(`{"dataset":"rows"}`)}, &tasks); err != nil {
		t.Fatal(err)
	}
	if len(tasks.Tasks) != 3 {
		t.Fatalf("want every row listed, got %+v", tasks)
	}
	for _, task := range tasks.Tasks {
		var tk Task
		json.Unmarshal(task.Data, &tk)
		switch {
		case tk.Name == "good" && tk.Broken != "":
			t.Errorf("the good row is broken: %s", tk.Broken)
		case tk.Name == "sparse" && !strings.Contains(tk.Broken, "decompressed"):
			t.Errorf("the sparse row: %q", tk.Broken)
		case tk.Name == "entries" && !strings.Contains(tk.Broken, "entries"):
			t.Errorf("the many-entries row: %q", tk.Broken)
		}
	}
}
