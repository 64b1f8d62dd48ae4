package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExamplesLoad(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.toml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	t.Setenv("OPENAI_API_KEY", "x")
	for _, f := range files {
		if _, err := Load(f, nil); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestMistakes(t *testing.T) {
	cases := []struct{ toml, want, hint string }{
		{"[run]\nconcurency = 2\n[env]\nplugin='x'", "x.toml:2: run.concurency: unknown key", `"run.concurrency"`},
		{"[agnet]\nkind='nop'\n[env]\nplugin='x'", "x.toml:1: agnet: unknown key", `"agent"`},
		{"[run]\nattempts = 'two'\n[env]\nplugin='x'", "x.toml:2: run.attempts", ""},
		{"[agent]\nkind='nop'\n[model]\napi_key='sk'\n[env]\nplugin='x'", "secrets do not go", "api_key_env"},
		{"[agent]\nkind='llm'\n[env]\nplugin='x'", "model.name", ""},
		{"[agent]\nkind='nop'\n[sandbox]\nnetwork='bridge'\n[env]\nplugin='x'", "x.toml:4: sandbox.network", ""},
		{"[agent]\nkind='nop'\n[run]\nverify_timeout='1 hour'\n[env]\nplugin='x'", "bad duration", ""},
		{"[agent]\nkind='nop'\n", "env.plugin", ""},
		{"[run\nname='x'", "x.toml", ""},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[[reward]]\nname='a'", "reward.plugin", "every [[reward]]"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[[reward]]\nplugin='a.wasm'\nname='s'\n[[reward]]\nplugin='b.wasm'\nname='s'", "two [[reward]] tables are named", ""},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[[reward]]\nplugin='a.wasm'\nwieght=1", "reward.wieght: unknown key", `"reward.weight"`},
		{"[agent]\nkind='nop'\nterminal_timeout = -5\n[env]\nplugin='x'", "x.toml:3: agent.terminal_timeout", "300"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernetes'\n[sandbox.kubernetes]\nnamespce='a'", "x.toml:8: sandbox.kubernetes.namespce: unknown key", `"sandbox.kubernetes.namespace"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernetes'\n[sandbox.kubernetes]\ntolerations=[{key='a', efect='NoSchedule'}]", "sandbox.kubernetes.tolerations.efect: unknown key", `"sandbox.kubernetes.tolerations.effect"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernetes'\n[sandbox.kubernetes]\ntolerations=[{key='a', effect='NoSchedul'}]", "sandbox.kubernetes.tolerations", `"NoSchedule"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='docker'\n[sandbox.kubernetes]\nnamespace='a'", "sandbox.kubernetes: set, but the backend is \"docker\"", `backend = "kubernetes"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernetes'\n[sandbox.kubernetes]\nrequest_fraction=2", "x.toml:8: sandbox.kubernetes.request_fraction: must be between 0 and 1", ""},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernetes'\n[sandbox.kubernetes]\nregistry='http://r:5000'", "sandbox.kubernetes.registry", "host[:port]"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernets'", "sandbox.backend", `"kubernetes"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[sandbox]\nbackend='kubernetes'\n[sandbox.kubernetes]\nseccomp_profile='../../etc/x.json'", "sandbox.kubernetes.seccomp_profile", "relative to that folder"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[serve]\napi='localhost:8000'", "x.toml:6: serve.api", "http://localhost:8000"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[serve]\neval_handling='STOP_TRIAN'", "serve.eval_handling", `"STOP_TRAIN"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[serve]\non_interrupt='finsh'", "serve.on_interrupt", `"finish"`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[serve]\nweight=0.0", "serve.weight: must be above 0", "divides"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[serve]\nmin_batch_allocation=1.5", "serve.min_batch_allocation", "fraction"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[serve.eval]\natempts=2", "serve.eval.atempts: unknown key", `"serve.eval.attempts"`},
		// An unknown grant is refused, with the closest and every known one
		// (it used to be kept, and suggested back in the grants hint).
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\ngrants = ['sandbox.exec', 'sandbox.exce']", `x.toml:5: env.grants: unknown capability "sandbox.exce"`, `did you mean "sandbox.exec"? the host operations are sandbox.exec, sandbox.read_file,`},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\n[[reward]]\nplugin='j.wasm'\ngrants = ['model.compete']", `reward.grants: unknown capability "model.compete"`, `did you mean "model.complete"?`},
		{"[agent]\nkind='nop'\n[run]\nprestart = -1\n[env]\nplugin='x'", "x.toml:4: run.prestart", "0 turns"},
		{"[agent]\nkind='nop'\n[env]\nplugin='x'\ngrants = ['everything']", `unknown capability "everything"`, `the host operations are sandbox.exec`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.toml), "x.toml", nil)
		var ce *Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) || !strings.Contains(ce.Hint, c.hint) {
			t.Errorf("%q: got %v (hint %q), want %q / %q", c.toml, err, hintOf(err), c.want, c.hint)
		}
	}
}

