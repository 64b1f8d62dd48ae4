// Package fault says whose fault an error is and what to do about it.
// Usage is the user's mistake (a bad flag, config or reference: fix the
// input); Infra is something unavailable (the engine, a registry, a plugin,
// the run directory: fix it and run again). Both carry a Hint, a sentence
// that says what to do. cmd/proctor maps them to exit codes 2 and 3 and
// prints the hint after the error.
package fault

import "errors"

// Usage is a mistake of the user: bad flags, config or references.
type Usage struct {
	Err  error
	Hint string // what to do; "" when the error says it all
}

func (e *Usage) Error() string { return e.Err.Error() }
func (e *Usage) Unwrap() error { return e.Err }

// Infra is an unavailable dependency: engine, registry, plugin, run
// directory.
type Infra struct {
	Err  error
	Hint string // what to do; "" when the error says it all
}

func (e *Infra) Error() string { return e.Err.Error() }
func (e *Infra) Unwrap() error { return e.Err }

// IsUsage reports whether err is, or wraps, a Usage fault.
func IsUsage(err error) bool {
	var u *Usage
	return errors.As(err, &u)
}

// Hint is the hint of the first Usage in err's chain, else of the first
// Infra, else "".
func Hint(err error) string {
	var u *Usage
	if errors.As(err, &u) {
		return u.Hint
	}
	var i *Infra
	if errors.As(err, &i) {
		return i.Hint
	}
	return ""
}
