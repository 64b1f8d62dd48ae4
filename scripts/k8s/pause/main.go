// Command pause holds a pod's namespaces for the local test cluster's
// container runtime until it is told to stop. The runtime's sandbox image
// is this one program, packed by scripts/k8s.sh, so no registry is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
