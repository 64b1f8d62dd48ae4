package export

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/proctor-dev/proctor/agent"
	"github.com/proctor-dev/proctor/host/rundir"
)

// ATIFVersion is the version of Harbor's Agent Trajectory Interchange
// Format (RFC 0001) that ATIF writes. In v1.7 session_id is run-scoped and
// optional, trajectory_id names the document, and a step may say how many
// model calls it represents (llm_call_count).
const ATIFVersion = "ATIF-v1.7"

// ATIFTrajectory is an ATIF document: one rollout.
type ATIFTrajectory struct {
	SchemaVersion string            `json:"schema_version"`
	SessionID     string            `json:"session_id,omitempty"`
	TrajectoryID  string            `json:"trajectory_id,omitempty"`
	Agent         ATIFAgent         `json:"agent"`
	Steps         []ATIFStep        `json:"steps"`
	Notes         string            `json:"notes,omitempty"`
	FinalMetrics  *ATIFFinalMetrics `json:"final_metrics,omitempty"`
	Extra         map[string]any    `json:"extra,omitempty"`
}

// ATIFAgent names the agent system.
type ATIFAgent struct {
	Name            string         `json:"name"`
	Version         string         `json:"version"`
	ModelName       string         `json:"model_name,omitempty"`
	ToolDefinitions []agent.Schema `json:"tool_definitions,omitempty"`
	Extra           map[string]any `json:"extra,omitempty"`
}

// ATIFStep is one system prompt, user message, or agent turn (the model's
// answer, its tool calls and their results).
type ATIFStep struct {
	StepID           int              `json:"step_id"`
	Source           string           `json:"source"` // system, user or agent
	ModelName        string           `json:"model_name,omitempty"`
	Message          string           `json:"message"`
	ReasoningContent string           `json:"reasoning_content,omitempty"`
	ToolCalls        []ATIFToolCall   `json:"tool_calls,omitempty"`
	Observation      *ATIFObservation `json:"observation,omitempty"`
	Metrics          *ATIFMetrics     `json:"metrics,omitempty"`
	LLMCallCount     int              `json:"llm_call_count,omitempty"`
	Extra            map[string]any   `json:"extra,omitempty"`
}

// ATIFToolCall is one function call; Arguments is always a JSON object.
type ATIFToolCall struct {
	ToolCallID   string          `json:"tool_call_id"`
	FunctionName string          `json:"function_name"`
	Arguments    json.RawMessage `json:"arguments"`
	Extra        map[string]any  `json:"extra,omitempty"`
}

// ATIFObservation holds the results of a step's tool calls.
type ATIFObservation struct {
	Results []ATIFObservationResult `json:"results"`
}

// ATIFObservationResult is one tool call's result.
type ATIFObservationResult struct {
	SourceCallID *string `json:"source_call_id"`
	Content      string  `json:"content"`
}

