package kubernetes

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proctor-dev/proctor/sandbox"
)

func TestPodFor(t *testing.T) {
	secs := int64(30)
	cfg := &Config{
		NodeSelector: map[string]string{"pool": "sandboxes"}, RuntimeClass: "gvisor",
		ImagePullSecrets: []string{"regcred"}, ServiceAccount: "runner", ActiveDeadline: time.Hour,
		Tolerations:     []Toleration{{Key: "dedicated", Operator: "Equal", Value: "proctor", Effect: "NoSchedule", Seconds: &secs}},
		RequestFraction: 0.25,
	}
	spec := sandbox.Spec{CPUs: 2, MemoryMB: 1024, DiskMB: 500, Env: map[string]string{"B": "2", "A": "1"}, User: "nobody",
		Labels: map[string]string{sandbox.LabelRun: "run/with:bad chars", sandbox.LabelRollout: "task-1#0", "not a key!": "x"}}
	p := podFor(cfg, spec, "proctor-abc", "img:1", "owner1", true)
	c := p.Spec.Containers[0]
	sc := c.SecurityContext

	if p.Spec.RuntimeClassName == nil || *p.Spec.RuntimeClassName != "gvisor" || p.Spec.ServiceAccountName != "runner" ||
		p.Spec.NodeSelector["pool"] != "sandboxes" || len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("cluster settings not applied: %+v", p.Spec)
	}
	if tl := p.Spec.Tolerations; len(tl) != 1 || tl[0].Key != "dedicated" || tl[0].Effect != corev1.TaintEffectNoSchedule || *tl[0].TolerationSeconds != 30 {
		t.Errorf("tolerations: %+v", tl)
	}
	if *p.Spec.ActiveDeadlineSeconds != 3600 || *p.Spec.AutomountServiceAccountToken || *p.Spec.EnableServiceLinks ||
		p.Spec.RestartPolicy != corev1.RestartPolicyNever || *p.Spec.TerminationGracePeriodSeconds != 0 {
		t.Errorf("pod defaults: %+v", p.Spec)
	}
	if *sc.AllowPrivilegeEscalation || *sc.Privileged || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) ||
		!slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") || slices.Contains(sc.Capabilities.Add, "NET_RAW") {
		t.Errorf("security context: %+v", sc)
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Errorf("a spec user runs the container as root (the shell switches): %v", sc.RunAsUser)
	}
	if sp := sc.SeccompProfile; sp == nil || sp.Type != corev1.SeccompProfileTypeLocalhost || *sp.LocalhostProfile != DefaultSeccompProfile ||
		sc.AppArmorProfile == nil || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("an isolated pod's seccomp and AppArmor: %+v %+v", sp, sc.AppArmorProfile)
	}
	if p.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("no seccomp profile for the pod's other containers")
	}
	if d := c.Resources.Limits[corev1.ResourceEphemeralStorage]; d.Value() != 500<<20 {
		t.Errorf("disk limit: %v", d.String())
	}
	if d := c.Resources.Requests[corev1.ResourceEphemeralStorage]; !d.IsZero() {
		t.Errorf("disk request: %v", d.String())
	}
	if c.Env[0].Name != "A" || c.Env[1].Name != "B" {
		t.Errorf("env not sorted: %v", c.Env)
	}
	if c.Resources.Limits.Cpu().MilliValue() != 2000 || c.Resources.Requests.Cpu().MilliValue() != 500 ||
		c.Resources.Limits.Memory().Value() != 1<<30 || c.Resources.Requests.Memory().Value() != 256<<20 {
		t.Errorf("resources: %+v", c.Resources)
	}
	for k, v := range p.Labels {
		if len(validation.IsQualifiedName(k)) > 0 || len(validation.IsValidLabelValue(v)) > 0 {
			t.Errorf("invalid label %q=%q", k, v)
		}
	}
	if p.Labels[sandbox.LabelRun] != LabelValue("run/with:bad chars") || p.Annotations[sandbox.LabelRun] != "run/with:bad chars" {
		t.Errorf("run label %q, annotation %q", p.Labels[sandbox.LabelRun], p.Annotations[sandbox.LabelRun])
	}
	if p.Annotations["not a key!"] != "x" || p.Labels[sandbox.LabelManaged] != "true" || p.Labels[LabelNetwork] != "none" || p.Labels[labelOwner] != "owner1" {
		t.Errorf("labels %v, annotations %v", p.Labels, p.Annotations)
	}

	// Defaults: no user, no deadline given, no isolation.
	p = podFor(&Config{NoIsolation: true}, sandbox.Spec{Network: sandbox.NetworkHost}, "proctor-def", "img:1", "o", false)
	c = p.Spec.Containers[0]
	sc = c.SecurityContext
	if sc.RunAsUser != nil || p.Spec.ActiveDeadlineSeconds != nil || p.Labels[LabelNetwork] != "host" || p.Spec.HostNetwork {
		t.Errorf("defaults: %+v", p)
	}
	if slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") || sc.SeccompProfile != nil || sc.AppArmorProfile != nil {
		t.Errorf("a pod without isolation: %+v", sc)
	}
	if c.Resources.Limits.Cpu().MilliValue() != 1000 || c.Resources.Requests.Memory().Value() != 2048<<20 ||
		c.Resources.Limits.StorageEphemeral().Value() != sandbox.DefaultDiskMB<<20 {
		t.Errorf("default resources: %+v", c.Resources)
	}
}

