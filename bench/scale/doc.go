// Package scale holds the scale benchmark (`make bench-scale`): one proctor
// process keeping many rollouts in flight. Its workload is the one the
// performance docs quote: the local backend, the example plugin, and a
// replay agent whose only tool call is `sleep 4; printf hello >
// answer.txt`, so a wave of rollouts ideally takes four seconds. It runs
// the real binary, reads the kernel's peak RSS of the process when it
// exits, and the phase times every rollout recorded in results.jsonl.
//
// The package has no code of its own beyond this comment: everything is in
// scale_test.go.
package scale
