// Package terminus is Terminus-2, Harbor's reference agent for
// Terminal-Bench, reproduced byte for byte: the model gets a prompt and a
// tmux screen, answers with keystrokes in JSON (or XML), and sees the new
// terminal output, as Harbor's terminus_2 agent shows it. See
// docs/agents.md for the reference commit and what differs on purpose.
package terminus
