package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/agent/openai"
	"github.com/proctor-dev/proctor/trajectory"
)

// The ATIF v1.7 schema (Harbor RFC 0001, "ATIF-v1.7"), as its required
// fields, types and rules: every object rejects fields the schema does not
// name; step_id runs 1, 2, ...; source is system, user or agent; model_name,
// reasoning_effort, reasoning_content, tool_calls and metrics belong to
// agent steps only; tool_call_id is unique and an observation result's
// source_call_id names a tool call of its own step (or is null).
type field struct {
	kind     string // string, int, number, bool, object, array, any
	required bool
	check    func(path string, v any) []string
}

var (
	atifRoot = map[string]field{
		// The versions Harbor's Trajectory model accepts: ATIF-v1.0 to v1.7.
		"schema_version":           {kind: "string", required: true, check: matches(`^ATIF-v1\.[0-7]$`)},
		"session_id":               {kind: "string"}, // optional since v1.7
		"trajectory_id":            {kind: "string"},
		"agent":                    {kind: "object", required: true, check: object(atifAgent)},
		"steps":                    {kind: "array", required: true, check: checkSteps},
		"notes":                    {kind: "string"},
		"final_metrics":            {kind: "object", check: object(atifFinalMetrics)},
		"continued_trajectory_ref": {kind: "string"},
		"subagent_trajectories":    {kind: "array"},
		"extra":                    {kind: "object"},
	}
	atifAgent = map[string]field{
		"name":             {kind: "string", required: true},
		"version":          {kind: "string", required: true},
		"model_name":       {kind: "string"},
		"tool_definitions": {kind: "array"},
		"extra":            {kind: "object"},
	}
	atifStep = map[string]field{
		"step_id":           {kind: "int", required: true},
		"timestamp":         {kind: "string", check: matches(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}`)},
		"source":            {kind: "string", required: true, check: matches(`^(system|user|agent)$`)},
		"model_name":        {kind: "string"},
		"reasoning_effort":  {kind: "any"},
		"message":           {kind: "any", required: true, check: stringOrParts},
		"reasoning_content": {kind: "string"},
		"tool_calls":        {kind: "array", check: each(object(atifToolCall))},
		"observation":       {kind: "object", check: object(atifObservation)},
		"metrics":           {kind: "object", check: object(atifMetrics)},
		"llm_call_count":    {kind: "int"},
		"is_copied_context": {kind: "bool"},
		"extra":             {kind: "object"},
	}
	atifToolCall = map[string]field{
		"tool_call_id":  {kind: "string", required: true},
		"function_name": {kind: "string", required: true},
		"arguments":     {kind: "object", required: true},
		"extra":         {kind: "object"},
	}
	atifObservation = map[string]field{
		"results": {kind: "array", required: true, check: each(object(atifResult))},
	}
	atifResult = map[string]field{
		"source_call_id":          {kind: "any", check: stringOrNull},
		"content":                 {kind: "any", check: stringOrParts},
		"subagent_trajectory_ref": {kind: "array"},
		"extra":                   {kind: "object"},
	}
	atifMetrics = map[string]field{
		"prompt_tokens":        {kind: "int"},
		"completion_tokens":    {kind: "int"},
		"cached_tokens":        {kind: "int"},
		"cost_usd":             {kind: "number"},
		"prompt_token_ids":     {kind: "array", check: each(kind("int"))},
		"completion_token_ids": {kind: "array", check: each(kind("int"))},
		"logprobs":             {kind: "array", check: each(kind("number"))},
		"extra":                {kind: "object"},
	}
	atifFinalMetrics = map[string]field{
		"total_prompt_tokens":     {kind: "int"},
		"total_completion_tokens": {kind: "int"},
		"total_cached_tokens":     {kind: "int"},
		"total_cost_usd":          {kind: "number"},
		"total_steps":             {kind: "int"},
		"extra":                   {kind: "object"},
	}
	agentOnly = []string{"model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"}
)

func isKind(k string, v any) bool {
	switch k {
	case "any":
		return true
	case "string":
		_, ok := v.(string)
		return ok
	case "bool":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "int":
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil
	}
	return false
}

func kind(k string) func(string, any) []string {
	return func(path string, v any) []string {
		if !isKind(k, v) {
			return []string{fmt.Sprintf("%s: want %s, got %v", path, k, v)}
		}
		return nil
	}
}

func object(schema map[string]field) func(string, any) []string {
	return func(path string, v any) []string {
		obj, ok := v.(map[string]any)
		if !ok {
			return []string{path + ": want an object"}
		}
		var errs []string
		for name, f := range schema {
			fv, present := obj[name]
			if !present {
				if f.required {
					errs = append(errs, path+"."+name+": missing")
				}
				continue
			}
			if !isKind(f.kind, fv) {
				errs = append(errs, fmt.Sprintf("%s.%s: want %s, got %v", path, name, f.kind, fv))
				continue
			}
			if f.check != nil {
				errs = append(errs, f.check(path+"."+name, fv)...)
			}
		}
		for name := range obj {
			if _, ok := schema[name]; !ok {
				errs = append(errs, path+"."+name+": not in the schema")
			}
		}
		return errs
	}
}

func each(check func(string, any) []string) func(string, any) []string {
	return func(path string, v any) []string {
		var errs []string
		for i, e := range v.([]any) {
			errs = append(errs, check(fmt.Sprintf("%s.%d", path, i), e)...)
		}
		return errs
	}
}

func matches(re string) func(string, any) []string {
	r := regexp.MustCompile(re)
	return func(path string, v any) []string {
		if !r.MatchString(v.(string)) {
			return []string{fmt.Sprintf("%s: %q does not match %s", path, v, re)}
		}
		return nil
	}
}

func stringOrParts(path string, v any) []string {
	if isKind("string", v) || isKind("array", v) {
		return nil
	}
	return []string{path + ": want a string or content parts"}
}

func stringOrNull(path string, v any) []string {
	if v == nil || isKind("string", v) {
		return nil
	}
	return []string{path + ": want a string or null"}
}

func checkSteps(path string, v any) []string {
	steps := v.([]any)
	if len(steps) == 0 {
		return []string{path + ": no steps"}
	}
	var errs []string
	callIDs := map[string]bool{}
	for i, sv := range steps {
		p := fmt.Sprintf("%s.%d", path, i)
		errs = append(errs, object(atifStep)(p, sv)...)
		s, ok := sv.(map[string]any)
		if !ok {
			continue
		}
		if n, ok := s["step_id"].(json.Number); !ok || n.String() != fmt.Sprint(i+1) {
			errs = append(errs, fmt.Sprintf("%s.step_id: expected %d (sequential from 1), got %v", p, i+1, s["step_id"]))
		}
		if s["source"] != "agent" {
			for _, f := range agentOnly {
				if _, ok := s[f]; ok {
					errs = append(errs, p+"."+f+": agent-only field on a "+fmt.Sprint(s["source"])+" step")
				}
			}
		}
		mine := map[string]bool{}
		calls, _ := s["tool_calls"].([]any)
		for _, c := range calls {
			id, _ := c.(map[string]any)["tool_call_id"].(string)
			if callIDs[id] {
				errs = append(errs, p+": duplicate tool_call_id "+id)
			}
			callIDs[id], mine[id] = true, true
		}
		if obs, ok := s["observation"].(map[string]any); ok {
			res, _ := obs["results"].([]any)
			for j, r := range res {
				if id, ok := r.(map[string]any)["source_call_id"].(string); ok && !mine[id] {
					errs = append(errs, fmt.Sprintf("%s.observation.results.%d.source_call_id: unknown tool_call_id %s", p, j, id))
				}
			}
		}
	}
	return errs
}

// validateATIF checks a document against the v1.7 rules above; the
// version must be one Harbor accepts (ATIF-v1.0 to ATIF-v1.7).
func validateATIF(doc []byte) []string {
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return []string{err.Error()}
	}
	errs := object(atifRoot)("trajectory", v)
	if m, ok := v.(map[string]any); ok {
		fm, _ := m["final_metrics"].(map[string]any)
		steps, _ := m["steps"].([]any)
		if n, ok := fm["total_steps"].(json.Number); ok && n.String() != fmt.Sprint(len(steps)) {
			errs = append(errs, "trajectory.final_metrics.total_steps: not the number of steps")
		}
	}
	slices.Sort(errs)
	return errs
}

func TestATIFValidatesAgainstV17(t *testing.T) {
	withTokens := rollout(t, openai.Config{ReturnTokens: true}, false)
	bad := synth(2, 2, 2)
	bad.Messages[1].ToolCalls[0].Function.Arguments = `{"command": "ls` // invalid JSON: kept in extra
	bad.Messages[1].ToolCalls = append(bad.Messages[1].ToolCalls, bad.Messages[1].ToolCalls[0])
	for name, tr := range map[string]*trajectory.Trajectory{"loop with tokens": withTokens, "synthetic": synth(4, 3, 2), "bad arguments": bad} {
		r := rec("t", 0, 1)
		r.CostUSD = 0.25
		doc, err := json.Marshal(ATIF(r, tr, ATIFMeta{RunID: "run-1", AgentVersion: "1.2.3"}))
		if err != nil {
			t.Fatal(err)
		}
		if errs := validateATIF(doc); len(errs) > 0 {
			t.Errorf("%s:\n%s\n%s", name, strings.Join(errs, "\n"), doc)
		}
	}

	a := ATIF(rec("t", 0, 1), withTokens, ATIFMeta{RunID: "run-1"})
	if a.SchemaVersion != "ATIF-v1.7" || a.SessionID != "run-1" || a.TrajectoryID != "t#0.try0" || a.Agent.ModelName != "scripted" || len(a.Agent.ToolDefinitions) != 6 {
		t.Errorf("root: %+v", a)
	}
	// system, user, then one agent step per model call.
	var sources []string
	for _, s := range a.Steps {
		sources = append(sources, s.Source)
	}
	if strings.Join(sources, ",") != "system,user,agent,agent,agent,agent" {
		t.Fatalf("sources %v", sources)
	}
	third := a.Steps[4]
	if len(third.ToolCalls) != 2 || third.Observation == nil || len(third.Observation.Results) != 2 || *third.Observation.Results[1].SourceCallID != third.ToolCalls[1].ToolCallID {
		t.Fatalf("third turn: %+v", third)
	}
	if string(third.ToolCalls[0].Arguments) != `{"command":"ls"}` || third.ReasoningContent == "" {
		t.Errorf("arguments %s reasoning %q", third.ToolCalls[0].Arguments, third.ReasoningContent)
	}
	prompts, err := trajectory.FullPrompts(withTokens.Turns)
	if err != nil {
		t.Fatal(err)
	}
	if withTokens.Turns[1].PromptPrefix == 0 {
		t.Error("the loop did not share the second prompt's prefix")
	}
	for i, s := range a.Steps[2:] {
		turn := withTokens.Turns[i]
		m := s.Metrics
		if m == nil || !slices.Equal(m.PromptTokenIDs, prompts[i]) || !slices.Equal(m.CompletionTokenIDs, turn.CompletionTokenIDs) ||
			len(m.Logprobs) != len(m.CompletionTokenIDs) || m.PromptTokens != int64(len(prompts[i])) {
			t.Errorf("step %d metrics %+v", s.StepID, m)
		}
	}
	if a.FinalMetrics.TotalSteps != 6 || a.FinalMetrics.TotalPromptTokens != withTokens.Usage.PromptTokens || a.Extra["reward"] != 1.0 {
		t.Errorf("final %+v extra %v", a.FinalMetrics, a.Extra)
	}
}

// TestATIFCorruptPromptPrefix: when a transcript's shared prompt prefixes
// cannot be expanded, no step claims prompt ids (a stored suffix is not a
// prompt); completion ids and logprobs stay.
func TestATIFCorruptPromptPrefix(t *testing.T) {
	tr := synth(3, 2, 2)
	// Store turn 1's prompt as turn 0's prompt and completion plus a suffix,
	// as the loop does, then corrupt turn 2's prefix length.
	tr.Turns[1].PromptPrefix, tr.Turns[1].PromptTokenIDs = 4, tr.Turns[1].PromptTokenIDs[4:]
	tr.Turns[2].PromptPrefix, tr.Turns[2].PromptTokenIDs = 99, tr.Turns[2].PromptTokenIDs[8:]
	if _, err := trajectory.FullPrompts(tr.Turns); err == nil {
		t.Fatal("the prefix is not corrupt")
	}
	a := ATIF(rec("t", 0, 1), tr, ATIFMeta{})
	steps := 0
	for _, s := range a.Steps {
		if s.Metrics == nil {
			continue
		}
		steps++
		if s.Metrics.PromptTokenIDs != nil {
			t.Errorf("step %d has prompt ids %v from a transcript whose prompts cannot be expanded", s.StepID, s.Metrics.PromptTokenIDs)
		}
		if len(s.Metrics.CompletionTokenIDs) != 2 || len(s.Metrics.Logprobs) != 2 {
			t.Errorf("step %d lost its completion: %+v", s.StepID, s.Metrics)
		}
	}
	if steps != 3 {
		t.Fatalf("%d steps with metrics, want 3", steps)
	}
}

// TestATIFValidatorRejects keeps the validator honest: each mutation
// breaks one rule and must be reported.
func TestATIFValidatorRejects(t *testing.T) {
	base, _ := json.Marshal(ATIF(rec("t", 0, 1), synth(2, 2, 2), ATIFMeta{}))
	mutations := map[string]func(m map[string]any){
		"no agent name":       func(m map[string]any) { delete(m["agent"].(map[string]any), "name") },
		"no steps":            func(m map[string]any) { m["steps"] = []any{} },
		"step_id from 0":      func(m map[string]any) { step(m, 0)["step_id"] = 0 },
		"bad source":          func(m map[string]any) { step(m, 0)["source"] = "assistant" },
		"metrics on a user":   func(m map[string]any) { step(m, 0)["metrics"] = map[string]any{} },
		"no message":          func(m map[string]any) { delete(step(m, 1), "message") },
		"unknown field":       func(m map[string]any) { step(m, 1)["role"] = "assistant" },
		"arguments as string": func(m map[string]any) { call(m)["arguments"] = "{}" },
		"dangling result": func(m map[string]any) {
			step(m, 1)["observation"].(map[string]any)["results"].([]any)[0].(map[string]any)["source_call_id"] = "nope"
		},
		"bad version":    func(m map[string]any) { m["schema_version"] = "1.7" },
		"future version": func(m map[string]any) { m["schema_version"] = "ATIF-v1.8" },
		"v1.10":          func(m map[string]any) { m["schema_version"] = "ATIF-v1.10" },
		"float token id": func(m map[string]any) { step(m, 1)["metrics"].(map[string]any)["prompt_token_ids"] = []any{1.5} },
	}
	for name, mutate := range mutations {
		var m map[string]any
		json.Unmarshal(base, &m)
		mutate(m)
		doc, _ := json.Marshal(m)
		if errs := validateATIF(doc); len(errs) == 0 {
			t.Errorf("%s: not rejected", name)
		}
	}
}

func step(m map[string]any, i int) map[string]any { return m["steps"].([]any)[i].(map[string]any) }
func call(m map[string]any) map[string]any {
	return step(m, 1)["tool_calls"].([]any)[0].(map[string]any)
}