// ATIFMetrics are one model call's usage, token ids and logprobs.
type ATIFMetrics struct {
	PromptTokens       int64          `json:"prompt_tokens"`
	CompletionTokens   int64          `json:"completion_tokens"`
	CachedTokens       int64          `json:"cached_tokens"`
	PromptTokenIDs     []int          `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int          `json:"completion_token_ids,omitempty"`
	Logprobs           []float64      `json:"logprobs,omitempty"`
	Extra              map[string]any `json:"extra,omitempty"`
}

// ATIFFinalMetrics are the rollout's totals.
type ATIFFinalMetrics struct {
	TotalPromptTokens     int64          `json:"total_prompt_tokens"`
	TotalCompletionTokens int64          `json:"total_completion_tokens"`
	TotalCachedTokens     int64          `json:"total_cached_tokens"`
	TotalCostUSD          *float64       `json:"total_cost_usd,omitempty"`
	TotalSteps            int            `json:"total_steps"`
	Extra                 map[string]any `json:"extra,omitempty"`
}

// ATIFMeta is what ATIF needs beyond the rollout: the run (session) id
// and the agent system's name and version.
type ATIFMeta struct {
	RunID        string
	AgentName    string // default "proctor"
	AgentVersion string // default "dev"
}

// ATIF converts one rollout. Each model call is an agent step carrying its
// tool calls, their results as the observation, and its metrics (with token
// ids and logprobs when recorded); system and user messages are steps of
// their own. The rollout's outcome, reward and scores go in extra.
func ATIF(rec rundir.Record, tr *agent.Trajectory, meta ATIFMeta) ATIFTrajectory {
	if tr == nil {
		tr = &agent.Trajectory{}
	}
	if meta.AgentName == "" {
		meta.AgentName = "proctor"
	}
	if meta.AgentVersion == "" {
		meta.AgentVersion = "dev"
	}
	a := ATIFTrajectory{
		SchemaVersion: ATIFVersion,
		SessionID:     meta.RunID,
		TrajectoryID:  fmt.Sprintf("%s.try%d", rec.RolloutID, rec.Try),
		Agent: ATIFAgent{Name: meta.AgentName, Version: meta.AgentVersion, ModelName: tr.Model,
			ToolDefinitions: toolSchemas(tr.Tools), Extra: map[string]any{"agent": tr.Agent}},
	}
	// The i-th assistant message answers the i-th call that did not fail.
	// Prompts are expanded to whole prompts, as ATIF keeps them per step;
	// when they cannot be (a corrupt prompt_prefix), no step gets prompt
	// ids: a stored suffix written as a whole prompt would be wrong.
	var answered []agent.Turn
	prompts, perr := agent.FullPrompts(tr.Turns)
	for i, t := range tr.Turns {
		if len(t.Errors) == 0 {
			if perr == nil {
				t.PromptTokenIDs = prompts[i]
			} else {
				t.PromptTokenIDs = nil
			}
			t.PromptPrefix = 0
			answered = append(answered, t)
		}
	}
	var last *ATIFStep
	assistants := 0
	used := map[string]bool{}     // tool_call_ids written so far
	var callIDs map[string]string // the last agent step's: call id -> tool_call_id
	for _, m := range tr.Messages {
		switch m.Role {
		case "tool":
			if last == nil || last.Source != "agent" {
				continue // a result no call asked for: the loop never writes one
			}
			if last.Observation == nil {
				last.Observation = &ATIFObservation{}
			}
			var src *string
			if id, ok := callIDs[m.ToolCallID]; ok {
				src = &id
			}
			last.Observation.Results = append(last.Observation.Results, ATIFObservationResult{SourceCallID: src, Content: m.Content})
			continue
		case "assistant":
			s := ATIFStep{Source: "agent", ModelName: tr.Model, Message: m.Content, ReasoningContent: m.Reasoning, LLMCallCount: 1}
			// Endpoints may reuse call ids across turns (call_0 each
			// time); ATIF's are unique, so a reused id gets the turn's
			// number and the original goes in extra.
			callIDs = map[string]string{}
			for i, c := range m.ToolCalls {
				tc := ATIFToolCall{ToolCallID: c.ID, FunctionName: c.Function.Name, Arguments: objectArgs(c.Function.Arguments)}
				if tc.ToolCallID == "" || used[tc.ToolCallID] {
					tc.ToolCallID = fmt.Sprintf("turn%d_call%d", assistants, i)
					tc.Extra = map[string]any{"call_id": c.ID}
				}
				used[tc.ToolCallID] = true
				if _, dup := callIDs[c.ID]; !dup {
					callIDs[c.ID] = tc.ToolCallID
				}
				if string(tc.Arguments) == "{}" && !bytes.Equal(bytes.TrimSpace([]byte(c.Function.Arguments)), []byte("{}")) {
					if tc.Extra == nil {
						tc.Extra = map[string]any{}
					}
					tc.Extra["raw_arguments"] = c.Function.Arguments
				}
				s.ToolCalls = append(s.ToolCalls, tc)
			}
			if assistants < len(answered) {
				t := answered[assistants]
				s.Metrics = &ATIFMetrics{
					PromptTokens: t.Usage.PromptTokens, CompletionTokens: t.Usage.CompletionTokens, CachedTokens: t.Usage.CachedTokens,
					PromptTokenIDs: t.PromptTokenIDs, CompletionTokenIDs: t.CompletionTokenIDs,
					Extra: map[string]any{"model_secs": t.ModelSecs},
				}
				if len(t.CompletionLogprobs) == len(t.CompletionTokenIDs) || len(t.CompletionTokenIDs) == 0 {
					s.Metrics.Logprobs = t.CompletionLogprobs
				}
				if t.Usage.ReasoningTokens > 0 {
					s.Metrics.Extra["reasoning_tokens"] = t.Usage.ReasoningTokens
				}
			}
			assistants++
			a.Steps = append(a.Steps, s)
		case "system", "user":
			a.Steps = append(a.Steps, ATIFStep{Source: m.Role, Message: m.Content})
		default:
			a.Steps = append(a.Steps, ATIFStep{Source: "system", Message: m.Content, Extra: map[string]any{"role": m.Role}})
		}
		last = &a.Steps[len(a.Steps)-1]
	}
	for i := range a.Steps {
		a.Steps[i].StepID = i + 1
	}
	u := tr.Usage
	a.FinalMetrics = &ATIFFinalMetrics{TotalPromptTokens: u.PromptTokens, TotalCompletionTokens: u.CompletionTokens,
		TotalCachedTokens: u.CachedTokens, TotalSteps: len(a.Steps)}
	if rec.CostUSD > 0 {
		c := rec.CostUSD
		a.FinalMetrics.TotalCostUSD = &c
	}
	if u.ReasoningTokens > 0 {
		a.FinalMetrics.Extra = map[string]any{"total_reasoning_tokens": u.ReasoningTokens}
	}
	a.Notes = "stop reason: " + tr.StopReason
	if tr.Error != "" {
		a.Notes += "; error: " + tr.Error
	}
	a.Extra = map[string]any{"task_id": rec.TaskID, "rollout_id": rec.RolloutID, "attempt": rec.Attempt, "try": rec.Try,
		"outcome": rec.Outcome, "reward": rec.Reward, "stop_reason": tr.StopReason, "seed": rec.Seed}
	if len(rec.Scores) > 0 {
		a.Extra["scores"] = rec.Scores
	}
	if rec.ErrorClass != "" {
		a.Extra["error_class"] = rec.ErrorClass
	}
	return a
}

// objectArgs returns arguments as a JSON object: as written when they are
// one, else {} (the caller keeps the raw text in extra).
func objectArgs(s string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &obj) != nil || obj == nil {
		return json.RawMessage("{}")
	}
	var buf bytes.Buffer
	if json.Compact(&buf, []byte(s)) != nil {
		return json.RawMessage("{}")
	}
	return buf.Bytes()
}
