package trajectory

import (
	"slices"
	"testing"
)

// TestPromptSharing: prompts that extend the previous call are stored as
// their new part and expand back exactly; a prompt that does not (a
// template that re-renders the history) is stored whole; a failed call in
// between changes nothing.
func TestPromptSharing(t *testing.T) {
	calls := []struct{ prompt, completion []int }{
		{[]int{1, 2, 3}, []int{4, 5}},
		{[]int{1, 2, 3, 4, 5, 6}, []int{7}},
		{nil, nil}, // failed call
		{[]int{1, 2, 3, 4, 5, 6, 7, 8, 9}, []int{10}},
		{[]int{1, 2, 99}, []int{11}}, // re-rendered history
		{[]int{1, 2, 99, 11, 12}, []int{13}},
	}
	var turns []Turn
	var prev []int
	for i, c := range calls {
		turn := Turn{Index: i, PromptTokenIDs: c.prompt, CompletionTokenIDs: c.completion}
		if len(c.prompt) > 0 {
			sharePrefix(&turn, prev)
			prev = append(slices.Clone(c.prompt), c.completion...)
		}
		turns = append(turns, turn)
	}
	wantPrefix := []int{0, 5, 0, 7, 0, 4}
	for i, turn := range turns {
		if turn.PromptPrefix != wantPrefix[i] {
			t.Errorf("turn %d: prefix %d, want %d (stored %v)", i, turn.PromptPrefix, wantPrefix[i], turn.PromptTokenIDs)
		}
	}
	full, err := FullPrompts(turns)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		if !slices.Equal(full[i], c.prompt) {
			t.Errorf("turn %d expands to %v, want %v", i, full[i], c.prompt)
		}
	}
	turns[3].PromptPrefix = 50
	if _, err := FullPrompts(turns); err == nil {
		t.Error("a prefix longer than the previous call was accepted")
	}
	turns[3].PromptPrefix = -1
	if _, err := FullPrompts(turns); err == nil {
		t.Error("a negative prefix was accepted")
	}
}
