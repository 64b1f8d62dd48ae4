package rundir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Manifest is manifest.json: which run this is, what ran (proctor, plugins,
// model, agent, backend, images) and, for a process run, what was written.
// The run id stays the same across resumes, so leftovers of a killed run
// can be found by label.
type Manifest struct {
	ProctorVersion string              `json:"proctor_version"`
	RunID          string              `json:"run_id"`
	Name           string              `json:"name"`
	StartedAt      time.Time           `json:"started_at"`
	ResumedAt      []time.Time         `json:"resumed_at,omitempty"`
	FinishedAt     *time.Time          `json:"finished_at,omitempty"`
	Plugin         PluginInfo          `json:"plugin"`
	Rewards        []PluginInfo        `json:"rewards,omitempty"`
	Process        *ProcessInfo        `json:"process,omitempty"`
	Serve          *ServeInfo          `json:"serve,omitempty"`
	Model          map[string]string   `json:"model,omitempty"`
	Agent          string              `json:"agent"`
	Backend        string              `json:"backend"`
	ConfigHash     string              `json:"config_hash"`
	ImageDigests   map[string]string   `json:"image_digests,omitempty"`
	SkippedTasks   []map[string]string `json:"skipped_tasks,omitempty"`
}

// PluginInfo says which plugin bytes ran.
type PluginInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Source  string `json:"source"`
	Digest  string `json:"oci_digest,omitempty"` // the OCI manifest digest actually used
}

// ProcessInfo is the manifest's account of a process run.
type ProcessInfo struct {
	GroupSize int `json:"group_size"`
	Groups    int `json:"groups"` // groups written to groups.jsonl (exact tokens)
	// MessagesGroups counts the groups written to groups.messages.jsonl:
	// kept by the filters, but without exact tokens (NoTokens says why).
	MessagesGroups int            `json:"messages_groups"`
	SFT            int            `json:"sft"`     // lines written to sft.jsonl
	Dropped        map[string]int `json:"dropped"` // groups left out, by reason
	// Skipped counts the rollouts left out of groups and SFT lines, by
	// reason (export.SkipTraining: infra_error, reward_error, ...).
	Skipped map[string]int `json:"skipped,omitempty"`
	// Tokens says whether the kept groups have exact tokens: "exact" (all
	// in groups.jsonl), "none" (all in groups.messages.jsonl) or "partial";
	// NoTokens says why, by class (export.NoTokensClass).
	Tokens   string                   `json:"tokens"`
	NoTokens map[string]NoTokensCount `json:"no_tokens,omitempty"`
}

// ServeInfo is the manifest's account of a serve run (proctor serve),
// over every invocation: what the rollout API was given. serve.jsonl holds
// the group-by-group record it is summed from.
type ServeInfo struct {
	API       string `json:"api"`
	Name      string `json:"name"`   // the name the API gave the environment (wandb_name)
	EnvID     int    `json:"env_id"` // the last registration's
	GroupSize int    `json:"group_size"`
	Sent      int    `json:"sent"`     // groups the API acknowledged
	Rejected  int    `json:"rejected"` // groups the API refused with a 4xx
	// Pending counts whole groups not sent yet: the next start sends them.
	Pending int            `json:"pending"`
	Dropped map[string]int `json:"dropped"` // groups not sent, by reason
	// Skipped counts the rollouts left out of groups, by reason.
	Skipped     map[string]int `json:"skipped,omitempty"`
	Evals       int            `json:"evals"`        // evaluations finished
	TrainerStep int            `json:"trainer_step"` // the trainer's step when serving stopped
}

// NoTokensCount is how many kept groups lack exact tokens for one reason
// class, with the full reason (task, rollout, turn, token) of the one with
// the first task id.
type NoTokensCount struct {
	Groups  int    `json:"groups"`
	Example string `json:"example"`
}

// ReadManifest reads the manifest of the run directory dir. It returns the
// file's bytes too, for readers that show it whole; the bytes come back
// when they are not a manifest.
func ReadManifest(dir string) (Manifest, []byte, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return m, nil, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, b, fmt.Errorf("%s: %w", ManifestFile, err)
	}
	return m, b, nil
}

// WriteManifest writes m to the run directory dir, atomically.
func WriteManifest(dir string, m Manifest) error {
	return WriteJSONAtomic(filepath.Join(dir, ManifestFile), m)
}
