package kubernetes

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/proctor-dev/proctor/sandbox/mux"
	"github.com/proctor-dev/proctor/sandbox/shell"
)

// Relay listens on a free port of the pod's loopback and carries every
// connection made to it to the returned listener (the model gateway's),
// over an exec stream of its own that runs `warden relay`: the pod needs
// no network. Closing the listener ends that exec. Only an isolated pod
// has the warden.
func (s *Sandbox) Relay(ctx context.Context) (net.Listener, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if s.agent == nil {
		return nil, mux.ErrNoRelay
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var stderr tail
	go func() {
		err := s.b.stream(sctx, s.name, []string{shell.WardenPath, "relay"}, inR, outW, &stderr)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.Close()
	}()
	c := mux.NewClient(outR, inW, func() error {
		inW.Close()
		cancel()
		return nil
	})
	if err := c.Ready(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("start the relay: %v %s", err, strings.TrimSpace(stderr.String()))
	}
	l, err := c.Listen(ctx)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &relay{Listener: l, c: c}, nil
}

// relay is a relay's listener that ends its exec when closed.
type relay struct {
	*mux.Listener
	c *mux.Client
}

func (r *relay) Close() error {
	r.Listener.Close()
	return r.c.Close()
}

// Relay is the pod's relay: the agent's processes share the pod's
// network, so they reach the port.
func (a *agentView) Relay(ctx context.Context) (net.Listener, error) { return a.s.Relay(ctx) }
