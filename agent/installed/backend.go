package installed

import (
	"context"

	"github.com/proctor-dev/proctor/sandbox"
)

// WithLayer wraps a backend so that every sandbox it starts runs the
// task's image with the layer on top: the agent installed, once per
// image.
func WithLayer(b sandbox.Backend, l *sandbox.Layer) sandbox.Backend { return layered{b, l} }

type layered struct {
	sandbox.Backend
	layer *sandbox.Layer
}

func (b layered) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	spec.Layer = b.layer
	return b.Backend.Start(ctx, spec)
}
