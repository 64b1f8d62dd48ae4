package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestADD(t *testing.T) {
	t.Setenv("CNI_IFNAME", "eth0")
	t.Setenv("CNI_NETNS", "/var/run/netns/x")
	var out bytes.Buffer
	if err := run("ADD", strings.NewReader(`{"cniVersion":"1.0.0","name":"n","type":"nonet"}`), &out); err != nil {
		t.Fatal(err)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct{ Name, Sandbox string }
		IPs        []struct {
			Address   string
			Interface int
		}
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	// The runtime wants the pod's interface with an address in the
	// result; the address must be a loopback one.
	if res.CNIVersion != "1.0.0" || len(res.Interfaces) != 1 || res.Interfaces[0].Name != "eth0" || res.Interfaces[0].Sandbox != "/var/run/netns/x" ||
		len(res.IPs) != 1 || !strings.HasPrefix(res.IPs[0].Address, "127.") || res.IPs[0].Interface != 0 {
		t.Fatalf("result %s", out.String())
	}
	if err := run("ADD", strings.NewReader("not json"), &out); err == nil {
		t.Fatal("a broken configuration was accepted")
	}
	for _, c := range []string{"DEL", "CHECK", "VERSION"} {
		if err := run(c, strings.NewReader("{}"), &out); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	if err := run("FROB", strings.NewReader("{}"), &out); err == nil {
		t.Error("an unknown command was accepted")
	}
}
