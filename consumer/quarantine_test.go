package consumer

import "testing"

// TestQuarantine proves the slot's promise: one holder at a time among
// those sharing it; a runner refused is woken once the holder lets go;
// letting go of a slot one does not hold changes nothing.
func TestQuarantine(t *testing.T) {
	q := NewQuarantine()
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	if !q.take(a) || !q.take(a) {
		t.Fatal("a free slot is not taken, or its holder is refused")
	}
	if q.take(b) {
		t.Fatal("a second runner holds the slot beside the first")
	}
	q.release(b) // b does not hold it
	if q.take(b) {
		t.Fatal("a release by a runner that did not hold the slot freed it")
	}
	select {
	case <-b:
		t.Fatal("b woken before the holder let go")
	default:
	}
	q.release(a)
	select {
	case <-b:
	default:
		t.Fatal("b not woken when the holder let go")
	}
	if !q.take(b) {
		t.Fatal("the slot is not free after its holder let go")
	}
	if !NewQuarantine().take(a) {
		t.Fatal("another slot is not free while this one is held")
	}
}
