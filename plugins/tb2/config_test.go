//go:build !wasip1

package main

import (
	"reflect"
	"strings"
	"testing"
)

// harborExample is the task.toml example of Harbor's documentation
// (harbor-framework/harbor docs/content/docs/tasks/index.mdx at 738fdfba),
// as it is.
const harborExample = `schema_version = "1.3"

[task]
name = "<org>/<name>"
description = "A short description of the task"
authors = [{ name = "Steve Jobs", email = "steve@apple.com" }]
keywords = ["trivial", "programming"]

[metadata]
difficulty_explanation = "Trivial task for demonstration"
category = "programming"

[verifier]
timeout_sec = 120.0
env = { API_KEY = "sk-test-123" }
user = "root"  # optional: run the verifier as this OS user

[agent]
timeout_sec = 120.0
user = "agent"  # optional: run the agent as this OS user

[solution]
env = { API_KEY = "sk-test-123" }

[environment]
network_mode = "no-network"  # baseline; defaults to "public" when omitted
build_timeout_sec = 600.0
docker_image = "some-org/some-name:some-tag"
os = "linux"  # or "windows" to target Windows containers
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
gpu_types = ["H100", "A100"]
env = { SOME_ENV_VAR = "${SOME_ENV_VAR}" } # harbor run requests approval from the user for these env vars

[environment.tpu]                   # optional; omit the table if you don't need TPUs
type = "v6e"                        # alias (v3, v4, v5e, v5p, v6e, v7, trillium, ironwood) or canonical GKE label
topology = "2x4"                    # required; per-pod chip count = product of dimensions (here, 8)

[[environment.mcp_servers]]
name = "mcp-server"
transport = "streamable-http"
url = "http://mcp-server:8000/mcp"

[environment.healthcheck]
command = "curl -f http://localhost:8080/health"
interval_sec = 5.0
timeout_sec = 30.0
retries = 3
`

func i64(n int64) *int64 { return &n }

