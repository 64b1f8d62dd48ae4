package kubernetes

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/proctor-dev/proctor/sandbox"
)

// containerName is the one container of a sandbox pod.
const containerName = "sandbox"

// LabelNetwork marks pods that must have no network; the deny-all
// NetworkPolicy selects them.
const LabelNetwork = "proctor.network"

// pid1 is the container's main process: it waits forever and reaps the
// orphans that commands leave behind (bash collects every child that ends
// while it waits), as the docker backend's init does. It ignores the
// signals a process in the sandbox could send it, so an agent cannot end
// its pod with `kill 1`; the pod's deletion kills it from outside.
const pid1 = `trap '' TERM INT HUP QUIT USR1 USR2; while :; do sleep 86400 & wait $!; done`

// newName returns a fresh pod name.
func newName() string {
	var b [6]byte
	rand.Read(b[:])
	return "proctor-" + hex.EncodeToString(b[:])
}

// podFor builds the pod of a sandbox: one container running spec's image,
// closed by default (no service account token, no host namespaces, no
// privilege escalation, capabilities dropped but the few tasks need,
// resource and disk limits, a deadline as a backstop, a seccomp profile).
// An isolated pod's container also holds CAP_SYS_ADMIN for the warden,
// under proctor's own seccomp profile (a Localhost one: see
// seccomp.OCI) and unconfined by AppArmor, whose runtime profile forbids
// the warden's mounts; root runs it when asRoot, which the warden needs
// (without asRoot, the image's user).
func podFor(cfg *Config, spec sandbox.Spec, name, image, owner string, asRoot bool) *corev1.Pod {
	labels, annotations := podLabels(spec.Labels)
	labels[sandbox.LabelManaged] = "true"
	labels[labelOwner] = owner
	network := spec.Network
	if network == "" {
		network = sandbox.NetworkNone
	}
	labels[LabelNetwork] = string(network)

	var env []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, corev1.EnvVar{Name: k, Value: spec.Env[k]})
	}
	no := false
	grace := int64(0)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			ShareProcessNamespace:         &no,
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            containerName,
				Image:           image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         []string{"bash", "-c", pid1},
				Env:             env,
				Resources:       podResources(cfg, spec),
				SecurityContext: containerSecurity(cfg, asRoot),
				Stdin:           false,
				TTY:             false,
			}},
		},
	}
	placePod(&pod.Spec, cfg)
	return pod
}

// podResources are the container's limits, and its requests: a fraction
// of them (Config.RequestFraction).
func podResources(cfg *Config, spec sandbox.Spec) corev1.ResourceRequirements {
	sized := spec.WithDefaults()
	cpus, mem, disk := sized.CPUs, sized.MemoryMB, sized.DiskMB
	frac := cfg.RequestFraction
	if frac <= 0 || frac > 1 {
		frac = 1
	}
	limits := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(int64(cpus*1000+0.5), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem<<20, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(disk<<20, resource.BinarySI),
	}
	// The disk limit is what the kubelet evicts a pod for; no disk is
	// reserved for it (a request the size of the limit would fit few
	// pods on a node, though a sandbox rarely writes that much).
	requests := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(max(1, int64(cpus*1000*frac+0.5)), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(max(1<<20, int64(float64(mem<<20)*frac)), resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(0, resource.BinarySI),
	}
	return corev1.ResourceRequirements{Limits: limits, Requests: requests}
}

// containerSecurity is the container's security context: no privileges,
// capabilities dropped but the few tasks need; with isolation
// CAP_SYS_ADMIN for the warden, proctor's seccomp profile and no
// AppArmor; root when asRoot.
func containerSecurity(cfg *Config, asRoot bool) *corev1.SecurityContext {
	no := false
	var caps []corev1.Capability
	for _, c := range sandbox.Capabilities {
		caps = append(caps, corev1.Capability(c))
	}
	sc := &corev1.SecurityContext{
		Privileged:               &no,
		AllowPrivilegeEscalation: &no,
	}
	if !cfg.NoIsolation {
		caps = append(caps, sandbox.CapWarden)
		profile := cfg.SeccompProfile
		if profile == "" {
			profile = DefaultSeccompProfile
		}
		sc.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &profile}
		sc.AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	}
	sc.Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: caps}
	if asRoot {
		// The container runs as root so that the warden, file operations
		// and kills reach every file and process, as the docker backend's
		// root execs do; commands run as spec.User (the warden or setpriv
		// switches).
		root := int64(0)
		sc.RunAsUser, sc.RunAsGroup = &root, &root
	}
	return sc
}

