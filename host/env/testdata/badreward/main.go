// Command badreward is a reward plugin that misbehaves as its config
// says, for the tests of stacked rewards:
//
//   - "trap" (the default): reads memory far past the end of its linear
//     memory, a real WebAssembly trap (out of bounds memory access) that
//     no recover in the SDK can catch: the instance dies mid-call.
//   - "error": fails the ordinary way, an error returned by Score.
//   - "huge": returns the reward 1e308, finite alone but not once weighted.
//   - "undeclared": calls host.info and model.complete, which it does not
//     declare, and returns scores saying whether each was denied.
package main

import (
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.RegisterReward(bad{}) }

func main() {}

type bad struct{}

func (bad) Manifest() abi.Manifest {
	return abi.Manifest{Name: "badreward", Version: "0.0.1", Description: "misbehaves as its config says"}
}

var sink byte

func (bad) Score(r abi.RewardRequest) (abi.RewardResponse, error) {
	var c struct {
		Mode string `json:"mode"`
	}
	json.Unmarshal(r.Config, &c)
	switch c.Mode {
	case "", "trap":
		// 0xF0000000 bytes past a variable is past any memory the host
		// allows (its cap is far below 3.75 GiB): the load traps.
		sink = *(*byte)(unsafe.Add(unsafe.Pointer(&sink), 0xF0000000))
		return abi.RewardResponse{Reward: 1}, nil
	case "error":
		return abi.RewardResponse{}, errors.New("badreward fails on purpose")
	case "huge":
		return abi.RewardResponse{Reward: 1e308}, nil
	case "undeclared":
		denied := func(err error) float64 {
			if errors.Is(err, sdk.ErrDenied) {
				return 1
			}
			return 0
		}
		_, infoErr := sdk.Info()
		_, modelErr := sdk.ModelComplete(abi.ModelRequest{Messages: []abi.ChatMessage{{Role: "user", Content: "hi"}}})
		return abi.RewardResponse{Scores: map[string]float64{"host_info_denied": denied(infoErr), "model_complete_denied": denied(modelErr)}}, nil
	}
	return abi.RewardResponse{}, errors.New("unknown mode " + c.Mode)
}
