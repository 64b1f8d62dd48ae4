package calc

import "testing"

func TestAdd(t *testing.T) {
	if got := Add(2, 3); got != 5 {
		t.Fatalf("Add(2, 3) = %d, want 5", got)
	}
}

func TestSub(t *testing.T) {
	if got := Sub(5, 3); got != 2 {
		t.Fatalf("Sub(5, 3) = %d, want 2", got)
	}
}

func TestClamp(t *testing.T) {
	t.Run("low", func(t *testing.T) {
		if got := Clamp(-1, 0, 10); got != 0 {
			t.Fatalf("got %d", got)
		}
	})
	t.Run("high", func(t *testing.T) {
		if got := Clamp(11, 0, 10); got != 10 {
			t.Fatalf("got %d", got)
		}
	})
}
