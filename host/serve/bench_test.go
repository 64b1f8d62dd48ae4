package serve

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/proctor-dev/proctor/host/serve/atropos/atropostest"
)

// latencies are, for the groups sent, the time from their last rollout's
// record to the API's acknowledgement, sorted.
func latencies(x map[key]entry) []time.Duration {
	var out []time.Duration
	for _, e := range x {
		if e.State == stateSent && e.SentAt != nil {
			out = append(out, e.SentAt.Sub(e.ScoredAt))
		}
	}
	slices.Sort(out)
	return out
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// BenchmarkServeOverhead is serve's own cost: groups of 2 fake rollouts
// (no sandbox, an agent that answers at once with token ids), 8 tasks, a
// trainer taking batches as fast as it can. It reports the groups the API
// acknowledged per second and the time from a group's last reward to the
// API's answer to its POST.
func BenchmarkServeOverhead(b *testing.B) {
	var perSec, p50, p95 []float64
	for range b.N {
		h := newHarness(b, 8, "epochs = 25\nmax_groups = 16\nmax_batches_offpolicy = 8\n")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		tw := h.trainer(ctx, atropostest.TrainerConfig{BatchSize: 16, MaxTokenLen: 64, NumSteps: 100000}, time.Millisecond)
		start := time.Now()
		if _, err := h.serve(ctx); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		cancel()
		tw.Wait()
		lat := latencies(h.index())
		if len(lat) != 200 {
			b.Fatalf("%d groups sent, want 200", len(lat))
		}
		perSec = append(perSec, float64(len(lat))/elapsed.Seconds())
		p50 = append(p50, float64(quantile(lat, 0.5).Microseconds())/1000)
		p95 = append(p95, float64(quantile(lat, 0.95).Microseconds())/1000)
	}
	b.ReportMetric(median(perSec), "groups/s")
	b.ReportMetric(median(p50), "ms-to-post-p50")
	b.ReportMetric(median(p95), "ms-to-post-p95")
}

// BenchmarkStall: the trainer takes batches for a while, then stops. It
// reports the sequences queued at the API at most (the limit is
// max_batches_offpolicy × batch_size = 24) and the rollouts started after
// the queue reached its limit and before the trainer came back: 0 means
// generation stopped within the batch that filled it.
func BenchmarkStall(b *testing.B) {
	var maxQueued, afterFull []float64
	for range b.N {
		h := newHarness(b, 8, "max_groups = 16\nmax_batches_offpolicy = 3\n")
		h.agent.delay = 20 * time.Millisecond
		ctx, cancel := context.WithCancel(context.Background())
		tr := h.api.Trainer()
		tr.Register(atropostest.TrainerConfig{BatchSize: 8, MaxTokenLen: 64, NumSteps: 100000})
		done := make(chan struct{})
		go func() { h.serve(ctx); close(done) }()
		for range 20 { // training: a batch every 50ms
			tr.Batch()
			time.Sleep(50 * time.Millisecond)
		}
		peak := 0
		var startedAtFull int32 = -1
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			q := h.api.QueuedSequences()
			peak = max(peak, q)
			if q >= 24 && startedAtFull < 0 {
				startedAtFull = h.agent.started.Load()
			}
		}
		if startedAtFull < 0 {
			b.Fatalf("the queue never filled (peak %d)", peak)
		}
		afterFull = append(afterFull, float64(h.agent.started.Load()-startedAtFull))
		maxQueued = append(maxQueued, float64(peak))
		cancel()
		<-done
	}
	b.ReportMetric(median(maxQueued), "max-queued-seqs")
	b.ReportMetric(median(afterFull), "rollouts-started-after-full")
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	return s[len(s)/2]
}
