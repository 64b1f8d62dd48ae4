package wasm

import (
	"encoding/binary"
	"os"
	"sync"
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

// An image is memory every instance of a plugin starts from: a plugin's
// memory before its start function (its data segments), or its park base
// (park.go). It lives in a memory file, written once, and each instance's
// memory maps it copy-on-write at the start of its reservation: starting
// an instance copies nothing, the pages it never writes stay the one copy
// in the page cache, and the kernel tells which pages an instance wrote
// (dirtyPages), so a park compares only those. Where the kernel has no
// memory files, the bytes are copied into each new memory instead.
type image struct {
	size int    // bytes, whole OS pages
	fd   int    // the memory file; -1: none
	view []byte // the image, mapped read-only and shared
}

// newImage makes an image of size bytes holding data at their offsets,
// in a memory file where the kernel makes one, else on the heap.
func newImage(size int, data []segment) *image {
	img := &image{size: (size + osPage - 1) &^ (osPage - 1), fd: -1}
	if fd, err := unix.MemfdCreate("proctor-plugin-image", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING); err == nil {
		img.fd = fd
		if img.fill(data) == nil {
			return img
		}
		unix.Close(fd)
		img.fd = -1
	}
	img.view = make([]byte, img.size)
	for _, d := range data {
		copy(img.view[d.off:], d.data)
	}
	return img
}

// fill writes data into the image's file, seals it, and maps it for
// reading.
func (img *image) fill(data []segment) error {
	if err := unix.Ftruncate(img.fd, int64(img.size)); err != nil {
		return err
	}
	for _, d := range data {
		for b, off := d.data, int64(d.off); len(b) > 0; {
			n, err := unix.Pwrite(img.fd, b, off)
			if err != nil {
				return err
			}
			b, off = b[n:], off+int64(n)
		}
	}
	// Sealed: nothing can change what every instance starts from.
	if _, err := unix.FcntlInt(uintptr(img.fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return err
	}
	p, err := unix.MmapPtr(img.fd, 0, nil, uintptr(img.size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	img.view = unsafe.Slice((*byte)(p), img.size)
	return nil
}

// close releases the image; instances mapped from it keep their pages.
func (img *image) close() {
	if img == nil || img.fd < 0 {
		return
	}
	unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(img.view)), uintptr(img.size))
	unix.Close(img.fd)
	img.view, img.fd = nil, -1
}

// allocator is a memory allocator for one instantiation whose memory
// starts as img; mapped reports whether it was mapped from the image (a
// copy otherwise, whose written pages the kernel cannot tell).
func (img *image) allocator(mapped *bool) experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(capacity, max uint64) experimental.LinearMemory {
		mem := memoryAllocator.Allocate(capacity, max)
		m, ok := mem.(*mappedMemory)
		if !ok || img.fd < 0 || uint64(img.size) > uint64(cap(m.buf)) {
			copy(mem.Reallocate(uint64(img.size)), img.view)
			return mem
		}
		base := unsafe.Pointer(unsafe.SliceData(m.buf))
		if _, err := unix.MmapPtr(img.fd, 0, base, uintptr(img.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
			copy(m.buf[:img.size], img.view)
			return m
		}
		*mapped = true
		return m
	})
}

// osPage is the kernel's page size: what an image is mapped and tracked
// in.
var osPage = os.Getpagesize()

// pagemap is this process's /proc/self/pagemap, opened once; -1 where it
// cannot be read.
var pagemap = sync.OnceValue(func() int {
	fd, err := unix.Open("/proc/self/pagemap", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
})

// Bits of a pagemap entry (Documentation/admin-guide/mm/pagemap.rst).
const (
	pmPresent = 1 << 63
	pmSwapped = 1 << 62
	pmFile    = 1 << 61 // the page cache's page, or shared: not written here
)

// dirtyPages reports which OS pages of mem, a memory mapped from an
// image, may differ from it: those written since (each now a private
// copy), and any the kernel swapped out. false when the kernel does not
// say.
func dirtyPages(mem []byte) ([]bool, bool) {
	fd := pagemap()
	if fd < 0 || len(mem) == 0 {
		return nil, false
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	n := (len(mem) + osPage - 1) / osPage
	buf := make([]byte, 8*n)
	for got := 0; got < len(buf); {
		k, err := unix.Pread(fd, buf[got:], int64(addr/uintptr(osPage)*8)+int64(got))
		if err != nil || k == 0 {
			return nil, false
		}
		got += k
	}
	dirty := make([]bool, n)
	for p := range dirty {
		e := binary.LittleEndian.Uint64(buf[8*p:])
		dirty[p] = e&pmSwapped != 0 || e&pmPresent != 0 && e&pmFile == 0
	}
	return dirty, true
}
