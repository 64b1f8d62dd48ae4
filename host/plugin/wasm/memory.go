package wasm

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tetratelabs/wazero/experimental"
)

// memoryAllocator backs each instance's linear memory with an anonymous
// mapping of its largest size, reserved, not committed: a page the plugin
// never touches costs nothing (a Go plugin touches about half of the 4 MB
// it starts with), growing copies nothing, and closing the instance gives
// the pages back at once rather than at a later garbage collection. Where
// the mapping is refused (a strict overcommit policy), the memory is a Go
// slice as wazero would make it.
//
// The mappings are made and dropped with the bare system calls: the
// standard library's syscall.Mmap and Munmap keep every mapping in one
// table under one lock, held across munmap, and at a thousand rollouts in
// flight every instance start, park and close queued behind it.
var memoryAllocator = experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
	if max > 0 {
		p, err := unix.MmapPtr(-1, 0, nil, uintptr(max), unix.PROT_READ|unix.PROT_WRITE,
			unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
		if err == nil {
			return &mappedMemory{buf: unsafe.Slice((*byte)(p), max)[:0]}
		}
	}
	return &sliceMemory{buf: make([]byte, 0, capacity), max: max}
})

// mappedMemory is linear memory in a mapping of its largest size.
type mappedMemory struct{ buf []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if m.buf == nil || size > uint64(cap(m.buf)) {
		return nil
	}
	m.buf = m.buf[:size]
	return m.buf
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m.buf)), uintptr(cap(m.buf)))
		m.buf = nil
	}
}

// sliceMemory is linear memory in a Go slice.
type sliceMemory struct {
	buf []byte
	max uint64
}

func (m *sliceMemory) Reallocate(size uint64) []byte {
	switch {
	case size > m.max:
		return nil
	case size <= uint64(cap(m.buf)):
		m.buf = m.buf[:size]
	default:
		m.buf = append(m.buf, make([]byte, int(size)-len(m.buf))...)
	}
	return m.buf
}

func (m *sliceMemory) Free() { m.buf = nil }
