package assemble

import (
	"context"
	"time"

	"github.com/proctor-dev/proctor/host/config"
	"github.com/proctor-dev/proctor/host/fault"
	"github.com/proctor-dev/proctor/sandbox/docker"
	"github.com/proctor-dev/proctor/sandbox/kubernetes"
)

// KubernetesHint says how to reach a cluster.
const KubernetesHint = "start the local cluster with `make k8s-up` and export the KUBECONFIG it prints, or point [sandbox.kubernetes] kubeconfig and context at your cluster"

// Kubernetes makes the kubernetes backend from [sandbox.kubernetes]
// and checks that the API server answers. Images built from a task's
// context are built by the local Docker engine.
func Kubernetes(ctx context.Context, c *config.Config) (*kubernetes.Backend, error) {
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
		return nil, &fault.Infra{Err: err, Hint: KubernetesHint}
	}
	return b, nil
}
