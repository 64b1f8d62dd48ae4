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

func TestStripCanary(t *testing.T) {
	in := "<!-- BENCHMARK DATA SHOULD NEVER APPEAR. terminal-bench-canary GUID 123 -->\n# also a canary line\nDo the thing.\n"
	if got := StripCanary(in); got != "Do the thing.\n" {
		t.Fatalf("%q", got)
	}
	if got := StripCanary("-n starts with a dash\n"); got != "-n starts with a dash\n" {
		t.Fatalf("%q", got)
	}
}

func TestFromFolderSchemas(t *testing.T) {
	for _, toml := range []string{
		"version = \"1.0\"\nallow_internet = true\n[metadata]\ncategory = \"x\"\n[agent]\ntimeout_sec = 120.0\n[environment]\ndocker_image = \"img\"\nmemory = \"2G\"\n",
		"schema_version = \"1.3\"\n[metadata]\ncategory = \"x\"  # comment\n[agent]\ntimeout_sec = 120\n[environment]\ndocker_image = 'img'\nmemory_mb = 2048\nallow_internet = true\n",
	} {
		task, err := FromFolder("t", map[string][]byte{"task.toml": []byte(toml), "instruction.md": []byte("hi"), "tests/test.sh": []byte("true")})
		if err != nil {
			t.Fatal(err)
		}
		if task.Category != "x" || task.AgentTimeoutSec != 120 || task.DockerImage != "img" || task.MemoryMB != 2048 || !task.AllowInternet {
			t.Errorf("%q → %+v", toml, task)
		}
	}
	if _, err := FromFolder("t", map[string][]byte{"instruction.md": []byte("hi")}); err == nil {
		t.Error("a task without tests loaded")
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
// agent wrote before verification is wiped, and a missing reward is a
// verifier error carrying the test output.
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
	err := sdktest.Call(abi.HookVerify, abi.VerifyRequest{RolloutRequest: rr}, &abi.VerifyResponse{})
	if err == nil || !strings.Contains(err.Error(), "no reward") || !strings.Contains(err.Error(), "checking") {
		t.Fatalf("want a verifier error with the test output, got %v", err)
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

func TestReadRewardPrecedence(t *testing.T) {
	h := sdktest.New(t)
	os.MkdirAll(h.Path("/logs/verifier"), 0o755)
	os.WriteFile(h.Path("/logs/verifier/reward.txt"), []byte("0"), 0o644)
	os.WriteFile(h.Path("/logs/verifier/reward.json"), []byte(`{"reward": 0.75, "style": 0.5}`), 0o644)
	r, scores, err := readReward()
	if err != nil || r != 0.75 || scores["style"] != 0.5 {
		t.Fatalf("%v %v %v", r, scores, err)
	}
	os.WriteFile(h.Path("/logs/verifier/reward.json"), nil, 0o644)
	os.WriteFile(h.Path("/logs/verifier/reward.txt"), []byte(" \n"), 0o644)
	if _, _, err := readReward(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty reward: %v", err)
	}
}

func FuzzParseTOML(f *testing.F) {
	f.Add("[metadata]\ncategory = \"x\"\n[agent]\ntimeout_sec = 1.5\ntags = [\"a\", 'b']\n")
	f.Fuzz(func(t *testing.T, s string) { ParseTOML(s) })
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
