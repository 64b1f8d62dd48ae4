package docker

import (
	"context"
	"net"

	"github.com/proctor-dev/proctor/sandbox/mux"
)

// Relay listens on a free port of the sandbox's loopback and carries every
// connection made to it to the returned listener, over the stream the
// sandbox already has (the warden's mux, sandbox/mux): a service of the
// host (the model gateway) reachable from a sandbox without a network.
// Only an isolated sandbox has the mux.
func (s *Sandbox) Relay(ctx context.Context) (net.Listener, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if s.mux == nil {
		return nil, mux.ErrNoRelay
	}
	return s.mux.Listen(ctx)
}

// Relay is the sandbox's relay: the agent's processes share the sandbox's
// network, so they reach the port.
func (a *agentView) Relay(ctx context.Context) (net.Listener, error) { return a.s.Relay(ctx) }
