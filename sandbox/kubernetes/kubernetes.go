// Package kubernetes runs sandboxes as Kubernetes pods through client-go.
// It is the only package that imports client-go.
//
// One pod per sandbox, started closed (no service account token, no host
// namespaces, no privilege escalation, capabilities dropped but the few
// tasks need, CPU and memory limits, a deadline as a backstop). Readiness
// comes from a watch on the pod, and a pod that cannot start (image pull,
// scheduling, container creation) fails with the cluster's own message.
// Commands run in one persistent shell per pod (package shell) over a single
// exec stream (WebSocket, SPDY as fallback), so a call costs a write and a
// read instead of an exec round trip; file operations are tar (or cat) over
// their own exec streams.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/proctor-dev/proctor/sandbox"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// stateDir is where the shell controller keeps its files in the pod.
const stateDir = "/tmp/.proctor-shell"

// Toleration is a pod toleration ([sandbox.kubernetes] tolerations).
type Toleration struct {
	Key      string
	Operator string // Exists or Equal (default)
	Value    string
	Effect   string // NoSchedule, PreferNoSchedule, NoExecute, or all when empty
	Seconds  *int64 // for NoExecute: how long the pod stays after the taint
}

// Builder builds an image from a spec's build context and pushes it to
// registry, returning a reference the cluster can pull (by digest). The
// docker backend implements it with the local engine.
type Builder interface {
	BuildPush(ctx context.Context, spec sandbox.Spec, registry string) (string, error)
}

// LayerBuilder is a Builder that also builds a spec's layer (an installed
// agent) over its image and pushes the result (docker.Backend does).
type LayerBuilder interface {
	BuildPushLayer(ctx context.Context, spec sandbox.Spec, registry string) (string, error)
}

// Config is the [sandbox.kubernetes] section.
type Config struct {
	// Kubeconfig is a kubeconfig file; empty means the usual places
	// (KUBECONFIG, ~/.kube/config), then the in-cluster service account.
	Kubeconfig string
	// Context is the kubeconfig context (default: its current context).
	Context string
	// Namespace for the pods (default: the context's, else "default").
	Namespace string

	NodeSelector     map[string]string
	Tolerations      []Toleration
	RuntimeClass     string // e.g. "gvisor" or "kata", where the cluster has it
	ImagePullSecrets []string
	ServiceAccount   string // its token is never mounted

	// QPS and Burst limit requests to the API server (default 50 and 100).
	QPS   float32
	Burst int

	// Registry is where images built from a task's context are pushed
	// (host[:port][/path]); the cluster must be able to pull from it.
	Registry string
	// Builder builds and pushes those images.
	Builder Builder

	// RequestFraction sets CPU and memory requests to this fraction of
	// the limits (default 1: requests equal limits).
	RequestFraction float64
	// ScheduleTimeout is how long a pod may stay unschedulable before
	// Start fails with the scheduler's message (default 5m). Waiting
	// gives a cluster autoscaler time to add a node.
	ScheduleTimeout time.Duration
	// ActiveDeadline ends a pod that outlives it, for pods a killed
	// proctor could not delete (default 24h; prune removes them).
	ActiveDeadline time.Duration

	// Protocol of exec streams: ProtocolAuto or ProtocolSPDY.
	Protocol string

	// NoIsolation turns the separation of the agent from the plugin (the
	// warden's namespaces, see sandbox.Isolated) off. On, the default, a
	// pod's container holds CAP_SYS_ADMIN for the warden, which drops it
	// before the agent's shell starts: the namespace must allow Pod
	// Security "privileged", and every node must have the seccomp profile
	// SeccompProfile. Off, one shell serves agent and plugin alike, and
	// specs with private folders are refused.
	NoIsolation bool
	// SeccompProfile is the Localhost seccomp profile of isolated pods,
	// relative to the kubelet's seccomp folder (default
	// DefaultSeccompProfile).
	SeccompProfile string

	Log *slog.Logger
}

