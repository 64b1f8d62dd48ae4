package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/kubernetes"
	"github.com/proctor-dev/proctor/sandbox/seccomp"
)

const kubernetesHint = "start the local cluster with `make k8s-up` and export the KUBECONFIG it prints, or point [sandbox.kubernetes] kubeconfig and context at your cluster"

// kubernetesBackend makes the kubernetes backend from [sandbox.kubernetes]
// and checks that the API server answers. Images built from a task's
// context are built by the local Docker engine.
func kubernetesBackend(ctx context.Context, c *config.Config) (*kubernetes.Backend, error) {
	k := c.Sandbox.Kubernetes
	if k == nil {
		k = &config.Kubernetes{}
	}
	cfg := kubernetes.Config{
		Kubeconfig: c.Resolve(k.Kubeconfig), Context: k.Context, Namespace: k.Namespace,
		NodeSelector: k.NodeSelector, RuntimeClass: k.RuntimeClass, ImagePullSecrets: k.ImagePullSecrets,
		ServiceAccount: k.ServiceAccount, QPS: float32(k.QPS), Burst: k.Burst, Registry: k.Registry,
		RequestFraction: k.RequestFraction, ScheduleTimeout: k.ScheduleTimeout.Duration, ActiveDeadline: k.ActiveDeadline.Duration,
		NoIsolation: !c.Sandbox.Isolated(), SeccompProfile: k.SeccompProfile,
	}
	for _, t := range k.Tolerations {
		cfg.Tolerations = append(cfg.Tolerations, kubernetes.Toleration{Key: t.Key, Operator: t.Operator, Value: t.Value, Effect: t.Effect, Seconds: t.Seconds})
	}
	if k.Registry != "" {
		if d, err := docker.New(); err == nil {
			cfg.Builder = d
		}
	}
	b, err := kubernetes.New(cfg)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		_, err = b.Ping(pctx)
		cancel()
	}
	if err != nil {
		return nil, &fault.Infra{Err: err, Hint: kubernetesHint}
	}
	return b, nil
}

// kubernetesChecks are doctor's checks of the cluster a config names.
func kubernetesChecks(ctx context.Context, c *config.Config, image string) []check {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	b, err := kubernetesBackend(ctx, c)
	if err != nil {
		return []check{{name: "kubernetes API", info: err.Error(), hint: kubernetesHint}}
	}
	info, _ := b.Ping(ctx)
	checks := []check{{name: "kubernetes API", ok: true, info: fmt.Sprintf("%s at %s, namespace %s", info.Version, info.Server, info.Namespace)}}

	missing, err := b.Access(ctx)
	switch {
	case err != nil:
		checks = append(checks, check{name: "kubernetes permissions", info: err.Error()})
	default:
		var need, nice []string
		for _, p := range missing {
			if p.Optional {
				nice = append(nice, p.String())
			} else {
				need = append(need, p.String())
			}
		}
		ch := check{name: "kubernetes permissions", ok: len(need) == 0, info: "all granted"}
		if len(need) > 0 {
			ch.info = "missing: " + strings.Join(need, ", ")
			ch.hint = "bind the Role in docs/kubernetes.md to proctor's user in namespace " + info.Namespace
		} else if len(nice) > 0 {
			ch.info = "granted; without " + strings.Join(nice, ", ") + " proctor cannot create the deny-all NetworkPolicy itself (apply it from docs/kubernetes.md)"
		}
		checks = append(checks, ch)
	}

	iso, err := b.CheckNetwork(ctx, image)
	switch {
	case err != nil:
		checks = append(checks, check{name: "kubernetes network none", info: err.Error(),
			hint: "the check starts a pod from " + image + "; make it pullable by the cluster, or name another with --image"})
	case iso.Isolated:
		checks = append(checks, check{name: "kubernetes network none", ok: true,
			info: fmt.Sprintf("isolated (interfaces: %s; %s)", iso.Interfaces, iso.Detail)})
	default:
		checks = append(checks, check{name: "kubernetes network none",
			info: fmt.Sprintf("NOT isolated: a network-none pod %s (interfaces: %s)", iso.Detail, iso.Interfaces),
			hint: "this cluster does not enforce NetworkPolicies: use a CNI that does (Calico, Cilium, GKE Dataplane V2), or run tasks only with trusted network access"})
	}
	return checks
}

// kubernetesAvailable reports whether the cluster the environment names
// answers (testscript condition).
func kubernetesAvailable() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := kubernetesBackend(ctx, &config.Config{})
	return err == nil
}

type seccompCmd struct {
	Arch string `help:"The nodes' architecture, as Go names it (amd64, arm64); default: this machine's."`
}

// Run prints the profile in the container runtime's format: the file a
// node's kubelet loads for [sandbox.kubernetes] seccomp_profile.
func (c seccompCmd) Run(g *globals) error {
	arch := c.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	p, err := seccomp.OCI(arch)
	if err != nil {
		return &fault.Usage{Err: err}
	}
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}
