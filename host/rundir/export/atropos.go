package export

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// ScoredDataGroup is one line of an Atropos groups file: the rollouts of
// one task, their token sequences and scores. The fields and their
// conventions are Atropos's (atroposlib/envs/base.py ScoredDataGroup):
// masks hold -100 where the model did not generate the token, and
// inference_logprobs hold 1.0 there. Fields proctor does not know are
// written as null.
//
// The sampling fields are what Atropos's trainer reads
// (example_trainer/data.py: a rollout's temperature is
// overrides[i]["temperature"], else generation_params["temperature"],
// else group_overrides["temperature"], else 1.0): Overrides holds each
// rollout's recorded temperature, GenerationParams the temperature and
// max_tokens when every rollout shares them. GroupOverrides is never null
// (Atropos's handle_send_to_api calls .get on it) and holds group_size,
// the number of rollouts in the group, which may be fewer than
// [process] group_size when rollouts were left out.
//
// Atropos requires tokens and masks (atroposlib/api/server.py ScoredData),
// so a group without exact token sequences is not a ScoredDataGroup: Group
// then leaves Tokens and Masks nil, and the caller writes MessagesOnly(),
// the embedded MessagesGroup, to a file of its own (MessagesPath).
type ScoredDataGroup struct {
	Tokens [][]int `json:"tokens"`
	Masks  [][]int `json:"masks"`
	MessagesGroup
	InferenceLogprobs [][]float64 `json:"inference_logprobs"`
}

// MessagesGroup is a group without exact token sequences: the fields of a
// ScoredDataGroup but tokens, masks and inference_logprobs. It keeps the
// rollouts' messages and scores together, for a trainer that tokenizes
// them itself; it is never written where ScoredDataGroups are.
type MessagesGroup struct {
	Scores           []float64              `json:"scores"`
	Advantages       [][]float64            `json:"advantages"`
	RefLogprobs      [][]float64            `json:"ref_logprobs"`
	Messages         [][]trajectory.Message `json:"messages"`
	GenerationParams map[string]any         `json:"generation_params"`
	GroupOverrides   map[string]any         `json:"group_overrides"`
	Overrides        []map[string]any       `json:"overrides"`
	Images           any                    `json:"images"`
}

// MessagesOnly is the group without its token fields.
func (g ScoredDataGroup) MessagesOnly() MessagesGroup { return g.MessagesGroup }

// MessagesPath is where the messages-only groups of the groups file path
// go: its name without the extension, then ".messages.jsonl"
// (groups.jsonl: groups.messages.jsonl).
func MessagesPath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".messages.jsonl"
}

// Why a group is not written.
const (
	DropEmpty       = "empty"        // no rollout can be exported
	DropMinReward   = "min_reward"   // the best reward is below Filter.MinReward
	DropEqualScores = "equal_scores" // every rollout scored the same
	DropMaxTokens   = "max_tokens"   // a rollout has Filter.MaxTokens tokens or more
)

// GroupInfo says what Group made of a task's rollouts, for logs and
// manifests.
type GroupInfo struct {
	TaskID   string
	Rollouts int            // rollouts in the group
	Skipped  map[string]int // rollouts left out, by Skip reason
	Kept     bool           // the group passed the filter
	Dropped  string         // why not, one of the Drop constants
	// Tokens: tokens and masks are in the group, a valid
	// ScoredDataGroup. Without them, write the group's MessagesOnly().
	Tokens   bool
	Logprobs bool // inference_logprobs are in the group
	// NoTokens says why tokens and masks are missing: "no token ids
	// recorded" when no rollout has any, else which rollout (and turn)
	// has none or broke the sequence. NoTokensClass is its class, one of
	// the NoTokens constants, for counting.
	NoTokens      string
	NoTokensClass string
}

