package kubernetes

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/proctor-dev/proctor/sandbox"
)

// Waiting reasons of a container that will not start without a change:
// the image cannot be had, or the runtime refuses the container.
var (
	imageReasons = map[string]bool{
		"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
		"ErrImageNeverPull": true, "RegistryUnavailable": true, "ImageInspectError": true,
	}
	createReasons = map[string]bool{
		"CreateContainerConfigError": true, "CreateContainerError": true,
		"RunContainerError": true, "StartError": true, "PreCreateHookError": true, "PreStartHookError": true,
	}
)

// checkStart reads a starting pod: ready when its container runs; an error
// when it cannot start (image, container, pod failed); otherwise, while it
// waits for a node, the scheduler's message.
func checkStart(p *corev1.Pod, image string) (ready bool, unschedulable string, err error) {
	if p.DeletionTimestamp != nil {
		return false, "", fmt.Errorf("pod %s is being deleted while starting: %w", p.Name, sandbox.ErrGone)
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, "", fmt.Errorf("pod %s %s before it was ready: %w", p.Name, gone(p), sandbox.ErrGone)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		switch {
		case cs.State.Running != nil:
			return p.Status.Phase == corev1.PodRunning, "", nil
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			return false, "", fmt.Errorf("pod %s: container ended at start: %s (exit %d) %s", p.Name, t.Reason, t.ExitCode, strings.TrimSpace(t.Message))
		case cs.State.Waiting != nil:
			w := cs.State.Waiting
			if imageReasons[w.Reason] {
				return false, "", &sandbox.ImageError{Image: image, Reason: fmt.Sprintf("the cluster cannot pull it: %s: %s", w.Reason, w.Message)}
			}
			if createReasons[w.Reason] {
				hint := ""
				switch {
				case strings.Contains(w.Message, "seccomp profile"):
					hint = " (the node lacks proctor's seccomp profile for isolated sandboxes: write `proctor sandbox seccomp-profile` into the kubelet's seccomp folder on every node, as docs/kubernetes.md says, or set [sandbox] isolation = false)"
				case strings.Contains(w.Message, "bash"):
					hint = " (the image needs bash)"
				}
				return false, "", fmt.Errorf("pod %s: container cannot start: %s: %s%s", p.Name, w.Reason, w.Message, hint)
			}
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return false, c.Message, nil
		}
	}
	return false, "", nil
}

// gone says why a pod no longer runs, or "" when it still does: evicted,
// preempted, past its deadline, its container killed for memory or ended.
func gone(p *corev1.Pod) string {
	var why []string
	if p.DeletionTimestamp != nil {
		why = append(why, "is being deleted")
	}
	if p.Status.Reason != "" {
		why = append(why, fmt.Sprintf("%s: %s", p.Status.Reason, strings.TrimSpace(p.Status.Message)))
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			why = append(why, fmt.Sprintf("disrupted (%s: %s)", c.Reason, c.Message))
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; cs.Name == containerName && t != nil {
			s := fmt.Sprintf("container terminated: %s (exit %d)", t.Reason, t.ExitCode)
			if t.Reason == "OOMKilled" {
				s = fmt.Sprintf("container killed for memory: OOMKilled (exit %d)", t.ExitCode)
			}
			why = append(why, s)
		}
	}
	if len(why) == 0 && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
		why = append(why, "phase "+string(p.Status.Phase))
	}
	return strings.Join(why, "; ")
}

// overDisk reports whether the kubelet evicted the pod for writing more
// than its ephemeral-storage limit (its writable layer, the sandbox's
// disk), which the kubelet words as in pkg/kubelet/eviction/helpers.go.
func overDisk(p *corev1.Pod) bool {
	if p.Status.Reason != "Evicted" {
		return false
	}
	m := p.Status.Message
	return strings.Contains(m, "exceeded its local ephemeral storage limit") || strings.Contains(m, "ephemeral local storage usage exceeds the total limit")
}

// describe is a short account of a pod's progress, for a start that ran
// out of time.
func describe(p *corev1.Pod) string {
	if p == nil {
		return "no status"
	}
	s := "phase " + string(p.Status.Phase)
	if p.Spec.NodeName != "" {
		s += " on node " + p.Spec.NodeName
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			s += fmt.Sprintf(", container waiting: %s %s", w.Reason, w.Message)
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Status == corev1.ConditionFalse && c.Message != "" {
			s += fmt.Sprintf(", %s: %s", c.Type, c.Message)
		}
	}
	return s
}

// imageID is the image the pod's container runs, as the runtime resolved
// it (repo@sha256:...).
func imageID(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == containerName {
			return cs.ImageID
		}
	}
	return ""
}