func hintOf(err error) string {
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Hint
	}
	return ""
}

func TestSetOverrides(t *testing.T) {
	c, err := Parse([]byte("[agent]\nkind='nop'\n[env]\nplugin='x'\n[env.config]\na=1\n"), "/tmp/x.toml",
		[]string{"agent.max_turns=7", "env.config.tasks=[\"a\",\"b\"]", "run.name=hello world", "run.agent_timeout=90s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.TerminalTimeout != 180 {
		t.Errorf("terminal_timeout defaults to %d, want hermes' 180", c.Agent.TerminalTimeout)
	}
	if c.Agent.MaxTurns != 7 || c.Run.Name != "hello world" || c.Run.AgentTimeout.Seconds() != 90 || string(c.PluginConfig()) != `{"a":1,"tasks":["a","b"]}` {
		t.Fatalf("%+v %s", c, c.PluginConfig())
	}
	if _, err := Parse([]byte("[env]\nplugin='x'\n"), "x.toml", []string{"agent.max_turn=3"}); err == nil || !strings.Contains(hintOf(err), "agent.max_turns") {
		t.Fatalf("bad --set key: %v %q", err, hintOf(err))
	}
	if *c.Run.Prestart != c.Run.Concurrency {
		t.Errorf("prestart defaults to %d, want the concurrency (%d)", *c.Run.Prestart, c.Run.Concurrency)
	}
	wide, err := Parse([]byte("[run]\nconcurrency = 1000\n[agent]\nkind='nop'\n[env]\nplugin='x'\n"), "x.toml", nil)
	if err != nil || *wide.Run.Prestart != DefaultPrestartMax {
		t.Errorf("prestart at concurrency 1000: %v %v, want %d", err, wide.Run.Prestart, DefaultPrestartMax)
	}
	off, err := Parse([]byte("[run]\nprestart = 0\n[agent]\nkind='nop'\n[env]\nplugin='x'\n"), "x.toml", nil)
	if err != nil || *off.Run.Prestart != 0 {
		t.Errorf("prestart = 0: %v, want off", err)
	}
	res, _ := c.Resolved()
	if !strings.Contains(string(res), "max_turns = 7") {
		t.Fatalf("resolved:\n%s", res)
	}
}

// TestServeDefaults: [serve] takes Atropos' defaults, its name from the
// run, and [serve.eval] config lies over [env.config] key by key.
func TestServeDefaults(t *testing.T) {
	c, err := Parse([]byte("[run]\nconcurrency = 16\n[agent]\nkind='nop'\n[env]\nplugin='x'\n[env.config]\ndataset='d'\nsplit='train'\n[process]\ngroup_size = 4\nmax_tokens = 4096\n[serve]\neval_handling='limit_train'\n[serve.eval.config]\nsplit='test'\n"), "/tmp/rl.toml", []string{"serve.api=http://127.0.0.1:9000"})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Serve
	if s.API != "http://127.0.0.1:9000" || s.Name != "rl" || *s.Weight != 1 || s.MaxBatchesOffpolicy != 3 || s.MaxGroups != 4 ||
		s.MaxTokenLength != 4096 || s.EvalHandling != EvalLimitTrain || s.EvalLimitRatio != 0.5 || s.OnInterrupt != "drop" ||
		s.Eval.Attempts != 1 || s.Eval.Concurrency != 16 || s.MinBatchAllocation != nil {
		t.Fatalf("serve defaults: %+v", s)
	}
	if got := string(c.EvalConfig()); got != `{"dataset":"d","split":"test"}` {
		t.Errorf("eval config %s", got)
	}
	if got := string(c.PluginConfig()); got != `{"dataset":"d","split":"train"}` {
		t.Errorf("the eval's config leaked into env.config: %s", got)
	}
}

// TestNetworkDefault: a task that asks for the internet gets the backend's
// ordinary network unless the config says otherwise, as Harbor gives it.
func TestNetworkDefault(t *testing.T) {
	for _, tc := range []struct{ set, want string }{{"", NetworkAuto}, {"sandbox.network=none", "none"}, {"sandbox.network=host", "host"}, {"sandbox.network=auto", "auto"}} {
		var sets []string
		if tc.set != "" {
			sets = []string{tc.set}
		}
		c, err := Parse([]byte("[agent]\nkind='nop'\n[env]\nplugin='x'\n"), "x.toml", sets)
		if err != nil || c.Sandbox.Network != tc.want {
			t.Errorf("%q: %v %q", tc.set, err, c.Sandbox.Network)
		}
	}
}

func TestKubernetesSection(t *testing.T) {
	c, err := Parse([]byte(`[agent]
kind = "nop"
[env]
plugin = "x"
[sandbox]
backend = "kubernetes"
[sandbox.kubernetes]
namespace = "evals"
node_selector = { pool = "sandboxes" }
tolerations = [{ key = "dedicated", operator = "Equal", value = "proctor", effect = "NoSchedule", seconds = 30 }]
runtime_class = "gvisor"
image_pull_secrets = ["regcred"]
registry = "registry.example/proctor"
request_fraction = 0.25
schedule_timeout = "2m"
`), "k.toml", []string{"sandbox.kubernetes.qps=20"})
	if err != nil {
		t.Fatal(err)
	}
	k := c.Sandbox.Kubernetes
	if k == nil || k.Namespace != "evals" || k.NodeSelector["pool"] != "sandboxes" || len(k.Tolerations) != 1 || *k.Tolerations[0].Seconds != 30 ||
		k.RuntimeClass != "gvisor" || k.ImagePullSecrets[0] != "regcred" || k.QPS != 20 || k.RequestFraction != 0.25 || k.ScheduleTimeout.Minutes() != 2 {
		t.Fatalf("%+v", k)
	}
	res, err := c.Resolved()
	if err != nil || !strings.Contains(string(res), "[sandbox.kubernetes]") {
		t.Fatalf("resolved: %v\n%s", err, res)
	}
	// A config without the section hashes as before it existed: runs
	// made by earlier versions still resume.
	d, err := Parse([]byte("[agent]\nkind='nop'\n[env]\nplugin='x'\n"), "d.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := d.Resolved(); strings.Contains(string(res), "kubernetes") {
		t.Fatalf("the docker config mentions kubernetes:\n%s", res)
	}
	if b, _ := json.Marshal(d.Sandbox); strings.Contains(string(b), "kubernetes") {
		t.Fatalf("hashed config mentions kubernetes: %s", b)
	}
}

func FuzzParse(f *testing.F) {
	b, _ := os.ReadFile("../../examples/quickstart.toml")
	f.Add(b)
	f.Add([]byte("[run]\nconcurrency = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		Parse(data, "fuzz.toml", nil)
	})
}

// TestTerminalTimeoutOfTB2: a run of the tb2 plugin that sets no
// terminal_timeout gives terminal commands the 300 s of hermes-agent's
// Terminal-Bench 2 environment (environments/benchmarks/terminalbench_2/
// terminalbench2_env.py:218 at 475205e3), whatever path named the plugin;
// other plugins keep hermes' TERMINAL_TIMEOUT of 180 s, and a value the
// config sets stays.
func TestTerminalTimeoutOfTB2(t *testing.T) {
	for _, tc := range []struct {
		sets   []string
		plugin string
		want   int
	}{
		{nil, "tb2", 300},
		{[]string{"env.plugin=/build/tb2-copy.wasm"}, "tb2", 300},
		{[]string{"agent.terminal_timeout=120"}, "tb2", 120},
		{[]string{"agent.terminal_timeout=180"}, "tb2", 180},
		{nil, "swesmith", 180},
	} {
		c, err := Parse([]byte("[agent]\nkind='oracle'\n[env]\nplugin='tb2'\n"), "/tmp/t.toml", tc.sets)
		if err != nil {
			t.Fatal(err)
		}
		c.ForPlugin(tc.plugin)
		if c.Agent.TerminalTimeout != tc.want {
			t.Errorf("%v, plugin %s: terminal_timeout %d, want %d", tc.sets, tc.plugin, c.Agent.TerminalTimeout, tc.want)
		}
	}
}

// TestVerifierFailureKey: [run] verifier_failure is Harbor's outcome by
// default, or today's infra_error on request; anything else is refused.
func TestVerifierFailureKey(t *testing.T) {
	c, err := Parse([]byte("[agent]\nkind='oracle'\n[env]\nplugin='tb2'\n"), "/tmp/t.toml", nil)
	if err != nil || c.Run.VerifierFailure != VerifierOutcome {
		t.Fatalf("%v %q", err, c.Run.VerifierFailure)
	}
	_, err = Parse([]byte("[run]\nverifier_failure = 'retry'\n[agent]\nkind='oracle'\n[env]\nplugin='tb2'\n"), "/tmp/t.toml", nil)
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != "run.verifier_failure" || ce.Line != 2 {
		t.Fatalf("a bad verifier_failure: %v", err)
	}
}