// Backend starts pods. It is safe for concurrent use.
type Backend struct {
	cfg   Config
	rest  *rest.Config
	cs    kubernetes.Interface
	ns    string
	owner string // this Backend's pods carry it in labelOwner
	log   *slog.Logger

	policyOnce sync.Once
}

var _ sandbox.Backend = (*Backend)(nil)

// New loads the client configuration. It does not contact the cluster.
func New(cfg Config) (*Backend, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if cfg.Kubeconfig != "" {
		rules.ExplicitPath = cfg.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w: %v (set KUBECONFIG or [sandbox.kubernetes] kubeconfig; try `make k8s-up` for a local cluster)", sandbox.ErrEngine, err)
	}
	ns := cfg.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	if rc.QPS <= 0 {
		rc.QPS = 50
	}
	if rc.Burst <= 0 {
		rc.Burst = 100
	}
	rc.UserAgent = "proctor"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w: %v", sandbox.ErrEngine, err)
	}
	if cfg.ScheduleTimeout <= 0 {
		cfg.ScheduleTimeout = 5 * time.Minute
	}
	if cfg.ActiveDeadline <= 0 {
		cfg.ActiveDeadline = 24 * time.Hour
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	quietKlog(log)
	return &Backend{cfg: cfg, rest: rc, cs: cs, ns: ns, owner: newName()[len("proctor-"):], log: log}, nil
}

// Abilities: pods run an image and keep the agent apart unless
// NoIsolation; the default network is the cluster's pod network.
func (b *Backend) Abilities(context.Context) sandbox.Abilities {
	return sandbox.Abilities{Isolated: !b.cfg.NoIsolation, Images: true}
}

// Namespace is where this backend's pods go.
func (b *Backend) Namespace() string { return b.ns }

// Info describes the cluster.
type Info struct {
	Server    string // API server URL
	Version   string // its Kubernetes version
	Namespace string
}

// Ping checks that the API server answers.
func (b *Backend) Ping(ctx context.Context) (Info, error) {
	v, err := b.cs.Discovery().ServerVersion()
	if err != nil {
		return Info{}, apiError(err)
	}
	return Info{Server: b.rest.Host, Version: v.GitVersion, Namespace: b.ns}, nil
}

// apiError marks a failure to reach the API server as ErrEngine.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("%w: kubernetes API: %v", sandbox.ErrEngine, err)
}

// Sandbox is one pod and its shells. It is the plugin's view: its
// commands run in the plugin's shell, which in an isolated sandbox lives in
// a mount namespace where the spec's Private folders are the plugin's own.
// Agent gives the agent's view.
type Sandbox struct {
	view
	b    *Backend
	name string
	spec sandbox.Spec
	// workdirSpec is spec.Workdir, created by the shell's start; workdir
	// is the shell's starting directory, where relative paths point.
	workdirSpec, workdir string
	// user is who the plugin's commands run as and its files belong to
	// (nil: the container's user); agentUser is the agent's, when it is
	// not user.
	user, agentUser *userIDs
	image           string // the image id the pod runs (repo@sha256:...)
	ref             string // the image reference the pod was made with
	sh              *Controller

	// Isolation: the private folders and their tmpfs size, the process
	// limit Seal holds the agent to, the plugin warden's pid (it holds
	// the plugin's mount namespace), the agent's view. agent is nil when
	// the backend does not isolate.
	private  []string
	tmpfsMiB int64
	pidsMax  int64
	pluginNS int
	agent    *agentView

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ sandbox.Sandbox  = (*Sandbox)(nil)
	_ sandbox.Isolated = (*Sandbox)(nil)
	_ sandbox.Imaged   = (*Sandbox)(nil)
)

// Name is the pod's name.
func (s *Sandbox) Name() string { return s.name }

// ImageDigest is the image the pod runs, as the runtime resolved it.
func (s *Sandbox) ImageDigest() string { return s.image }

// ImageRef is the reference the pod was made with: the spec's image, or
// the one built from its context and pushed.
func (s *Sandbox) ImageRef() string { return s.ref }

