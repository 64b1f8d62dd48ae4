package docker

import (
	"slices"
	"testing"

	"github.com/proctor-dev/proctor/sandbox"
)

// The container a spec makes, without an engine: its user, network,
// privileges and limits for each kind of sandbox and what the engine
// allows.
func TestContainerPlan(t *testing.T) {
	iso := engineFacts{isolate: true, seccomp: "{}", quota: true}
	plain := engineFacts{quota: true}
	cases := []struct {
		name      string
		spec      sandbox.Spec
		imageUser string
		facts     engineFacts
		// want
		cfgUser   string
		user      string
		offline   bool
		sysAdmin  bool
		apparmor  bool
		storageMB string
	}{
		{name: "isolated", facts: iso, cfgUser: "0", offline: true, sysAdmin: true, storageMB: "10240M"},
		{name: "isolated user", spec: sandbox.Spec{User: "nobody"}, facts: iso, cfgUser: "0", user: "nobody", offline: true, sysAdmin: true, storageMB: "10240M"},
		{name: "isolated image user", imageUser: "app", facts: iso, cfgUser: "0", user: "app", offline: true, sysAdmin: true, storageMB: "10240M"},
		{name: "isolated apparmor", facts: engineFacts{isolate: true, seccomp: "{}", apparmor: true, quota: true}, cfgUser: "0", offline: true, sysAdmin: true, apparmor: true, storageMB: "10240M"},
		{name: "isolated networked engine", facts: engineFacts{isolate: true, seccomp: "{}", networked: true, quota: true}, cfgUser: "0", sysAdmin: true, storageMB: "10240M"},
		{name: "isolated default network", spec: sandbox.Spec{Network: sandbox.NetworkDefault}, facts: iso, cfgUser: "0", sysAdmin: true, storageMB: "10240M"},
		{name: "isolated no quota", facts: engineFacts{isolate: true, seccomp: "{}"}, cfgUser: "0", offline: true, sysAdmin: true},
		{name: "isolated disk", spec: sandbox.Spec{DiskMB: 100}, facts: iso, cfgUser: "0", offline: true, sysAdmin: true, storageMB: "100M"},
		{name: "plain root", facts: plain, offline: true, storageMB: "10240M"},
		{name: "plain root by name", spec: sandbox.Spec{User: "root:root"}, facts: plain, cfgUser: "root:root", user: "root:root", offline: true, storageMB: "10240M"},
		{name: "plain user", spec: sandbox.Spec{User: "nobody"}, facts: plain, cfgUser: "nobody", user: "nobody", storageMB: "10240M"},
		{name: "plain image user", imageUser: "1000", facts: plain, user: "1000", storageMB: "10240M"},
		{name: "plain host network", spec: sandbox.Spec{Network: sandbox.NetworkHost}, facts: plain, storageMB: "10240M"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			network, err := c.spec.NetworkMode()
			if err != nil {
				t.Fatal(err)
			}
			c.spec.Labels = map[string]string{sandbox.LabelRun: "r"}
			p := containerPlan(c.spec, network, "img:1", c.imageUser, c.facts)
			if p.cfg.User != c.cfgUser || p.user != c.user {
				t.Errorf("container user %q, shells' user %q; want %q, %q", p.cfg.User, p.user, c.cfgUser, c.user)
			}
			if p.offline != c.offline || p.cfg.NetworkDisabled != c.offline || (p.hc.Sysctls != nil) != c.offline {
				t.Errorf("offline %v, network disabled %v, sysctls %v; want offline %v", p.offline, p.cfg.NetworkDisabled, p.hc.Sysctls, c.offline)
			}
			if string(p.hc.NetworkMode) != string(network) {
				t.Errorf("network mode %q, want %q", p.hc.NetworkMode, network)
			}
			if got := slices.Contains(p.hc.CapAdd, sandbox.CapWarden); got != c.sysAdmin {
				t.Errorf("CAP_%s added: %v, want %v", sandbox.CapWarden, got, c.sysAdmin)
			}
			if got := slices.Contains(p.hc.SecurityOpt, "apparmor=unconfined"); got != c.apparmor {
				t.Errorf("apparmor unconfined: %v, want %v", got, c.apparmor)
			}
			if got := slices.Contains(p.hc.SecurityOpt, "seccomp={}"); got != c.facts.isolate {
				t.Errorf("seccomp profile: %v, want %v (%v)", got, c.facts.isolate, p.hc.SecurityOpt)
			}
			if p.hc.StorageOpt["size"] != c.storageMB {
				t.Errorf("storage size %q, want %q", p.hc.StorageOpt["size"], c.storageMB)
			}
			// What every container gets.
			if p.hc.Privileged || !slices.Equal(p.hc.CapDrop, []string{"ALL"}) || !slices.Contains(p.hc.SecurityOpt, "no-new-privileges") {
				t.Errorf("privileges: privileged %v, drop %v, options %v", p.hc.Privileged, p.hc.CapDrop, p.hc.SecurityOpt)
			}
			sized := c.spec.WithDefaults()
			if p.hc.Memory != sized.MemoryMB<<20 || p.hc.MemorySwap != p.hc.Memory || *p.hc.PidsLimit != sized.PidsMax || p.hc.NanoCPUs != int64(sized.CPUs*1e9) {
				t.Errorf("limits: %+v", p.hc.Resources)
			}
			if p.cfg.Labels[sandbox.LabelManaged] != "true" || p.cfg.Labels[sandbox.LabelRun] != "r" || p.cfg.Image != "img:1" {
				t.Errorf("labels %v, image %q", p.cfg.Labels, p.cfg.Image)
			}
			if !p.cfg.OpenStdin || !p.cfg.AttachStdout || p.hc.LogConfig.Type != "none" {
				t.Error("the first process's streams are not kept for an attach")
			}
		})
	}
	// The spec's capabilities are not changed by an isolated plan.
	if slices.Contains(sandbox.Capabilities, sandbox.CapWarden) {
		t.Errorf("sandbox.Capabilities holds %s after plans: %v", sandbox.CapWarden, sandbox.Capabilities)
	}
}
