// Command nonet is the local test cluster's CNI plugin: it gives a pod no
// network. The container runtime brings up the pod's loopback interface
// itself; this plugin creates nothing, and answers ADD with an interface
// and address that exist only on paper, because the runtime refuses a pod
// whose default network reports none. The address is on loopback, so
// nothing that reads it can send traffic off the machine.
//
// It speaks the CNI protocol (the command in CNI_COMMAND, the network's
// configuration on stdin, a JSON result on stdout) with the standard
// library only.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// address is what ADD reports as the pod's IP.
const address = "127.0.0.2/32"

func main() {
	if err := run(os.Getenv("CNI_COMMAND"), os.Stdin, os.Stdout); err != nil {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": "1.0.0", "code": 100, "msg": err.Error()})
		os.Exit(1)
	}
}

func run(cmd string, stdin io.Reader, stdout io.Writer) error {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
	}
	switch cmd {
	case "VERSION":
		return json.NewEncoder(stdout).Encode(map[string]any{
			"cniVersion": "1.0.0", "supportedVersions": []string{"0.4.0", "1.0.0", "1.1.0"}})
	case "ADD":
		if err := json.NewDecoder(io.LimitReader(stdin, 1<<20)).Decode(&conf); err != nil {
			return fmt.Errorf("network configuration: %v", err)
		}
		return json.NewEncoder(stdout).Encode(map[string]any{
			"cniVersion": conf.CNIVersion,
			"interfaces": []map[string]string{{"name": os.Getenv("CNI_IFNAME"), "sandbox": os.Getenv("CNI_NETNS")}},
			"ips":        []map[string]any{{"address": address, "interface": 0}},
		})
	case "DEL", "CHECK", "GC", "STATUS":
		return nil
	}
	return fmt.Errorf("unknown CNI_COMMAND %q", cmd)
}