// Start resolves the image (as named, or built and pushed to the
// registry), creates the pod, waits for it through a watch, and opens its
// shells.
func (b *Backend) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	network, err := spec.NetworkMode()
	if err != nil {
		return nil, err
	}
	private, err := shell.PrivateDirs(spec.Private)
	if err != nil {
		return nil, err
	}
	if b.cfg.NoIsolation {
		if len(private) > 0 {
			return nil, fmt.Errorf("the spec has private folders %v, but this kubernetes backend runs without isolation; turn isolation on ([sandbox] isolation = true)", private)
		}
		if spec.AgentUser != "" && spec.AgentUser != spec.User {
			return nil, fmt.Errorf("the agent's user %q is not the verifier's %q: only an isolated sandbox runs them apart ([sandbox] isolation = true)", spec.AgentUser, spec.User)
		}
	}
	spec.Network = network
	spec.Private = private
	if network == sandbox.NetworkNone {
		b.policyOnce.Do(func() { b.ensurePolicy(ctx) })
	}
	build := spec.Image == "" || spec.ForceBuild
	image, err := b.image(ctx, spec, build)
	if err != nil {
		return nil, err
	}
	s, err := b.startPod(ctx, spec, image)
	var ie *sandbox.ImageError
	if errors.As(err, &ie) && !build && len(spec.BuildContext) > 0 && b.cfg.Builder != nil && b.cfg.Registry != "" {
		// The named image cannot be pulled: build it from the context, as
		// the docker backend does when an image is missing.
		b.log.Info("image not pullable, building it", "image", spec.Image, "err", err)
		if image, err = b.image(ctx, spec, true); err != nil {
			return nil, err
		}
		s, err = b.startPod(ctx, spec, image)
	}
	if errors.As(err, &ie) && len(spec.BuildContext) == 0 && spec.BuildHint != "" {
		ie.Reason += "; " + spec.BuildHint
	}
	if err != nil {
		return nil, err
	}
	s.ref = image
	return s, nil
}

// image returns the reference the pod runs: the spec's image as named, or
// with build, one built from the spec's context and pushed to the registry.
func (b *Backend) image(ctx context.Context, spec sandbox.Spec, build bool) (string, error) {
	if spec.Layer != nil {
		return b.layerImage(ctx, spec)
	}
	if !build {
		return spec.Image, nil
	}
	name := spec.Image
	if name == "" {
		name = "(build context)"
	}
	if len(spec.BuildContext) == 0 {
		return "", &sandbox.ImageError{Image: name, Reason: "force_build is set but there is no build context"}
	}
	if b.cfg.Registry == "" {
		return "", &sandbox.ImageError{Image: name, Reason: "the task's image is built from a context, and the kubernetes backend needs a registry to push it to: set [sandbox.kubernetes] registry"}
	}
	if b.cfg.Builder == nil {
		return "", &sandbox.ImageError{Image: name, Reason: "no image builder (a local Docker engine) to build the task's context"}
	}
	return b.cfg.Builder.BuildPush(ctx, spec, b.cfg.Registry)
}

// layerImage is the image of spec's layer over its image, built with the
// local engine and pushed to the registry, once per (image, layer).
func (b *Backend) layerImage(ctx context.Context, spec sandbox.Spec) (string, error) {
	lb, ok := b.cfg.Builder.(LayerBuilder)
	switch {
	case b.cfg.Registry == "":
		return "", &sandbox.ImageError{Image: spec.Image, Reason: spec.Layer.Name + " is installed into an image of its own, and the kubernetes backend needs a registry to push it to: set [sandbox.kubernetes] registry"}
	case !ok:
		return "", &sandbox.ImageError{Image: spec.Image, Reason: "no image builder (a local Docker engine) to install " + spec.Layer.Name + " into the task's image"}
	}
	return lb.BuildPushLayer(ctx, spec, b.cfg.Registry)
}

