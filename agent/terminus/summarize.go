package terminus

import (
	"context"
	"fmt"
	"slices"

	"github.com/proctor-dev/proctor/agent"
)

// The prompts of Harbor's context summarization (terminus_2.py,
// Terminus2._summarize and _query_llm), with their odd indentation.
const (
	summaryPrompt = `You are about to hand off your work to another AI agent.
            Please provide a comprehensive summary of what you have
            accomplished so far on this task:

Original Task: %s

Based on the conversation history, please provide a detailed summary covering:
1. **Major Actions Completed** - List each significant command you executed
            and what you learned from it.
2. **Important Information Learned** - A summary of crucial findings, file
            locations, configurations, error messages, or system state discovered.
3. **Challenging Problems Addressed** - Any significant issues you
            encountered and how you resolved them.
4. **Current Status** - Exactly where you are in the task completion process.


Be comprehensive and detailed. The next agent needs to understand everything
            that has happened so far in order to continue.`

	questionPrompt = `You are picking up work from a previous AI agent on this task:

**Original Task:** %s

**Summary from Previous Agent:**
%s

**Current Terminal Screen:**
%s

Please begin by asking several questions (at least five, more if necessary)
about the current state of the solution that are not answered in the summary
from the prior agent. After you ask these questions you will be on your own,
so ask everything you need to know.`

	answersRequest = "The next agent has a few questions for you, please answer each of them one by one in detail:\n\n"

	handoffPrompt = "Here are the answers the other agent provided.\n\n%s\n\nContinue working on this task from where the previous agent left off. You can no longer ask questions. Please follow the spec to interact with the terminal."

	shortPrompt    = "Briefly continue this task: %s\n\nCurrent state: %s\n\nNext steps (2-3 sentences):"
	fallbackReply  = "Technical difficulties. Please continue with the task."
	unwindFreeGoal = 4000
)

// contextLimit is get_model_context_limit.
func (r *run) contextLimit() int {
	if r.opts.MaxInputTokens > 0 {
		return r.opts.MaxInputTokens
	}
	return 1000000
}

func (r *run) tokens() int {
	if r.opts.CountTokens != nil {
		return r.opts.CountTokens(r.chat)
	}
	return EstimateTokens(r.chat)
}

// proactive is _check_proactive_summarization: summarize ahead of a call
// when fewer tokens than the threshold are left. A failed summarization
// changes nothing.
func (r *run) proactive(ctx context.Context) (string, bool) {
	threshold := 8000
	if r.opts.ProactiveThreshold != nil {
		threshold = *r.opts.ProactiveThreshold
	}
	if r.contextLimit()-r.tokens() >= threshold {
		return "", false
	}
	handoff, err := r.summarize(ctx)
	return handoff, err == nil
}

// unwind is _unwind_messages_to_free_tokens: drop the last exchanges
// until enough tokens are free, keeping the first message.
func (r *run) unwind(target int) {
	for len(r.chat) > 1 && r.contextLimit()-r.tokens() < target {
		if len(r.chat) < 2 {
			break
		}
		r.chat = r.chat[:len(r.chat)-2]
	}
}

// recoverContext is _query_llm's ContextLengthExceededError branch with
// summarization on: unwind, then a full summary, a short one, or the
// screen alone, sent as the next prompt; when even that fails, Harbor's
// stand-in reply.
func (r *run) recoverContext(ctx context.Context) (response, error) {
	r.unwind(unwindFreeGoal)
	prompt, err := r.summarize(ctx)
	if err != nil && ctx.Err() == nil {
		prompt, err = r.shortSummary(ctx)
	}
	if err != nil && ctx.Err() == nil {
		var screen string
		screen, err = r.sess.capture(ctx, false)
		prompt = r.instruction + "\n\nCurrent state: " + shortScreen(screen)
	}
	if err != nil {
		return response{}, err
	}
	resp, err := r.chatCall(ctx, prompt)
	if err != nil {
		if ctx.Err() != nil {
			return response{}, err
		}
		return response{content: fallbackReply}, nil
	}
	return resp, nil
}

// shortSummary is the second fallback: one call without history.
func (r *run) shortSummary(ctx context.Context) (string, error) {
	screen, err := r.sess.capture(ctx, false)
	if err != nil {
		return "", err
	}
	resp, err := r.call(ctx, fmt.Sprintf("summarization-%d-short", r.summaries), nil,
		fmt.Sprintf(shortPrompt, r.instruction, shortScreen(screen)))
	if err != nil {
		return "", err
	}
	return r.instruction + "\n\nSummary: " + resp.content, nil
}

// summarize is _summarize: three subagents (a summary with the history,
// questions from a fresh start, answers with the history and the
// summary); the history becomes the first message, the questions' prompt
// and the questions, and the answers are the handoff prompt.
func (r *run) summarize(ctx context.Context) (string, error) {
	if len(r.chat) == 0 {
		return r.instruction, nil
	}
	r.summaries++
	name := func(step string) string { return fmt.Sprintf("summarization-%d-%s", r.summaries, step) }
	sp := fmt.Sprintf(summaryPrompt, r.instruction)
	summary, err := r.call(ctx, name("summary"), r.chat, sp)
	if err != nil {
		return "", err
	}
	screen, err := r.sess.capture(ctx, false)
	if err != nil {
		return "", err
	}
	qp := fmt.Sprintf(questionPrompt, r.instruction, summary.content, screen)
	questions, err := r.call(ctx, name("questions"), nil, qp)
	if err != nil {
		return "", err
	}
	history := append(slices.Clone(r.chat), agent.Message{Role: "user", Content: sp}, agent.Message{Role: "assistant", Content: summary.content})
	answers, err := r.call(ctx, name("answers"), history, answersRequest+questions.content)
	if err != nil {
		return "", err
	}
	r.chat = []agent.Message{r.chat[0], {Role: "user", Content: qp}, {Role: "assistant", Content: questions.content}}
	return fmt.Sprintf(handoffPrompt, answers.content), nil
}
