package sandboxtest

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/proctor-dev/proctor/internal/poll"
	"github.com/proctor-dev/proctor/sandbox"
)

// RunBackend tests the contract of a Backend beyond its sandboxes: Prune
// and what Abilities promise. spec is a spec the backend starts (its
// image); the suite sets its labels. It never prunes every run (an empty
// run id): other tests and runs may share the engine.
func RunBackend(t *testing.T, b sandbox.Backend, spec sandbox.Spec) {
	t.Run("Prune", func(t *testing.T) { prune(t, b, spec) })
	t.Run("Abilities", func(t *testing.T) { abilities(t, b, spec) })
	t.Run("UnknownNetwork", func(t *testing.T) { unknownNetwork(t, b, spec) })
}

// runID is a run id of this test's own. Ids made with the same stem share
// their first 70 characters, more than a backend that keeps a part of the
// id (a folder's name, a label's value) keeps: Prune must still tell
// them apart.
func runID(stem, which string) string {
	return fmt.Sprintf("%s/%06d-%s-%s", strings.ReplaceAll(stem, "/", "-"), rand.N(1000000), strings.Repeat("x", 70), which)
}

// startRun starts a sandbox of spec labelled with the run id run. It is
// closed when the test ends, whatever Prune did to it.
func startRun(t *testing.T, b sandbox.Backend, spec sandbox.Spec, run string) sandbox.Sandbox {
	t.Helper()
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[sandbox.LabelRun] = run
	sb, err := b.Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	return sb
}

// prune: the sandboxes of a killed run (started, never closed) are
// removed, and only they: a live run's, whose id starts the same, still
// answers. A second prune finds nothing.
func prune(t *testing.T, b sandbox.Backend, spec sandbox.Spec) {
	stem := "test-" + t.Name()
	dead, live := runID(stem, "dead"), runID(stem, "live")
	var gone []sandbox.Sandbox
	for range 2 {
		gone = append(gone, startRun(t, b, spec, dead))
	}
	other := startRun(t, b, spec, live)
	ctx, cancel := poll.Context(t)
	defer cancel()
	n, err := b.Prune(ctx, dead)
	if err != nil || n != 2 {
		t.Fatalf("prune of the dead run: removed %d, %v; want 2", n, err)
	}
	if n, err := b.Prune(ctx, dead); err != nil || n != 0 {
		t.Fatalf("second prune of the dead run: removed %d, %v; want 0", n, err)
	}
	if r, err := other.Exec(ctx, "echo alive", sandbox.ExecOptions{}); err != nil || r.Stdout != "alive\n" {
		t.Fatalf("the live run's sandbox after the prune of another run: %+v, %v", r, err)
	}
	// A pruned pod's processes end when the node's kubelet has seen it
	// go, a moment after the prune.
	for _, sb := range gone {
		poll.Until(t, "a pruned sandbox to stop running commands", func() bool {
			_, err := sb.Exec(ctx, "echo alive", sandbox.ExecOptions{})
			return err != nil
		})
	}
	if n, err := b.Prune(ctx, live); err != nil || n != 1 {
		t.Fatalf("prune of the live run: removed %d, %v; want 1", n, err)
	}
}

// abilities: what Abilities promise, the sandboxes do; without isolation a
// spec with private folders is refused.
func abilities(t *testing.T, b sandbox.Backend, spec sandbox.Spec) {
	ctx := context.Background()
	ab := b.Abilities(ctx)
	sb := startRun(t, b, spec, runID("test-"+t.Name(), "abilities"))
	digest, ref := sandbox.ImageOf(sb)
	if ab.Images && (digest == "" || ref == "") {
		t.Errorf("a backend with images started a sandbox that names none: digest %q, ref %q", digest, ref)
	}
	if !ab.Images && (digest != "" || ref != "") {
		t.Errorf("a backend without images started a sandbox on image %q (%q)", ref, digest)
	}
	iso, ok := sb.(sandbox.Isolated)
	switch {
	case ab.Isolated && (!ok || iso.Agent() == sandbox.Sandbox(iso)):
		t.Error("an isolated backend's sandbox has no agent's view of its own")
	case !ab.Isolated && ok && iso.Agent() != sandbox.Sandbox(iso):
		t.Error("a backend without isolation gives the agent a view of its own")
	}
	if ab.Isolated {
		return
	}
	spec.Private = Private
	run := runID("test-"+t.Name(), "private")
	spec.Labels = map[string]string{sandbox.LabelRun: run}
	if sb, err := b.Start(ctx, spec); err == nil {
		sb.Close(ctx)
		t.Error("a backend without isolation started a sandbox with private folders")
	}
	if n, err := b.Prune(ctx, run); err != nil || n != 0 {
		t.Errorf("a refused start left %d sandboxes (%v)", n, err)
	}
}

// unknownNetwork: a network no backend knows is refused, naming it, and
// leaves nothing behind.
func unknownNetwork(t *testing.T, b sandbox.Backend, spec sandbox.Spec) {
	ctx := context.Background()
	run := runID("test-"+t.Name(), "network")
	spec.Network = "bridge"
	spec.Labels = map[string]string{sandbox.LabelRun: run}
	sb, err := b.Start(ctx, spec)
	if err == nil {
		sb.Close(ctx)
	}
	if err == nil || !strings.Contains(err.Error(), `sandbox network "bridge"`) {
		t.Errorf("network %q: want a refusal naming it, got %v", spec.Network, err)
	}
	if n, err := b.Prune(ctx, run); err != nil || n != 0 {
		t.Errorf("a refused start left %d sandboxes (%v)", n, err)
	}
}