// startPod creates the pod and opens its shells. An isolated sandbox needs
// root in its container for the warden: when the spec names no user and
// the image's own user is not root, the pod is made again as root, with
// the image's user for the spec's.
func (b *Backend) startPod(ctx context.Context, spec sandbox.Spec, image string) (*Sandbox, error) {
	s, err := b.newPod(ctx, spec, image)
	var iu imageUser
	if errors.As(err, &iu) && spec.User == "" {
		b.log.Debug("the image's user is not root: the pod runs as root, its shells as the user", "image", image, "user", string(iu))
		spec.User = string(iu)
		s, err = b.newPod(ctx, spec, image)
	}
	if err != nil {
		return nil, err
	}
	s.workdir = spec.Workdir
	if r, err := s.sh.Exec(ctx, "pwd", sandbox.ExecOptions{Fresh: true}); err == nil && r.ExitCode == 0 {
		s.workdir = strings.TrimSpace(r.Stdout)
	}
	if s.workdir == "" {
		s.workdir = "/"
	}
	return s, nil
}

// newPod creates one pod and opens its shells; on failure it removes what
// it made.
func (b *Backend) newPod(ctx context.Context, spec sandbox.Spec, image string) (*Sandbox, error) {
	s := &Sandbox{b: b, name: newName(), spec: spec, workdirSpec: spec.Workdir, private: spec.Private}
	s.view = view{s: s, shell: func() *Controller { return s.sh }, plugin: true}
	pod := podFor(&b.cfg, spec, s.name, image, b.owner, spec.User != "")
	running, err := b.create(ctx, pod)
	if err != nil {
		if running != nil || !errors.Is(err, errNotCreated) {
			s.remove(ctx)
		}
		return nil, err
	}
	s.image = imageID(running)
	if b.cfg.NoIsolation {
		err = s.startShell(ctx)
	} else {
		err = s.startIsolated(ctx)
	}
	if err != nil {
		s.remove(ctx)
		return nil, err
	}
	return s, nil
}

// startShell opens the one shell of a sandbox that does not isolate, as
// the spec's user.
func (s *Sandbox) startShell(ctx context.Context) error {
	if s.spec.User != "" {
		u, err := s.resolveUser(ctx, s.spec.User)
		if err != nil {
			return err
		}
		s.user = &u
	}
	var err error
	s.sh, _, err = s.open(ctx, controllerSpec{state: stateDir, user: s.user, home: s.user, kill: s.killGroup})
	return err
}

// errNotCreated marks a create the API server refused: there is no pod to
// remove.
var errNotCreated = errors.New("pod not created")

// create creates pod and waits, through a watch, until its container runs
// or cannot start. It returns the last pod seen.
func (b *Backend) create(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pods := b.cs.CoreV1().Pods(b.ns)
	sel := fields.OneTermEqualSelector("metadata.name", pod.Name).String()
	// Watch first: the events of the create cannot be missed.
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("watch pods in namespace %s: %w: %w", b.ns, errNotCreated, apiError(err))
	}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		w.Stop()
		return nil, fmt.Errorf("create pod in namespace %s: %w: %w", b.ns, errNotCreated, apiError(err))
	}
	defer func() { w.Stop() }()
	last := created
	var unschedSince time.Time
	var timer *time.Timer
	var timeout <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ready, unsched, err := checkStart(last, pod.Spec.Containers[0].Image)
		if ready || err != nil {
			return last, err
		}
		switch {
		case unsched != "" && unschedSince.IsZero():
			unschedSince = time.Now()
			timer = time.NewTimer(b.cfg.ScheduleTimeout)
			timeout = timer.C
		case unsched == "" && !unschedSince.IsZero():
			unschedSince = time.Time{}
			timer.Stop()
			timeout = nil
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("pod %s not ready: %w (%s)", pod.Name, ctx.Err(), describe(last))
		case <-timeout:
			return last, fmt.Errorf("pod %s unschedulable for %s: %s", pod.Name, b.cfg.ScheduleTimeout, unsched)
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The server ended the watch (timeout, restart): watch
				// again from the version last seen.
				w, err = pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: last.ResourceVersion})
				if err != nil {
					if cur, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil {
						last = cur
						w, err = pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: cur.ResourceVersion})
					}
				}
				if err != nil {
					return last, fmt.Errorf("watch pod %s: %w", pod.Name, apiError(err))
				}
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if p, ok := ev.Object.(*corev1.Pod); ok {
					last = p
				}
			case watch.Deleted:
				return nil, fmt.Errorf("pod %s deleted while starting: %w", pod.Name, sandbox.ErrGone)
			case watch.Error:
				w.Stop()
				w, err = pods.Watch(ctx, metav1.ListOptions{FieldSelector: sel})
				if err != nil {
					return last, fmt.Errorf("watch pod %s: %w", pod.Name, apiError(err))
				}
				if cur, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil {
					last = cur
				}
			}
		}
	}
}

