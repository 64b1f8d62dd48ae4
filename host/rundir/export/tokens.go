package export

import (
	"errors"
	"fmt"

	"github.com/proctor-dev/proctor/trajectory"
)

// Atropos's conventions for positions the model did not generate.
const (
	MaskedToken   = -100 // in masks
	MaskedLogprob = 1.0  // in inference_logprobs: no real logprob is positive
)

// ErrNoTokens: the trajectory has no token ids (the endpoint did not
// return them, or the agent is not a model).
var ErrNoTokens = errors.New("no token ids recorded")

// ErrTurnWithoutIDs: a turn that answered has no prompt or completion ids
// while other turns have them.
var ErrTurnWithoutIDs = errors.New("no prompt or completion token ids while other turns have them")

// ErrInvalidIDs: the recorded ids cannot be a sequence (a negative id, a
// shared prompt prefix longer than the call before it).
var ErrInvalidIDs = errors.New("invalid token ids")

// Classes of why a rollout has no token sequence, for counting: a reason
// names rollouts, turns and positions, a class does not.
const (
	NoTokensNoIDs          = "no_token_ids"      // ErrNoTokens
	NoTokensPrefixMismatch = "prefix_mismatch"   // *PrefixError
	NoTokensTurnWithoutIDs = "turn_without_ids"  // ErrTurnWithoutIDs
	NoTokensInvalidIDs     = "invalid_token_ids" // ErrInvalidIDs
)

// NoTokensClass is the class of an error from Tokens ("" for nil).
func NoTokensClass(err error) string {
	var pe *PrefixError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrNoTokens):
		return NoTokensNoIDs
	case errors.As(err, &pe):
		return NoTokensPrefixMismatch
	case errors.Is(err, ErrTurnWithoutIDs):
		return NoTokensTurnWithoutIDs
	}
	return NoTokensInvalidIDs
}

// PrefixError: a turn's prompt ids do not start with the previous turn's
// prompt and completion ids, so the turns cannot be laid on one sequence.
// It happens when the chat template renders the history differently from
// how the model produced it (most often: it drops earlier reasoning).
type PrefixError struct {
	Turn int // the turn whose prompt breaks the sequence
	At   int // the first token position that differs
}

func (e *PrefixError) Error() string {
	return fmt.Sprintf("turn %d: its prompt token ids differ from the earlier turns' prompt and completion at token %d (the chat template re-renders the history, for example without earlier reasoning): the turns are not one sequence", e.Turn, e.At)
}

// Sequence is one rollout as a single token sequence.
type Sequence struct {
	Tokens []int
	// Masks is MaskedToken where the model did not generate the token and
	// the token id where it did.
	Masks []int
	// Logprobs is aligned with Tokens: the sampling logprob where the
	// model generated the token, MaskedLogprob elsewhere. It is nil when a
	// turn lacks logprobs for all its completion tokens.
	Logprobs []float64
}

// Tokens builds the sequence of a trajectory from its recorded ids: the
// last turn's prompt and completion, in which each earlier turn's
// completion sits where the next prompt repeats it. It returns ErrNoTokens
// when no ids were recorded and an error naming the turn when they do not
// line up (see NoTokensClass); it never invents a token.
func Tokens(tr *trajectory.Trajectory) (Sequence, error) {
	var s Sequence
	logprobs := true
	recorded := false
	for _, t := range tr.Turns {
		if len(t.PromptTokenIDs) > 0 || t.PromptPrefix > 0 || len(t.CompletionTokenIDs) > 0 {
			recorded = true
			break
		}
	}
	if !recorded {
		return Sequence{}, ErrNoTokens
	}
	prompts, err := trajectory.FullPrompts(tr.Turns)
	if err != nil {
		return Sequence{}, fmt.Errorf("%w: %v", ErrInvalidIDs, err)
	}
	for ti, t := range tr.Turns {
		prompt := prompts[ti]
		if len(t.Errors) > 0 && len(t.CompletionTokenIDs) == 0 {
			continue // a failed call: no reply, nothing generated
		}
		if len(prompt) == 0 || len(t.CompletionTokenIDs) == 0 {
			return Sequence{}, fmt.Errorf("turn %d: %w", t.Index, ErrTurnWithoutIDs)
		}
		if len(prompt) < len(s.Tokens) {
			return Sequence{}, &PrefixError{Turn: t.Index, At: len(prompt)}
		}
		for i, id := range s.Tokens {
			if prompt[i] != id {
				return Sequence{}, &PrefixError{Turn: t.Index, At: i}
			}
		}
		for _, id := range prompt[len(s.Tokens):] {
			if id < 0 {
				return Sequence{}, fmt.Errorf("turn %d: %w: negative prompt token id %d", t.Index, ErrInvalidIDs, id)
			}
			s.Tokens = append(s.Tokens, id)
			s.Masks = append(s.Masks, MaskedToken)
			s.Logprobs = append(s.Logprobs, MaskedLogprob)
		}
		aligned := len(t.CompletionLogprobs) == len(t.CompletionTokenIDs)
		logprobs = logprobs && aligned
		for i, id := range t.CompletionTokenIDs {
			if id < 0 {
				return Sequence{}, fmt.Errorf("turn %d: %w: negative completion token id %d", t.Index, ErrInvalidIDs, id)
			}
			s.Tokens = append(s.Tokens, id)
			s.Masks = append(s.Masks, id)
			lp := MaskedLogprob
			if aligned {
				lp = t.CompletionLogprobs[i]
			}
			s.Logprobs = append(s.Logprobs, lp)
		}
	}
	if len(s.Tokens) == 0 {
		return Sequence{}, ErrNoTokens
	}
	if !logprobs {
		s.Logprobs = nil
	}
	return s, nil
}

// length is the rollout's length in tokens: by its ids when it has them,
// else by the prompt and completion usage of its last answered turn.
func length(tr *trajectory.Trajectory, s Sequence, ok bool) int {
	if ok {
		return len(s.Tokens)
	}
	for i := len(tr.Turns) - 1; i >= 0; i-- {
		u := tr.Turns[i].Usage
		if u.PromptTokens+u.CompletionTokens > 0 {
			return int(u.PromptTokens + u.CompletionTokens)
		}
	}
	return 0
}
