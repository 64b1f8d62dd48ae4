// Package scale holds the scale benchmark (`make bench-scale`): one proctor
// process keeping many rollouts in flight. Its workload is the one the
// performance docs quote: the local backend, the example plugin, and a
// replay agent whose only tool call is `sleep 30; printf hello >
// answer.txt`, so that the agent phase is 30 seconds. It runs the real
// binary in a cgroup of its own, and reads what the kernel counted: the
// process's own CPU time apart from its sandboxes' (from its zombie's
// /proc stat), everything the run used (the cgroup's), its peak RSS, the
// machine's load before and after, and every rollout's phase times from
// results.jsonl.
//
// The package has no code of its own beyond this comment: everything is in
// its test files.
package scale