// resolveUser looks a user (a name or uid, with ":group" or ":gid") up
// in the image, with the groups it belongs to.
func (s *Sandbox) resolveUser(ctx context.Context, user string) (userIDs, error) {
	if u, ok := parseUser(user); ok {
		return u, nil
	}
	const script = `u=${1%%:*} g=
case $1 in *:*) g=${1#*:} ;; esac
uid=$(id -u -- "$u") || exit 3
if [ -z "$g" ]; then gid=$(id -g -- "$u")
elif [ "$g" -eq "$g" ] 2>/dev/null; then gid=$g
else gid=$(getent group -- "$g" | cut -d: -f3); [ -n "$gid" ] || exit 4
fi
echo "$uid:$gid:$(id -G -- "$u" | tr ' ' ',')"`
	out := &limitWriter{max: 4096}
	code, msg, err := s.run(ctx, script, []string{user}, nil, out)
	if err != nil {
		return userIDs{}, fmt.Errorf("look up user %q: %w", user, err)
	}
	if code != 0 {
		return userIDs{}, fmt.Errorf("user %q is not in the image: %s", user, msg)
	}
	u, err := parseIDs(strings.TrimSpace(out.buf.String()))
	if err != nil {
		return userIDs{}, fmt.Errorf("look up user %q: %w", user, err)
	}
	return u, nil
}

func (s *Sandbox) live() error {
	if s.closed.Load() {
		return sandbox.ErrClosed
	}
	return nil
}

// explain adds what the cluster says about the pod to an error of its
// exec streams: when the pod went over its disk limit, the error matches
// ErrLimit (the agent's doing); when it is gone or failed otherwise,
// ErrGone.
func (s *Sandbox) explain(ctx context.Context, err error) error {
	if s.closed.Load() {
		return sandbox.ErrClosed
	}
	p, gerr := s.pod(ctx)
	switch {
	case apierrors.IsNotFound(gerr):
		if errors.Is(err, sandbox.ErrGone) {
			return fmt.Errorf("pod %s was deleted (evicted, preempted or removed by someone): %w", s.name, err)
		}
		return fmt.Errorf("pod %s was deleted (evicted, preempted or removed by someone): %v: %w", s.name, err, sandbox.ErrGone)
	case gerr != nil:
		return fmt.Errorf("pod %s: %v (and reading the pod: %v): %w", s.name, err, apiError(gerr), err)
	}
	if errors.Is(err, sandbox.ErrGone) && gone(p) == "" {
		// The kubelet kills an evicted pod's container before the API
		// server has its new status: wait for it.
		p = s.settle(ctx, p)
	}
	if overDisk(p) {
		return fmt.Errorf("the sandbox went over its disk limit of %d MiB and the cluster stopped it (%s): %w", s.diskMB(), strings.TrimSpace(p.Status.Message), sandbox.ErrLimit)
	}
	if why := gone(p); why != "" {
		if errors.Is(err, sandbox.ErrGone) {
			return fmt.Errorf("pod %s %s: %w", s.name, why, err)
		}
		return fmt.Errorf("pod %s %s: %v: %w", s.name, why, err, sandbox.ErrGone)
	}
	return fmt.Errorf("pod %s: %w", s.name, err)
}

