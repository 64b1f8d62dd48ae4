// Command stateful is a test plugin, written without the SDK against the
// raw ABI, whose every answer depends on all the state it built in the
// calls before: counters, a map, a goroutine that waits on a channel,
// memory it grew, and the random numbers it drew (from the host's source
// through crypto/rand, and math/rand/v2's runtime-seeded generator). Two
// instances with the same seed answer the same sequence alike, so a parked
// instance that lost or changed any state answers differently.
//
// "step" advances the state and answers a digest of it; "open" opens one of
// the plugin's files (abi.FilesSection) and keeps it open, "read" reads and
// closes it.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"unsafe"
)

//go:wasmimport proctor_v1 read_input
func readInput(methodPtr, inputPtr uint32)

//go:wasmimport proctor_v1 set_output
func setOutput(ptr, n uint32)

func ptr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func out(v any) uint32 {
	b, _ := json.Marshal(v)
	setOutput(ptr(b), uint32(len(b)))
	return 0
}

var (
	steps  int
	seen   = map[string]int{}
	grown  [][]byte
	feed   = make(chan int)
	total  = make(chan int)
	opened *os.File
)

func init() {
	// A goroutine that outlives every call, blocked on its channel
	// between them.
	go func() {
		sum := 0
		for v := range feed {
			sum += v
			total <- sum
		}
	}()
}

//go:wasmexport proctor_abi_v1
func marker() {}

//go:wasmexport proctor_handle
func handle(ml, il uint32) uint32 {
	m := make([]byte, ml)
	in := make([]byte, il+1)
	readInput(ptr(m), ptr(in))
	switch string(m) {
	case "describe":
		return out(map[string]any{"name": "stateful", "version": "0", "abi": 1, "hooks": []string{"describe"}})
	case "step":
		return out(step())
	case "open":
		f, err := os.Open("/a.txt")
		if err != nil {
			return out("error: " + err.Error())
		}
		opened = f
		return out("opened")
	case "read":
		b, err := io.ReadAll(opened)
		opened.Close()
		opened = nil
		if err != nil {
			return out("error: " + err.Error())
		}
		return out(string(b))
	}
	return 2
}

func step() map[string]any {
	steps++
	var r [16]byte
	rand.Read(r[:])
	key := hex.EncodeToString(r[:2])
	seen[key] += steps
	n := mrand.IntN(1 << 20)
	// Every third step keeps 3 MB more: the memory grows past the
	// plugin's base.
	if steps%3 == 0 {
		b := make([]byte, 3<<20)
		for i := range b {
			b[i] = byte(i*steps + n)
		}
		grown = append(grown, b)
	}
	h := sha256.New()
	for _, b := range grown {
		h.Write(b)
	}
	feed <- n
	sum := <-total
	return map[string]any{
		"steps": steps, "random": hex.EncodeToString(r[:]), "math": n, "seen": fmt.Sprint(seen),
		"grown": hex.EncodeToString(h.Sum(nil)), "sum": sum,
	}
}

func main() {}
