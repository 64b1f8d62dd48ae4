// Command trapreward is a reward plugin that traps on every call, for the
// test that a failing reward plugin costs only its own score.
package main

import (
	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.RegisterReward(trap{}) }

func main() {}

type trap struct{}

func (trap) Manifest() abi.Manifest { return abi.Manifest{Name: "trapreward", Version: "0.0.1"} }

func (trap) Score(abi.RewardRequest) (abi.RewardResponse, error) {
	var m map[string]int
	m["boom"] = 1 // nil map write: a panic, then a trap
	return abi.RewardResponse{}, nil
}