// pod reads the sandbox's pod, with a short timeout of its own.
func (s *Sandbox) pod(ctx context.Context) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return s.b.cs.CoreV1().Pods(s.b.ns).Get(ctx, s.name, metav1.GetOptions{})
}

// settleTime is how long explain waits for the status of a pod whose
// shell died while it still reads as running.
const settleTime = 10 * time.Second

// settle watches a pod that reads as running, from p, until its status
// says why it no longer does or settleTime passes, and returns the last
// pod seen.
func (s *Sandbox) settle(ctx context.Context, p *corev1.Pod) *corev1.Pod {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTime)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", s.name).String()
	w, err := s.b.cs.CoreV1().Pods(s.b.ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: p.ResourceVersion})
	if err != nil {
		return p
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		cur, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return p
		}
		p = cur
		if ev.Type == watch.Deleted || gone(p) != "" {
			return p
		}
	}
	return p
}

// running reports whether the pod still runs.
func (s *Sandbox) running(ctx context.Context) bool {
	p, err := s.pod(ctx)
	return err == nil && p.Status.Phase == corev1.PodRunning && gone(p) == ""
}

// diskMB is the sandbox's disk limit.
func (s *Sandbox) diskMB() int64 { return s.spec.WithDefaults().DiskMB }

func (s *Sandbox) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(s.workdir, p)
}

// Close deletes the pod (grace 0), also after Ctrl-C: it uses its own
// short timeout, not ctx's cancellation.
func (s *Sandbox) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		if s.agent != nil {
			s.agent.Close(ctx)
		}
		if s.sh != nil {
			s.sh.Close()
		}
		s.closeErr = s.remove(ctx)
	})
	return s.closeErr
}

func (s *Sandbox) remove(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := s.b.deletePod(ctx, s.name); err != nil {
		return fmt.Errorf("delete pod %s: %w", s.name, err)
	}
	return nil
}

func (b *Backend) deletePod(ctx context.Context, name string) error {
	grace := int64(0)
	err := b.cs.CoreV1().Pods(b.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err == nil || apierrors.IsNotFound(err) {
		return nil
	}
	return apiError(err)
}

// List names the pods proctor made in the namespace: all of them, or those
// of one run when runID is set.
func (b *Backend) List(ctx context.Context, runID string) ([]string, error) {
	sel := sandbox.LabelManaged + "=true"
	if runID != "" {
		sel += "," + sandbox.LabelRun + "=" + LabelValue(runID)
	}
	list, err := b.cs.CoreV1().Pods(b.ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list pods in namespace %s: %w", b.ns, apiError(err))
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names, nil
}

// Prune deletes the pods List finds and returns how many it deleted.
func (b *Backend) Prune(ctx context.Context, runID string) (int, error) {
	names, err := b.List(ctx, runID)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, name := range names {
		if err := b.deletePod(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("delete pod %s: %w", name, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// PolicyName is the NetworkPolicy that denies all traffic to and from pods
// whose sandbox has network "none".
const PolicyName = "proctor-deny-all"

// DenyAllPolicy is that NetworkPolicy.
func DenyAllPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PolicyName, Labels: map[string]string{sandbox.LabelManaged: "true"}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelNetwork: string(sandbox.NetworkNone)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// ensurePolicy creates the deny-all NetworkPolicy when it is missing and
// the backend may. Where it may not, it says so once: the pods still run,
// with whatever network the cluster gives them.
func (b *Backend) ensurePolicy(ctx context.Context) {
	np := b.cs.NetworkingV1().NetworkPolicies(b.ns)
	_, err := np.Get(ctx, PolicyName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = np.Create(ctx, DenyAllPolicy(), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	if err != nil {
		b.log.Warn("no deny-all NetworkPolicy for network-none sandboxes; apply the one in docs/kubernetes.md",
			"namespace", b.ns, "policy", PolicyName, "err", err)
	}
}

// readAll reads r up to max bytes, failing past them.
func readAll(r io.Reader, max int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, errTooLarge
	}
	return b, nil
}
