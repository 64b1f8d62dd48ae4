package export

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/proctor-dev/proctor/host/rundir"
	"github.com/proctor-dev/proctor/trajectory"
)

// writeRun writes a run directory as the runner does: records in
// results.jsonl, transcripts under transcripts/ (wrapped).
func writeRun(tb testing.TB, tasks, attempts int, tr func(task, attempt int) *trajectory.Trajectory) string {
	tb.Helper()
	dir := tb.TempDir()
	s, err := rundir.Open(dir)
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	// Attempts are written out of order, as concurrent rollouts finish.
	for a := attempts - 1; a >= 0; a-- {
		for task := range tasks {
			id := fmt.Sprintf("task-%d", task)
			r := rec(id, a, float64((task+a)%2))
			r.RolloutID = fmt.Sprintf("%s#%d", id, a)
			if t := tr(task, a); t != nil {
				name := rundir.TranscriptName(r.RolloutID, 0)
				if err := s.WriteTranscript(name, map[string]any{"rollout_id": r.RolloutID, "task_id": id, "trajectory": t}); err != nil {
					tb.Fatal(err)
				}
				r.Transcript = "transcripts/" + name
			}
			if err := s.Append(r); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return dir
}

func TestEachGroup(t *testing.T) {
	dir := writeRun(t, 3, 2, func(task, attempt int) *trajectory.Trajectory {
		if task == 2 && attempt == 1 {
			return nil // an infra error before the agent ran
		}
		return synth(2, 2, 2)
	})
	var got []string
	err := EachGroup(dir, func(recs []rundir.Record, trajs []*trajectory.Trajectory) error {
		for i, r := range recs {
			got = append(got, fmt.Sprintf("%s/%d/%v", r.TaskID, r.Attempt, trajs[i] != nil))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "[task-0/0/true task-0/1/true task-1/0/true task-1/1/true task-2/0/true task-2/1/false]"
	if fmt.Sprint(got) != want {
		t.Fatalf("got %v\nwant %s", got, want)
	}
	if err := EachGroup(t.TempDir(), nil); err == nil {
		t.Fatal("a directory without results.jsonl")
	}
}

// BenchmarkExport exports a run of 2,000 rollouts (500 tasks, 4 attempts,
// 8 turns each with token ids: 768-token sequences) from disk, in each
// format: read the transcripts, convert, encode to JSON.
func BenchmarkExport(b *testing.B) {
	const tasks, attempts = 500, 4
	dir := writeRun(b, tasks, attempts, func(int, int) *trajectory.Trajectory { return synth(8, 64, 32) })
	for _, format := range []string{"atropos", "sft", "atif"} {
		b.Run(format, func(b *testing.B) {
			enc := json.NewEncoder(io.Discard)
			for b.Loop() {
				n := 0
				err := EachGroup(dir, func(recs []rundir.Record, trajs []*trajectory.Trajectory) error {
					switch format {
					case "atropos":
						g, info, err := Group(recs, trajs, Filter{})
						if err != nil || !info.Tokens {
							return fmt.Errorf("%v %+v", err, info)
						}
						n += info.Rollouts
						return enc.Encode(g)
					case "sft":
						for i, r := range recs {
							if line, ok := SFT(r, trajs[i], Filter{}); ok {
								n++
								if err := enc.Encode(line); err != nil {
									return err
								}
							}
						}
					case "atif":
						for i, r := range recs {
							n++
							if err := enc.Encode(ATIF(r, trajs[i], ATIFMeta{})); err != nil {
								return err
							}
						}
					}
					return nil
				})
				if err != nil || n != tasks*attempts {
					b.Fatalf("%v after %d rollouts", err, n)
				}
			}
			b.ReportMetric(float64(tasks*attempts*b.N)/b.Elapsed().Seconds(), "rollouts/s")
		})
	}
}

// BenchmarkGroup is the conversion alone, in memory: one group of 4
// rollouts of 60 turns (a long agentic rollout, 9,600-token sequences).
func BenchmarkGroup(b *testing.B) {
	trs := []*trajectory.Trajectory{synth(60, 100, 60), synth(60, 100, 60), synth(60, 100, 60), synth(60, 100, 60)}
	recs := []rundir.Record{rec("t", 0, 1), rec("t", 1, 0), rec("t", 2, 1), rec("t", 3, 0)}
	for b.Loop() {
		if _, info, err := Group(recs, trs, Filter{}); err != nil || !info.Tokens {
			b.Fatal(err, info)
		}
	}
	b.ReportMetric(float64(4*b.N)/b.Elapsed().Seconds(), "rollouts/s")
}
