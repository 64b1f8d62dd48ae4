package main

import (
	"fmt"

	"github.com/proctor-dev/proctor/host/view"
)

type viewCmd struct {
	Dir         string `arg:"" help:"Run directory." type:"existingdir"`
	Addr        string `help:"Address to listen on; a loopback address unless --allow-remote." default:"127.0.0.1:0" placeholder:"HOST:PORT"`
	AllowRemote bool   `help:"Allow a non-loopback --addr: anyone who reaches it can read every transcript of the run." name:"allow-remote"`
}

func (v viewCmd) Run(g *globals) error {
	release, err := readRun(g, v.Dir, "view", false)
	if err != nil {
		return err
	}
	defer release()
	ln, err := view.Listen(v.Addr, v.AllowRemote)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "serving %s at http://%s/ (Ctrl-C to stop)\n", v.Dir, ln.Addr())
	return view.Serve(g.ctx, ln, view.Handler(v.Dir, v.AllowRemote))
}