// TestHarborDocumentedExample reads the documented example key by key.
// The placeholder "<org>/<name>" is not a valid package name, which
// Harbor's PackageInfo validator refuses; with a real name it reads.
func TestHarborDocumentedExample(t *testing.T) {
	if _, err := ParseTaskConfig(harborExample); err == nil || !strings.Contains(err.Error(), "[task].name") {
		t.Fatalf("the placeholder package name must be refused as Harbor refuses it: %v", err)
	}
	c, err := ParseTaskConfig(strings.Replace(harborExample, "<org>/<name>", "harbor/hello-world", 1))
	if err != nil {
		t.Fatal(err)
	}
	want := TaskConfig{
		SchemaVersion: "1.3",
		Task: &PackageInfo{Name: "harbor/hello-world", Description: "A short description of the task",
			Authors: []Author{{"Steve Jobs", "steve@apple.com"}}, Keywords: []string{"trivial", "programming"}},
		Metadata: map[string]any{"difficulty_explanation": "Trivial task for demonstration", "category": "programming"},
		Verifier: VerifierConfig{TimeoutSec: 120, Env: map[string]string{"API_KEY": "sk-test-123"}, User: "root"},
		Agent:    AgentConfig{TimeoutSec: func() *float64 { f := 120.0; return &f }(), User: "agent"},
		Solution: SolutionConfig{Env: map[string]string{"API_KEY": "sk-test-123"}},
		Environment: EnvironmentConfig{BuildTimeoutSec: 600, DockerImage: "some-org/some-name:some-tag", OS: "linux",
			CPUs: i64(1), MemoryMB: i64(2048), StorageMB: i64(10240), GPUs: i64(0), GPUTypes: []string{"H100", "A100"},
			TPU: &TPUSpec{"v6e", "2x4"}, MCPServers: 1, Env: map[string]string{"SOME_ENV_VAR": "${SOME_ENV_VAR}"},
			Healthcheck: &Healthcheck{Command: "curl -f http://localhost:8080/health", IntervalSec: 5, TimeoutSec: 30, StartIntervalSec: 5, Retries: 3},
			NetworkMode: networkNone},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	// What proctor makes of it: every feature it lacks is named.
	why := strings.Join(refusals(c), "; ")
	for _, w := range []string{"[environment.tpu]", "mcp_servers"} {
		if !strings.Contains(why, w) {
			t.Errorf("refusals %q do not name %s", why, w)
		}
	}
	if strings.Contains(why, "gpus") || strings.Contains(why, "user") || len(refusals(c)) != 2 {
		t.Errorf("gpus = 0 asks for no GPU, and two users are honoured: %q", why)
	}
}

// TestTOMLSyntax is the layout the old line-based reader refused: inline
// tables, multi-line arrays and strings, a comma inside an array's string.
func TestTOMLSyntax(t *testing.T) {
	c, err := ParseTaskConfig(`
version = "1.0"

[metadata]
author_name = "Jane, Doe"
tags = [
  "x, y",   # a comma inside a string
  'lit',
]
category = """
multi
line"""

[verifier]
timeout_sec = 90
env = { A = "1", B = "a = b" }

[environment]
cpus = 2
memory = "4G"
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Metadata["tags"]; !reflect.DeepEqual(got, []any{"x, y", "lit"}) {
		t.Errorf("tags %#v", got)
	}
	if c.Metadata["category"] != "multi\nline" || c.SchemaVersion != "1.0" || c.Verifier.TimeoutSec != 90 ||
		c.Verifier.Env["B"] != "a = b" || *c.Environment.CPUs != 2 || *c.Environment.MemoryMB != 4096 {
		t.Errorf("%+v", c)
	}
}

// TestDefaults pins TaskConfig's defaults for an empty task.toml.
func TestDefaults(t *testing.T) {
	c, err := ParseTaskConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if c.SchemaVersion != "1.3" || c.Verifier.TimeoutSec != 600 || c.Agent.TimeoutSec != nil || c.Environment.BuildTimeoutSec != 600 ||
		c.Environment.OS != "linux" || c.Environment.NetworkMode != networkPublic || c.Environment.CPUs != nil || c.Environment.MemoryMB != nil {
		t.Errorf("%+v", c)
	}
}

// TestLegacyKeys pins the deprecated spellings Harbor still reads:
// version, memory/storage as sizes, allow_internet (only when
// network_mode and allowed_hosts are absent), and nothing at the top
// level.
func TestLegacyKeys(t *testing.T) {
	for _, tc := range []struct {
		toml    string
		network string
		mem     int64
		storage int64
	}{
		{"[environment]\nallow_internet = false\n", networkNone, 0, 0},
		{"[environment]\nallow_internet = true\n", networkPublic, 0, 0},
		{"[environment]\nallow_internet = \"no\"\n", networkNone, 0, 0},
		{"[environment]\nallow_internet = false\nnetwork_mode = \"public\"\n", networkPublic, 0, 0},
		{"allow_internet = false\n", networkPublic, 0, 0}, // top level: not a TaskConfig key
		{"[environment]\nmemory = \"2G\"\nstorage = \"512M\"\n", networkPublic, 2048, 512},
		{"[environment]\nmemory = \"1.5g\"\n", networkPublic, 1536, 0},
		{"[environment]\nmemory = \"2048K\"\n", networkPublic, 2, 0},
		{"[environment]\nmemory = 4\n", networkPublic, 0, 0}, // not a string: dropped
		{"[environment]\nmemory = \"2G\"\nmemory_mb = 2048\n", networkPublic, 2048, 0},
	} {
		c, err := ParseTaskConfig(tc.toml)
		if err != nil {
			t.Errorf("%q: %v", tc.toml, err)
			continue
		}
		var mem, storage int64
		if c.Environment.MemoryMB != nil {
			mem = *c.Environment.MemoryMB
		}
		if c.Environment.StorageMB != nil {
			storage = *c.Environment.StorageMB
		}
		if c.Environment.NetworkMode != tc.network || mem != tc.mem || storage != tc.storage {
			t.Errorf("%q: network %s, memory %d, storage %d", tc.toml, c.Environment.NetworkMode, mem, storage)
		}
	}
	c, _ := ParseTaskConfig("version = \"1.0\"\nschema_version = \"1.2\"\n")
	if c.SchemaVersion != "1.2" {
		t.Errorf("schema_version wins over version: %q", c.SchemaVersion)
	}
}

// TestInvalidConfigs: what Harbor's validation refuses, refused with the
// key named.
func TestInvalidConfigs(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{"[agent\ntimeout_sec = 1\n", "line 2"},
		{"[environment]\ncpus = 1.5\n", "[environment].cpus"},
		{"[environment]\ncpus = \"two\"\n", "[environment].cpus"},
		{"[environment]\nos = \"macos\"\n", "[environment].os"},
		{"[environment]\nmemory = \"2GB\"\n", "[environment].memory"},
		{"[environment]\nmemory = \"2G\"\nmemory_mb = 1000\n", "conflicts"},
		{"[environment]\nnetwork_mode = \"private\"\n", "[environment].network_mode"},
		{"[environment]\nallowed_hosts = [\"example.com\"]\n", "[environment].allowed_hosts"},
		{"[agent]\nallowed_hosts = [\"example.com\"]\n", "[agent].allowed_hosts"},
		{"[environment]\nenv = { A = 1 }\n", "[environment].env.A"},
		{"[environment.healthcheck]\ninterval_sec = 1\n", "[environment].healthcheck.command"},
		{"[environment.tpu]\ntype = \"v6e\"\ntopology = \"2x0\"\n", "[environment].tpu.topology"},
		{"[task]\nname = \"no-org\"\n", "[task].name"},
		{"[task]\nname = \"a/..b\"\n", "[task].name"},
		{"[task]\nname = \"a/b\"\nauthors = [{ email = \"x@y\" }]\n", "[task].authors[0]"},
		{"[verifier]\ntimeout_sec = \"soon\"\n", "[verifier].timeout_sec"},
		{"[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ncpus = 1\n", "incompatible"},
		{"[agent]\nuser = [1]\n", "[agent].user"},
		{"metadata = 3\n", "[metadata]"},
		{"multi_step_reward_strategy = \"max\"\n", "multi_step_reward_strategy"},
		{"artifacts = [{ source = \"/a/../b\" }]\n", "artifacts[0].source"},
		{"schema_version = 1.3\n", "schema_version"},
	} {
		_, err := ParseTaskConfig(tc.toml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want an error naming %q, got %v", tc.toml, tc.want, err)
		}
	}
}

// TestLaxValues: pydantic's lax mode reads numbers written as strings and
// whole floats as integers; uids as user.
func TestLaxValues(t *testing.T) {
	c, err := ParseTaskConfig("[agent]\ntimeout_sec = \"90\"\nuser = 1000\n[verifier]\nuser = 1000\n[environment]\ncpus = 2.0\nmemory_mb = \"512\"\nos = \"Linux\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if *c.Agent.TimeoutSec != 90 || c.Agent.User != "1000" || *c.Environment.CPUs != 2 || *c.Environment.MemoryMB != 512 || c.Environment.OS != "linux" {
		t.Errorf("%+v", c)
	}
}

func FuzzParseTaskConfig(f *testing.F) {
	f.Add(harborExample)
	f.Add("[metadata]\ncategory = \"x\"\n[agent]\ntimeout_sec = 1.5\ntags = [\"a\", 'b']\n")
	f.Add("[environment]\nmemory = \"1e400G\"\n[[steps]]\nname = 1\n")
	f.Add("[environment]\ncpus = 9.3e18\nenv = { A = \"${B:-c}\" }\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseTaskConfig(s)
		if err != nil {
			return
		}
		var task Task
		task.apply(c)
	})
}
