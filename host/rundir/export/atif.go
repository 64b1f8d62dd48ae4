package export

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
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
	Name            string              `json:"name"`
	Version         string              `json:"version"`
	ModelName       string              `json:"model_name,omitempty"`
	ToolDefinitions []trajectory.Schema `json:"tool_definitions,omitempty"`
	Extra           map[string]any      `json:"extra,omitempty"`
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
func ATIF(rec rundir.Record, tr *trajectory.Trajectory, meta ATIFMeta) ATIFTrajectory {
	if tr == nil {
		tr = &trajectory.Trajectory{}
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
			ToolDefinitions: schemasOf(tr), Extra: map[string]any{"agent": tr.Agent}},
	}
	a.Steps = atifSteps(tr)
	a.FinalMetrics = finalMetrics(rec, tr, len(a.Steps))
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

// stepper turns a trajectory's messages into ATIF steps, in order.
type stepper struct {
	model      string
	answered   []trajectory.Turn // the turns whose call did not fail, in order
	steps      []ATIFStep
	assistants int               // assistant messages so far
	used       map[string]bool   // tool_call_ids written so far
	callIDs    map[string]string // the last agent step's: call id -> tool_call_id
}

// atifSteps are the steps of tr, numbered from 1.
func atifSteps(tr *trajectory.Trajectory) []ATIFStep {
	st := &stepper{model: tr.Model, answered: answeredTurns(tr.Turns), used: map[string]bool{}}
	for _, m := range tr.Messages {
		switch m.Role {
		case "tool":
			st.result(m)
		case "assistant":
			st.assistant(m)
		case "system", "user":
			st.steps = append(st.steps, ATIFStep{Source: m.Role, Message: m.Content})
		default:
			st.steps = append(st.steps, ATIFStep{Source: "system", Message: m.Content, Extra: map[string]any{"role": m.Role}})
		}
	}
	for i := range st.steps {
		st.steps[i].StepID = i + 1
	}
	return st.steps
}

// answeredTurns are the turns whose call did not fail and whose reply the
// agent kept: the i-th assistant message answers the i-th of them. Prompts are expanded to whole prompts,
// as ATIF keeps them per step; when they cannot be (a corrupt
// prompt_prefix), no step gets prompt ids: a stored suffix written as a
// whole prompt would be wrong.
func answeredTurns(turns []trajectory.Turn) []trajectory.Turn {
	var answered []trajectory.Turn
	prompts, perr := trajectory.FullPrompts(turns)
	for i, t := range turns {
		if len(t.Errors) == 0 && t.Rejected == nil {
			if perr == nil {
				t.PromptTokenIDs = prompts[i]
			} else {
				t.PromptTokenIDs = nil
			}
			t.PromptPrefix = 0
			answered = append(answered, t)
		}
	}
	return answered
}

// result adds a tool result to the observation of the agent step before.
func (st *stepper) result(m trajectory.Message) {
	if len(st.steps) == 0 || st.steps[len(st.steps)-1].Source != "agent" {
		return // a result no call asked for: the loop never writes one
	}
	last := &st.steps[len(st.steps)-1]
	if last.Observation == nil {
		last.Observation = &ATIFObservation{}
	}
	var src *string
	if id, ok := st.callIDs[m.ToolCallID]; ok {
		src = &id
	}
	last.Observation.Results = append(last.Observation.Results, ATIFObservationResult{SourceCallID: src, Content: m.Content})
}

// assistant adds an agent step: the message, its tool calls and the
// metrics of the call that answered.
func (st *stepper) assistant(m trajectory.Message) {
	s := ATIFStep{Source: "agent", ModelName: st.model, Message: m.Content, ReasoningContent: m.Reasoning, LLMCallCount: 1}
	s.ToolCalls = st.toolCalls(m.ToolCalls)
	if st.assistants < len(st.answered) {
		s.Metrics = stepMetrics(st.answered[st.assistants])
	}
	st.assistants++
	st.steps = append(st.steps, s)
}

// toolCalls converts one message's calls. Endpoints may reuse call ids
// across turns (call_0 each time); ATIF's are unique, so a reused id gets
// the turn's number and the original goes in extra.
func (st *stepper) toolCalls(calls []trajectory.ToolCall) []ATIFToolCall {
	var out []ATIFToolCall
	st.callIDs = map[string]string{}
	for i, c := range calls {
		tc := ATIFToolCall{ToolCallID: c.ID, FunctionName: c.Function.Name, Arguments: objectArgs(c.Function.Arguments)}
		if tc.ToolCallID == "" || st.used[tc.ToolCallID] {
			tc.ToolCallID = fmt.Sprintf("turn%d_call%d", st.assistants, i)
			tc.Extra = map[string]any{"call_id": c.ID}
		}
		st.used[tc.ToolCallID] = true
		if _, dup := st.callIDs[c.ID]; !dup {
			st.callIDs[c.ID] = tc.ToolCallID
		}
		if string(tc.Arguments) == "{}" && !bytes.Equal(bytes.TrimSpace([]byte(c.Function.Arguments)), []byte("{}")) {
			if tc.Extra == nil {
				tc.Extra = map[string]any{}
			}
			tc.Extra["raw_arguments"] = c.Function.Arguments
		}
		out = append(out, tc)
	}
	return out
}

// stepMetrics are one call's usage, token ids and logprobs.
func stepMetrics(t trajectory.Turn) *ATIFMetrics {
	m := &ATIFMetrics{
		PromptTokens: t.Usage.PromptTokens, CompletionTokens: t.Usage.CompletionTokens, CachedTokens: t.Usage.CachedTokens,
		PromptTokenIDs: t.PromptTokenIDs, CompletionTokenIDs: t.CompletionTokenIDs,
		Extra: map[string]any{"model_secs": t.ModelSecs},
	}
	if len(t.CompletionLogprobs) == len(t.CompletionTokenIDs) || len(t.CompletionTokenIDs) == 0 {
		m.Logprobs = t.CompletionLogprobs
	}
	if t.Usage.ReasoningTokens > 0 {
		m.Extra["reasoning_tokens"] = t.Usage.ReasoningTokens
	}
	return m
}

// finalMetrics are the rollout's totals.
func finalMetrics(rec rundir.Record, tr *trajectory.Trajectory, steps int) *ATIFFinalMetrics {
	u := tr.Usage
	f := &ATIFFinalMetrics{TotalPromptTokens: u.PromptTokens, TotalCompletionTokens: u.CompletionTokens,
		TotalCachedTokens: u.CachedTokens, TotalSteps: steps}
	if rec.CostUSD > 0 {
		c := rec.CostUSD
		f.TotalCostUSD = &c
	}
	if u.ReasoningTokens > 0 {
		f.Extra = map[string]any{"total_reasoning_tokens": u.ReasoningTokens}
	}
	return f
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
