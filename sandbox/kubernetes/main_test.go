package kubernetes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/sandboxtest"
)

// TestMain puts the warden this checkout builds in place for the pods the
// tests start (sandboxtest.Main), and fails when pods the tests made are
// left in the namespace after them.
func TestMain(m *testing.M) {
	b, before := podsBefore()
	code := sandboxtest.Main(m)
	if code == 0 && b != nil {
		if left := podsLeft(b, before); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "the tests left pods behind (each names its test in %s):\n%s\n", sandbox.LabelRun, strings.Join(left, "\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// podsBefore is the cluster's backend and the pods proctor made there
// before the tests, or nil without a cluster.
func podsBefore() (*Backend, map[string]bool) {
	b, err := New(Config{})
	if err != nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Ping(ctx); err != nil {
		return nil, nil
	}
	names, err := b.List(ctx, "")
	if err != nil {
		return nil, nil
	}
	before := map[string]bool{}
	for _, n := range names {
		before[n] = true
	}
	return b, before
}

// podsLeft names the pods the tests made that are still there once their
// deletion had time to finish (a pod being deleted counts until it is
// gone: a later prune would count it too), with the run each belongs to.
func podsLeft(b *Backend, before map[string]bool) []string {
	var left []string
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := b.cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: sandbox.LabelManaged + "=true"})
		cancel()
		if err != nil {
			return []string{"list pods: " + err.Error()}
		}
		left = left[:0]
		for _, p := range list.Items {
			if before[p.Name] {
				continue
			}
			run := p.Annotations[sandbox.LabelRun]
			if run == "" {
				run = p.Labels[sandbox.LabelRun]
			}
			state := string(p.Status.Phase)
			if p.DeletionTimestamp != nil {
				state += ", being deleted"
			}
			left = append(left, fmt.Sprintf("  %s (%s): %s", p.Name, state, run))
		}
		if len(left) == 0 || time.Now().After(end) {
			slices.Sort(left)
			return left
		}
	}
}