func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "run-1", "a/b:c", strings.Repeat("x", 100), "-leading", "ünïcode", "task#0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := LabelValue(s)
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Fatalf("LabelValue(%q) = %q: %v", s, v, errs)
		}
		if len(validation.IsValidLabelValue(s)) == 0 && v != s {
			t.Fatalf("a valid value %q was changed to %q", s, v)
		}
	})
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid, gid int
		ok       bool
	}{
		{"4242", 4242, 0, true}, {"4242:4343", 4242, 4343, true}, {"nobody", 0, 0, false},
		{"1000:staff", 0, 0, false}, {"-1", 0, 0, false},
	} {
		u, ok := parseUser(tc.in)
		if ok != tc.ok || ok && (u.uid != tc.uid || u.gid != tc.gid) {
			t.Errorf("parseUser(%q) = %+v, %v", tc.in, u, ok)
		}
	}
	if got := strings.Join((userIDs{uid: 5, gid: 6}).setpriv(), " "); got != "setpriv --reuid=5 --regid=6 --clear-groups --" {
		t.Errorf("numeric setpriv: %s", got)
	}
	u, err := parseIDs("5:6:6,27")
	if err != nil || u.ids() != "5:6:6,27" {
		t.Fatalf("parseIDs: %+v %v", u, err)
	}
	if got := strings.Join(u.setpriv(), " "); got != "setpriv --reuid=5 --regid=6 --groups=6,27 --" {
		t.Errorf("setpriv with groups: %s", got)
	}
	if u, err := parseIDs("0:0:"); err != nil || u.ids() != "0:0:" || len(u.groups) != 0 {
		t.Errorf("parseIDs without groups: %+v %v", u, err)
	}
	for _, bad := range []string{"", "5:6", "a:6:", "5:6:x", "-1:0:", "5:6:7:8"} {
		if _, err := parseIDs(bad); err == nil {
			t.Errorf("parseIDs(%q) took it", bad)
		}
	}
}

func waiting(reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: containerName, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func TestCheckStart(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name    string
		status  corev1.PodStatus
		deleted bool
		ready   bool
		unsched string
		errHas  string
		image   bool
		gone    bool
	}{
		{name: "pending", status: corev1.PodStatus{Phase: corev1.PodPending}},
		{name: "running", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: containerName, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}, ready: true},
		{name: "creating", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("ContainerCreating", "")}}},
		{name: "pull", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("ErrImagePull", "not found")}},
			errHas: "ErrImagePull: not found", image: true},
		{name: "backoff", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("ImagePullBackOff", "Back-off")}},
			errHas: "ImagePullBackOff", image: true},
		{name: "no bash", status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{waiting("RunContainerError", `exec: "bash": executable file not found`)}},
			errHas: "the image needs bash"},
		{name: "unschedulable", status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient cpu."}}},
			unsched: "0/1 nodes are available: 1 Insufficient cpu."},
		{name: "failed", status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."},
			errHas: "Evicted: The node was low on resource: memory.", gone: true},
		{name: "deleted", status: corev1.PodStatus{Phase: corev1.PodPending}, deleted: true, errHas: "deleted", gone: true},
		{name: "ended", status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 127}}}}},
			errHas: "Error (exit 127)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "proctor-x"}, Status: tc.status}
			if tc.deleted {
				p.DeletionTimestamp = &now
			}
			ready, unsched, err := checkStart(p, "img:1")
			if ready != tc.ready || unsched != tc.unsched {
				t.Errorf("ready %v unschedulable %q", ready, unsched)
			}
			if tc.errHas == "" && err != nil || tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)) {
				t.Errorf("err %v, want one with %q", err, tc.errHas)
			}
			if errors.Is(err, sandbox.ErrImage) != tc.image || errors.Is(err, sandbox.ErrGone) != tc.gone {
				t.Errorf("err %v: image %v gone %v", err, errors.Is(err, sandbox.ErrImage), errors.Is(err, sandbox.ErrGone))
			}
		})
	}
}

func TestGone(t *testing.T) {
	oom := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
		{Name: containerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}}}
	if g := gone(oom); !strings.Contains(g, "killed for memory") {
		t.Errorf("OOM: %q", g)
	}
	evicted := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
		{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"}}}}
	if g := gone(evicted); !strings.Contains(g, "EvictionByEvictionAPI") {
		t.Errorf("eviction: %q", g)
	}
	if g := gone(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}); g != "" {
		t.Errorf("a running pod is gone: %q", g)
	}
	deadline := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded", Message: "Pod was active on the node longer than the specified deadline"}}
	if g := gone(deadline); !strings.Contains(g, "DeadlineExceeded") {
		t.Errorf("deadline: %q", g)
	}
}
