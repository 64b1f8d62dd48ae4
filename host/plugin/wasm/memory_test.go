package wasm

import (
	"errors"
	"syscall"
	"testing"
)

// An instance's memory is mapped without the standard library's table of
// mappings, whose one lock syscall.Mmap and syscall.Munmap take (held
// across the unmapping): at a thousand rollouts in flight, every instance
// start, park and close queued behind it. The table does not know the
// mapping, so syscall.Munmap refuses it.
func TestMemoryOutsideTheMmapTable(t *testing.T) {
	mem := memoryAllocator.Allocate(1<<16, 1<<20)
	m, ok := mem.(*mappedMemory)
	if !ok {
		t.Skipf("memory is a %T: this machine refused the mapping", mem)
	}
	defer m.Free()
	buf := m.Reallocate(1 << 16)
	buf[0] = 1
	if err := syscall.Munmap(buf[:cap(buf)]); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("syscall.Munmap of an instance's memory: %v, want EINVAL: the mapping went through the standard library's locked table", err)
	}
	if buf[0] != 1 {
		t.Fatal("the memory changed")
	}
}
