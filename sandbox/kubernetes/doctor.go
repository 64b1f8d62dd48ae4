package kubernetes

import (
	"context"
	"fmt"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/proctor-dev/proctor/sandbox"
)

// Permission is one thing the backend does through the API.
type Permission struct {
	Group, Resource, Subresource, Verb string
	// Optional permissions make a feature work but are not needed to run.
	Optional bool
}

func (p Permission) String() string {
	r := p.Resource
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.Verb + " " + r
}

// Permissions are what proctor asks of the cluster, in its namespace
// (docs/kubernetes.md has the Role).
var Permissions = []Permission{
	{Resource: "pods", Verb: "create"},
	{Resource: "pods", Verb: "get"},
	{Resource: "pods", Verb: "list"},
	{Resource: "pods", Verb: "watch"},
	{Resource: "pods", Verb: "delete"},
	{Resource: "pods", Subresource: "exec", Verb: "create"},
	// A WebSocket exec is a GET: without get, exec streams fall back to
	// SPDY (which works, at about 0.9 MB more per open sandbox).
	{Resource: "pods", Subresource: "exec", Verb: "get", Optional: true},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "get", Optional: true},
	{Group: "networking.k8s.io", Resource: "networkpolicies", Verb: "create", Optional: true},
}

// Access asks the API server which of Permissions the client lacks in the
// backend's namespace.
func (b *Backend) Access(ctx context.Context) ([]Permission, error) {
	var missing []Permission
	for _, p := range Permissions {
		r, err := b.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{
			Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
				Namespace: b.ns, Group: p.Group, Resource: p.Resource, Subresource: p.Subresource, Verb: p.Verb,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, apiError(err)
		}
		if !r.Status.Allowed {
			missing = append(missing, p)
		}
	}
	return missing, nil
}

// Isolation is what a network-none sandbox could reach.
type Isolation struct {
	Isolated   bool   // it reached nothing
	Interfaces string // its network interfaces
	Detail     string // what was tried and what happened
}

// probe runs in a network-none pod: it lists the interfaces and tries
// to open a TCP connection to the API server, which every pod of a
// cluster can reach unless a policy stops it.
const probe = `ls /sys/class/net | tr '\n' ' '; echo
h=${KUBERNETES_SERVICE_HOST:-} p=${KUBERNETES_SERVICE_PORT:-443}
if [ -z "$h" ]; then echo "no API server address in the pod's environment"; exit 0; fi
if timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' x "$h" "$p" 2>/dev/null; then echo "reached $h:$p"; exit 7; fi
echo "could not connect to the API server at $h:$p"`

// CheckNetwork starts a sandbox with network "none" from image and says
// whether it can reach the API server: where pods get the cluster's
// network, only an enforced NetworkPolicy (see PolicyName) stops it.
func (b *Backend) CheckNetwork(ctx context.Context, image string) (Isolation, error) {
	sb, err := b.Start(ctx, sandbox.Spec{Image: image, Network: sandbox.NetworkNone, CPUs: 0.1, MemoryMB: 64,
		Labels: map[string]string{sandbox.LabelRun: "proctor-doctor"}})
	if err != nil {
		return Isolation{}, err
	}
	defer sb.Close(ctx)
	s := sb.(*Sandbox)
	out := &limitWriter{max: 4096}
	code, msg, err := s.run(ctx, probe, nil, nil, out)
	if err != nil {
		return Isolation{}, err
	}
	ifaces, detail, _ := strings.Cut(out.buf.String(), "\n")
	iso := Isolation{Isolated: code == 0, Interfaces: strings.TrimSpace(ifaces), Detail: strings.TrimSpace(detail)}
	if code != 0 && code != 7 {
		return iso, fmt.Errorf("network probe: exit %d: %s", code, msg)
	}
	return iso, nil
}
