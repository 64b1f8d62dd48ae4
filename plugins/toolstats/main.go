// Command toolstats is a reward plugin that needs no capability: it scores
// how cleanly the agent used its tools. Its reward is the share of tool
// calls that did not fail (1 when there were none); its named scores are
// the counts behind it.
//
// Stack it on any environment:
//
//	[[reward]]
//	plugin = "toolstats.wasm"
//	weight = 0.1
//
// Build: GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o toolstats.wasm ./plugins/toolstats
package main

import (
	"encoding/json"

	"github.com/proctor-dev/proctor/sdk"
	"github.com/proctor-dev/proctor/sdk/abi"
)

func init() { sdk.RegisterReward(scorer{}) }

func main() {}

type scorer struct{}

func (scorer) Manifest() abi.Manifest {
	return abi.Manifest{Name: "toolstats", Version: "1.0.0", Description: "share of tool calls that did not fail"}
}

// CheckConfig refuses any [reward.config] key: toolstats has none.
func (scorer) CheckConfig(raw json.RawMessage) error {
	var none struct{}
	return sdk.DecodeConfig(raw, &none)
}

// transcript is the part of a rollout's transcript this plugin reads.
type transcript struct {
	Trajectory trajectory `json:"trajectory"`
}

type trajectory struct {
	Turns []struct {
		Tools []struct {
			Failed bool `json:"failed"`
		} `json:"tools"`
		Errors []string `json:"errors"`
	} `json:"turns"`
}

// Score counts tool calls and failures. A transcript of another shape (an
// oracle's, say) has no turns and scores 1.
func (scorer) Score(r abi.RewardRequest) (abi.RewardResponse, error) {
	var tr transcript
	if len(r.Trajectory) > 0 {
		json.Unmarshal(r.Trajectory, &tr)
	}
	t := tr.Trajectory
	var calls, failed, malformed float64
	for _, turn := range t.Turns {
		for _, tool := range turn.Tools {
			calls++
			if tool.Failed {
				failed++
			}
		}
		malformed += float64(len(turn.Errors))
	}
	reward := 1.0
	if calls+malformed > 0 {
		reward = (calls - failed) / (calls + malformed)
	}
	return abi.RewardResponse{Reward: reward, Scores: map[string]float64{
		"turns": float64(len(t.Turns)), "tool_calls": calls, "failed_calls": failed, "malformed_calls": malformed,
	}}, nil
}
