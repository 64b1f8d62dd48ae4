package serve

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/host/rundir/export"
	"github.com/proctor-dev/proctor/host/serve/atropos"
)

// dropNoTokens: the group passed the filters but its rollouts lack exact
// token ids, so it is no ScoredDataGroup: the API requires tokens and
// masks.
const dropNoTokens = "no_tokens"

// built is a whole group made ready for the API: the group to post, or
// why it is not posted.
type built struct {
	k        key
	group    *atropos.Group // nil when dropped
	entry    entry          // its index line, state to be set
	scoredAt time.Time
}

// build makes the group of a task's epoch from its records, as proctor
// process does (export.Group, the same filters), with the trainer's
// max_token_len as a further length limit (base.py handle_send_to_api
// drops a group with a sequence of len >= max_token_len).
func (s *Serve) build(k key, rs []recorded) (built, error) {
	slices.SortFunc(rs, func(a, b recorded) int { return cmp.Compare(a.rec.Attempt, b.rec.Attempt) })
	recs := make([]rundir.Record, len(rs))
	b := built{k: k}
	for i, r := range rs {
		recs[i] = r.rec
		if r.at.After(b.scoredAt) {
			b.scoredAt = r.at
		}
	}
	trajs, err := export.ReadGroup(s.dir, recs)
	if err != nil {
		return b, err
	}
	g, info, err := export.Group(recs, trajs, s.filter())
	if err != nil {
		return b, err
	}
	b.entry = entry{TaskID: k.task, Epoch: k.epoch, GroupSize: s.size, Rollouts: info.Rollouts, Scores: g.Scores,
		Skipped: info.Skipped, ScoredAt: b.scoredAt.UTC()}
	switch {
	case !info.Kept:
		b.entry.State, b.entry.Dropped = stateDropped, info.Dropped
	case !info.Tokens:
		b.entry.State, b.entry.Dropped, b.entry.Reason = stateDropped, dropNoTokens, info.NoTokens
	default:
		ag := &atropos.Group{Tokens: g.Tokens, Masks: g.Masks, Scores: g.Scores, Advantages: g.Advantages,
			RefLogprobs: g.RefLogprobs, GenerationParams: g.GenerationParams, InferenceLogprobs: g.InferenceLogprobs,
			Overrides: g.Overrides, GroupOverrides: g.GroupOverrides, Images: g.Images}
		if s.cfg.Serve.IncludeMessages {
			ag.Messages = g.Messages
		}
		b.group = ag
	}
	return b, nil
}

// unsendable says why a dropped group, and every group of the run like
// it, cannot be sent, and what to set; "" for drops that depend on the
// group (the filters, rollouts that failed).
func (s *Serve) unsendable(b built) string {
	e := b.entry
	switch {
	case e.Dropped == dropNoTokens:
		return fmt.Sprintf("group %s has no exact token ids (%s): groups without them are not sent; set [model] return_tokens = true with an endpoint that returns token ids", b.k, e.Reason)
	case e.Dropped != export.DropEmpty || e.Skipped[export.SkipNoModelTurn] == 0:
		return ""
	}
	// Oracle and nop rollouts hold no turn a model generated: no tokens
	// and masks (which a ScoredData requires), nothing the policy wrote
	// to learn from.
	return fmt.Sprintf("group %s has no rollout a model generated (agent.kind = %q; %s): no group of this run can be sent to the trainer; serve with agent.kind = \"llm\" and [model] return_tokens = true",
		b.k, s.cfg.Agent.Kind, skippedText(e.Skipped))
}

// skippedText is "2 no_model_turn, 1 infra_error".
func skippedText(m map[string]int) string {
	var parts []string
	for _, why := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%d %s", m[why], why))
	}
	return strings.Join(parts, ", ")
}

// filter is [process]'s filter, its max_tokens lowered to the trainer's
// max_token_len when that is smaller.
func (s *Serve) filter() export.Filter {
	p := s.cfg.Process
	f := export.Filter{MinReward: p.MinReward, DropEqualScores: p.DropEqualScores, MaxTokens: p.MaxTokens}
	s.mu.Lock()
	m := s.info.MaxTokenLen
	s.mu.Unlock()
	if m > 0 && (f.MaxTokens <= 0 || m < f.MaxTokens) {
		f.MaxTokens = m
	}
	return f
}

// same reports whether the API's group a is ours, b: the same
// sequences, masks and scores.
func same(a, b *atropos.Group) bool {
	if a == nil || b == nil || !slices.Equal(a.Scores, b.Scores) || len(a.Tokens) != len(b.Tokens) || len(a.Masks) != len(b.Masks) {
		return false
	}
	for i := range a.Tokens {
		if !slices.Equal(a.Tokens[i], b.Tokens[i]) {
			return false
		}
	}
	for i := range a.Masks {
		if !slices.Equal(a.Masks[i], b.Masks[i]) {
			return false
		}
	}
	return true
}
