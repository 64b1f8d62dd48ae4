//go:build !unix

package tmuxbin

func waitBuild(string) {}
