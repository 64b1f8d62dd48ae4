//go:build linux

package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// credential resolves a user as a container engine does: "name", "uid",
// "name:group" or "uid:gid", names looked up in the image's /etc/passwd
// and /etc/group. Empty means stay who we are.
func credential(user string) (*syscall.Credential, error) {
	if user == "" {
		return nil, nil
	}
	if c, ok := numeric(user); ok {
		return c, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	uid, gid, _, err := lookupUser(u)
	if err != nil {
		return nil, err
	}
	if hasGroup {
		if gid, err = lookupGroup(g); err != nil {
			return nil, err
		}
	}
	groups := supplementary(u, uid, gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}, nil
}

func lookupUser(u string) (uid, gid int, home string, err error) {
	id, numErr := strconv.Atoi(u)
	found := false
	each("/etc/passwd", func(f []string) bool {
		if len(f) < 6 {
			return true
		}
		if f[0] == u || (numErr == nil && f[2] == u) {
			uid, _ = strconv.Atoi(f[2])
			gid, _ = strconv.Atoi(f[3])
			home = f[5]
			found = true
			return false
		}
		return true
	})
	if found {
		return uid, gid, home, nil
	}
	if numErr == nil && id >= 0 {
		return id, 0, "/", nil
	}
	return 0, 0, "", fmt.Errorf("user %q: not in /etc/passwd", u)
}

func lookupGroup(g string) (int, error) {
	id, numErr := strconv.Atoi(g)
	gid, found := 0, false
	each("/etc/group", func(f []string) bool {
		if len(f) >= 3 && (f[0] == g || (numErr == nil && f[2] == g)) {
			gid, _ = strconv.Atoi(f[2])
			found = true
			return false
		}
		return true
	})
	if found {
		return gid, nil
	}
	if numErr == nil && id >= 0 {
		return id, nil
	}
	return 0, fmt.Errorf("group %q: not in /etc/group", g)
}

// supplementary lists the groups that name the user as a member.
func supplementary(name string, uid, gid int) []uint32 {
	out := []uint32{uint32(gid)}
	each("/etc/group", func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		for _, m := range strings.Split(f[3], ",") {
			if m != "" && m == name {
				if id, err := strconv.Atoi(f[2]); err == nil && id != gid {
					out = append(out, uint32(id))
				}
			}
		}
		return true
	})
	return out
}

func each(file string, f func([]string) bool) {
	fh, err := os.Open(file)
	if err != nil {
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !f(strings.Split(line, ":")) {
			return
		}
	}
}

// id prints the numeric form of a user spec, "uid:gid:g1,g2" (the
// groups the user belongs to), which credential takes back without reading
// /etc/passwd: once the agent has run, the image's passwd is its to change.
func id(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: warden id USER")
	}
	c, err := credential(args[0])
	if err != nil {
		return err
	}
	if c == nil {
		c = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	}
	groups := make([]string, len(c.Groups))
	for i, g := range c.Groups {
		groups[i] = strconv.FormatUint(uint64(g), 10)
	}
	fmt.Printf("%d:%d:%s\n", c.Uid, c.Gid, strings.Join(groups, ","))
	return nil
}

// numeric parses "uid:gid:g1,g2", what id prints.
func numeric(user string) (*syscall.Credential, bool) {
	f := strings.Split(user, ":")
	if len(f) != 3 {
		return nil, false
	}
	uid, err1 := strconv.ParseUint(f[0], 10, 32)
	gid, err2 := strconv.ParseUint(f[1], 10, 32)
	if err1 != nil || err2 != nil {
		return nil, false
	}
	c := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if f[2] != "" {
		for _, g := range strings.Split(f[2], ",") {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				return nil, false
			}
			c.Groups = append(c.Groups, uint32(n))
		}
	}
	return c, true
}
