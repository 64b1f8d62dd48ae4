//go:build !unix

package python

// Building reports whether a build of the runtime is under way: never
// known here.
func Building(dir string) (log string, ok bool) { return "", false }

func waitBuild(string) {}