// Group builds the scored data group of one task from the records of its
// attempts and their trajectories (same order, nil for a missing
// transcript). Rollouts that cannot be training data (SkipTraining: an
// infra_error, no model answer, a stacked reward that failed) are left out
// and counted in GroupInfo.Skipped. When the group's rollouts do not all
// have token sequences, GroupInfo.Tokens is false and NoTokens says why:
// the group has no tokens or masks and only its MessagesOnly() may be
// written. The error is for arguments that do not fit together.
func Group(recs []rundir.Record, trajs []*trajectory.Trajectory, f Filter) (ScoredDataGroup, GroupInfo, error) {
	var info GroupInfo
	if len(recs) != len(trajs) {
		return ScoredDataGroup{}, info, fmt.Errorf("group: %d records but %d trajectories", len(recs), len(trajs))
	}
	var g ScoredDataGroup
	var kept []*trajectory.Trajectory
	var ids []string
	for i, r := range recs {
		if info.TaskID == "" {
			info.TaskID = r.TaskID
		} else if r.TaskID != info.TaskID {
			return ScoredDataGroup{}, info, fmt.Errorf("group: records of tasks %s and %s", info.TaskID, r.TaskID)
		}
		if why := SkipTraining(r, trajs[i]); why != "" {
			if info.Skipped == nil {
				info.Skipped = map[string]int{}
			}
			info.Skipped[why]++
			continue
		}
		kept = append(kept, trajs[i])
		ids = append(ids, r.RolloutID)
		g.Scores = append(g.Scores, r.Reward)
		g.Messages = append(g.Messages, trajs[i].Messages)
	}
	info.Rollouts = len(kept)
	if len(kept) == 0 {
		info.Dropped = DropEmpty
		return g, info, nil
	}
	g.GroupOverrides = map[string]any{"group_size": len(kept)}
	g.GenerationParams, g.Overrides = sampling(kept)

	seqs := make([]Sequence, len(kept))
	logprobs, withIDs := true, 0
	var first error // the first rollout's reason for having no sequence
	firstAt := 0
	for i, tr := range kept {
		s, err := Tokens(tr)
		if !errors.Is(err, ErrNoTokens) {
			withIDs++
		}
		if err != nil {
			if first == nil {
				first, firstAt = err, i
			}
			continue
		}
		seqs[i] = s
		logprobs = logprobs && s.Logprobs != nil
	}
	tokens := first == nil
	info.NoTokensClass = NoTokensClass(first)
	switch {
	case tokens:
	case withIDs == 0:
		info.NoTokens = ErrNoTokens.Error() // of every rollout: nothing to name
	case errors.Is(first, ErrNoTokens):
		info.NoTokens = fmt.Sprintf("rollout %s: %v, while other rollouts of the group have them", ids[firstAt], first)
	default:
		info.NoTokens = fmt.Sprintf("rollout %s: %v", ids[firstAt], first)
	}

	best, equal := g.Scores[0], true
	for _, s := range g.Scores {
		best = max(best, s)
		equal = equal && s == g.Scores[0]
	}
	switch {
	case f.MinReward != nil && best < *f.MinReward:
		info.Dropped = DropMinReward
	case f.DropEqualScores && equal:
		info.Dropped = DropEqualScores
	case f.MaxTokens > 0:
		for i, tr := range kept {
			if length(tr, seqs[i], tokens) >= f.MaxTokens {
				info.Dropped = DropMaxTokens
				break
			}
		}
	}
	info.Kept = info.Dropped == ""

	if tokens {
		info.Tokens = true
		for _, s := range seqs {
			g.Tokens = append(g.Tokens, s.Tokens)
			g.Masks = append(g.Masks, s.Masks)
		}
		if logprobs {
			info.Logprobs = true
			for _, s := range seqs {
				g.InferenceLogprobs = append(g.InferenceLogprobs, s.Logprobs)
			}
		}
	}
	return g, info, nil
}

// sampling gives a group's generation_params and overrides from its
// rollouts' recorded sampling: overrides[i] = {"temperature": t} for each
// rollout (an empty object when its temperature is unknown), and
// generation_params the temperature and max_tokens every rollout shares.
// Both are nil when nothing is known (older transcripts, the replay agent).
func sampling(kept []*trajectory.Trajectory) (map[string]any, []map[string]any) {
	var overrides []map[string]any
	var temp *float64
	sameTemp, maxTokens, sameMax := true, 0, true
	for i, tr := range kept {
		var s trajectory.Sampling
		if tr.Sampling != nil {
			s = *tr.Sampling
		}
		if s.Temperature != nil && overrides == nil {
			overrides = make([]map[string]any, len(kept))
			for j := range overrides {
				overrides[j] = map[string]any{}
			}
		}
		if s.Temperature != nil {
			overrides[i]["temperature"] = *s.Temperature
		}
		switch {
		case i == 0:
			temp, maxTokens = s.Temperature, s.MaxTokens
		default:
			sameTemp = sameTemp && (temp == nil) == (s.Temperature == nil) && (temp == nil || *temp == *s.Temperature)
			sameMax = sameMax && maxTokens == s.MaxTokens
		}
	}
	params := map[string]any{}
	if sameTemp && temp != nil {
		params["temperature"] = *temp
	}
	if sameMax && maxTokens > 0 {
		params["max_tokens"] = maxTokens
	}
	if len(params) == 0 {
		params = nil
	}
	return params, overrides
}