// placePod sets where and how long the pod may run, as the config says:
// its deadline, runtime class, pull secrets, node selector, service
// account and tolerations.
func placePod(ps *corev1.PodSpec, cfg *Config) {
	ps.NodeSelector = maps.Clone(cfg.NodeSelector)
	ps.ServiceAccountName = cfg.ServiceAccount
	if deadline := int64(cfg.ActiveDeadline.Seconds()); deadline > 0 {
		ps.ActiveDeadlineSeconds = &deadline
	}
	if cfg.RuntimeClass != "" {
		rc := cfg.RuntimeClass
		ps.RuntimeClassName = &rc
	}
	for _, s := range cfg.ImagePullSecrets {
		ps.ImagePullSecrets = append(ps.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	for _, t := range cfg.Tolerations {
		ps.Tolerations = append(ps.Tolerations, corev1.Toleration{
			Key: t.Key, Operator: corev1.TolerationOperator(t.Operator), Value: t.Value,
			Effect: corev1.TaintEffect(t.Effect), TolerationSeconds: t.Seconds,
		})
	}
}

// labelOwner marks the pods of one Backend, so the pods a process made can
// be told from another's in the same namespace.
const labelOwner = "proctor.owner"

// podLabels turns a spec's labels into pod labels. Kubernetes allows label
// values of at most 63 characters from [A-Za-z0-9._-]; a value outside that
// is stored as a label of its hash (so selectors still find it) and, whole,
// as an annotation. A key Kubernetes refuses goes to the annotations only.
func podLabels(in map[string]string) (labels, annotations map[string]string) {
	labels, annotations = map[string]string{}, map[string]string{}
	for k, v := range in {
		if len(validation.IsQualifiedName(k)) > 0 {
			annotations[k] = v
			continue
		}
		lv := LabelValue(v)
		labels[k] = lv
		if lv != v {
			annotations[k] = v
		}
	}
	return labels, annotations
}

// LabelValue maps any string to a valid label value: itself when valid,
// else a prefix of its safe characters and a hash of the whole.
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	sum := sha256.Sum256([]byte(v))
	var b strings.Builder
	for _, c := range v {
		if b.Len() >= 40 {
			break
		}
		if c < 128 && (c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			b.WriteRune(c)
		}
	}
	prefix := strings.TrimLeft(b.String(), "-_.")
	return prefix + "h" + hex.EncodeToString(sum[:])[:20]
}

// userIDs is a user resolved in the image: numeric ids and the groups it
// belongs to, looked up once before the agent can change the image's
// passwd.
type userIDs struct {
	uid, gid int
	groups   []int // supplementary groups; none: cleared
}

// parseUser reads "uid" or "uid:gid" (gid 0 when missing, as the docker
// backend runs it); a name needs the image's passwd, so ok is false.
func parseUser(u string) (userIDs, bool) {
	us, gs, hasGid := strings.Cut(u, ":")
	uid, err := strconv.Atoi(us)
	if err != nil || uid < 0 {
		return userIDs{}, false
	}
	gid := 0
	if hasGid {
		if gid, err = strconv.Atoi(gs); err != nil || gid < 0 {
			return userIDs{}, false
		}
	}
	return userIDs{uid: uid, gid: gid}, true
}

// parseIDs reads "uid:gid:g1,g2,...", what `warden id` prints.
func parseIDs(s string) (userIDs, error) {
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return userIDs{}, fmt.Errorf("want uid:gid:groups, got %q", s)
	}
	var u userIDs
	var err1, err2 error
	u.uid, err1 = strconv.Atoi(f[0])
	u.gid, err2 = strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || u.uid < 0 || u.gid < 0 {
		return userIDs{}, fmt.Errorf("want uid:gid:groups, got %q", s)
	}
	for _, g := range strings.Split(f[2], ",") {
		if g == "" {
			continue
		}
		n, err := strconv.Atoi(g)
		if err != nil || n < 0 {
			return userIDs{}, fmt.Errorf("want uid:gid:groups, got %q", s)
		}
		u.groups = append(u.groups, n)
	}
	return u, nil
}

// ids is the user as `warden -user` takes it: "uid:gid:g1,g2".
func (u userIDs) ids() string {
	g := make([]string, len(u.groups))
	for i, n := range u.groups {
		g[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("%d:%d:%s", u.uid, u.gid, strings.Join(g, ","))
}

// DefaultSeccompProfile is the Localhost seccomp profile an isolated pod
// asks for, relative to the kubelet's seccomp folder
// (/var/lib/kubelet/seccomp/proctor-isolated.json on most nodes): `proctor
// sandbox seccomp-profile` writes it.
const DefaultSeccompProfile = "proctor-isolated.json"

// setpriv is the command prefix that switches a root process to the user.
func (u userIDs) setpriv() []string {
	argv := []string{"setpriv", "--reuid=" + strconv.Itoa(u.uid), "--regid=" + strconv.Itoa(u.gid)}
	if len(u.groups) > 0 {
		g := make([]string, len(u.groups))
		for i, n := range u.groups {
			g[i] = strconv.Itoa(n)
		}
		argv = append(argv, "--groups="+strings.Join(g, ","))
	} else {
		argv = append(argv, "--clear-groups")
	}
	return append(argv, "--")
}
