package atropostest

import (
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
)

// state is the server's app.state: what server.py keeps between requests.
// Python creates attributes as it goes and /reset_data deletes the queue,
// so which attributes exist matters: each has* flag is a hasattr.
type state struct {
	hasQueue, hasStarted, hasEnvs, hasBatch, hasMaxTok, hasStep bool
	hasTrainer                                                  bool // checkpoint_dir, save_checkpoint_interval, num_steps

	started         bool
	wandbGroup      *string
	wandbProject    *string
	batchSize       int
	maxTokenLen     int
	step            int
	checkpointDir   string
	checkpointEvery int
	numSteps        int
	queue           []group
	currBatch       [][]group
	envs            []env
	buffer          map[int][]group
	requesters      []*big.Int
	latest          json.RawMessage // the last group queued, as stored; nil: none
}

// group is a queued ScoredData: its fields as _scored_data_to_dict makes
// them, and what the queue logic reads.
type group struct {
	raw   map[string]json.RawMessage // every key of ScoredData, nulls filled
	envID *int
	size  int // len(tokens)
}

type env struct {
	MaxContextLen      int      `json:"max_context_len"`
	Weight             float64  `json:"weight"`
	DesiredName        string   `json:"desired_name"`
	RealName           string   `json:"real_name"`
	RegisteredID       int      `json:"registered_id"`
	Connected          bool     `json:"connected"`
	MinBatchAllocation *float64 `json:"min_batch_allocation"`
	GroupSize          int      `json:"group_size"`
}

// newRequester is uuid.uuid4().int: a random 122-bit number, too large
// for an int64.
func newRequester() *big.Int {
	n := new(big.Int).Lsh(big.NewInt(int64(rand.Uint64()>>6)), 64)
	return n.Or(n, new(big.Int).SetUint64(rand.Uint64()))
}

// findGroupsSummingTo is utils.py find_groups_summing_to_target: the
// indices of buffered groups whose sizes add up to target, FIFO first,
// else any combination (preferring earlier groups), else none.
func findGroupsSummingTo(buffer []group, target int) []int {
	if len(buffer) == 0 {
		return nil
	}
	sum := 0
	var idx []int
	for i, g := range buffer {
		if sum+g.size <= target {
			idx = append(idx, i)
			sum += g.size
			if sum == target {
				return idx
			}
		}
	}
	n := len(buffer)
	dp := make([][]bool, n+1)
	for i := range dp {
		dp[i] = make([]bool, target+1)
	}
	dp[0][0] = true
	for i := 1; i <= n; i++ {
		for j := 0; j <= target; j++ {
			dp[i][j] = dp[i-1][j]
			if s := buffer[i-1].size; j >= s && dp[i-1][j-s] {
				dp[i][j] = true
			}
		}
	}
	if !dp[n][target] {
		return nil
	}
	idx = nil
	j := target
	for i := n; i > 0; i-- {
		if s := buffer[i-1].size; j >= s && dp[i-1][j-s] {
			idx = append(idx, i-1)
			j -= s
		}
	}
	slices.Sort(idx)
	return idx
}

// grabExact is utils.py grab_exact_from_heterogeneous_queue: a batch of
// exactly batchSize sequences made of packs (groups of one size adding up
// to the largest group size), in queue order, and the queue without it;
// nil when none can be made.
func grabExact(queue []group, batchSize int) ([]group, []group) {
	if len(queue) == 0 {
		return nil, queue
	}
	total, maxSize := 0, 0
	for _, g := range queue {
		total += g.size
		maxSize = max(maxSize, g.size)
	}
	if total < batchSize {
		return nil, queue
	}
	storage := map[int][]int{}
	var potential []int
	for i, g := range queue {
		storage[g.size] = append(storage[g.size], i)
		if len(storage[g.size])*g.size == maxSize {
			potential = append(potential, storage[g.size]...)
			storage[g.size] = nil
		}
	}
	sum := 0
	for _, i := range potential {
		sum += queue[i].size
	}
	if sum < batchSize {
		return nil, queue
	}
	var batch []group
	taken := map[int]bool{}
	running := 0
	for _, i := range potential {
		batch = append(batch, queue[i])
		taken[i] = true
		running += queue[i].size
		if running == batchSize {
			break
		}
		if running > batchSize {
			return nil, queue
		}
	}
	if running != batchSize {
		return nil, queue
	}
	return batch, without(queue, taken)
}

// grabWithMinimums is utils.py grab_batch_with_minimum_allocations
// (lines 144-279): a batch that first gives each connected environment
// with a min_batch_allocation its share of packable groups, then fills up
// in queue order. While one of them has nothing queued (lines 207-210),
// or nothing packable (211-214), there is no batch at all: an environment
// registered and never disconnected strands the trainer.
func grabWithMinimums(queue []group, batchSize int, envs []env) ([]group, []group) {
	if len(queue) == 0 {
		return nil, queue
	}
	mins, minOrder := minimums(envs)
	if len(mins) == 0 {
		return grabExact(queue, batchSize)
	}
	packable, hasItems := packableByEnv(queue)
	need, ok := minimumNeeds(batchSize, mins, minOrder, packable, hasItems)
	if !ok {
		return nil, queue
	}
	b := packing{queue: queue, size: batchSize, taken: map[int]bool{}}
	for _, id := range minOrder {
		if n, ok := need[id]; ok {
			b.takeMinimum(packable[id], n)
		}
	}
	if b.total < batchSize {
		b.fill(packable)
	}
	if b.total != batchSize {
		return nil, queue
	}
	return b.batch, without(queue, b.taken)
}

// minimums are the min_batch_allocation of each connected environment
// that has one, by registered id, and those ids in registration order.
func minimums(envs []env) (map[int]float64, []int) {
	mins := map[int]float64{}
	var order []int
	for _, e := range envs {
		if e.Connected && e.MinBatchAllocation != nil {
			if _, ok := mins[e.RegisteredID]; !ok {
				order = append(order, e.RegisteredID)
			}
			mins[e.RegisteredID] = *e.MinBatchAllocation
		}
	}
	return mins, order
}

// queued is one group of the queue: its index and its size.
type queued struct{ idx, size int }

// packableByEnv sorts the queue's groups by environment into packable
// ones (groups of one size that together make the largest group's size)
// and says which environments have anything queued.
func packableByEnv(queue []group) (packable map[int][]queued, hasItems map[int]bool) {
	maxSize := 0
	for _, g := range queue {
		maxSize = max(maxSize, g.size)
	}
	bySize := map[int]map[int][]queued{} // env -> size -> pending
	packable, hasItems = map[int][]queued{}, map[int]bool{}
	for i, g := range queue {
		if g.envID == nil {
			continue
		}
		id := *g.envID
		if bySize[id] == nil {
			bySize[id] = map[int][]queued{}
			hasItems[id] = true
		}
		bySize[id][g.size] = append(bySize[id][g.size], queued{i, g.size})
		if len(bySize[id][g.size])*g.size == maxSize {
			packable[id] = append(packable[id], bySize[id][g.size]...)
			bySize[id][g.size] = nil
		}
	}
	return packable, hasItems
}

// minimumNeeds is how many sequences each environment with a minimum must
// get, scaled down when the minima add up to more than a batch; false
// when one of them has nothing queued or nothing packable.
func minimumNeeds(batchSize int, mins map[int]float64, order []int, packable map[int][]queued, hasItems map[int]bool) (map[int]int, bool) {
	need := map[int]int{}
	totalMin := 0
	for _, id := range order {
		n := int(float64(batchSize) * mins[id])
		if n <= 0 {
			continue
		}
		if !hasItems[id] || len(packable[id]) == 0 {
			return nil, false
		}
		need[id] = n
		totalMin += n
	}
	if totalMin > batchSize {
		scale := float64(batchSize) / float64(totalMin)
		for id := range need {
			smallest := math.MaxInt
			for _, it := range packable[id] {
				smallest = min(smallest, it.size)
			}
			need[id] = max(smallest, int(float64(need[id])*scale))
		}
	}
	return need, true
}

// packing is a batch being made from the queue.
type packing struct {
	queue []group
	size  int // the batch size
	batch []group
	taken map[int]bool // queue indices in the batch
	total int          // sequences in the batch
}

// take adds the queue's group i to the batch when it fits.
func (b *packing) take(i int) bool {
	g := b.queue[i]
	if b.total+g.size > b.size {
		return false
	}
	b.batch = append(b.batch, g)
	b.taken[i] = true
	b.total += g.size
	return true
}

// takeMinimum gives an environment its n sequences from its packable
// groups, in order, skipping those that do not fit.
func (b *packing) takeMinimum(its []queued, n int) {
	got := 0
	for _, it := range its {
		if got >= n {
			break
		}
		if b.take(it.idx) {
			got += it.size
		}
	}
}

// fill tops the batch up with the packable groups not taken, in queue
// order, until it is full.
func (b *packing) fill(packable map[int][]queued) {
	isPackable := map[int]bool{}
	for _, its := range packable {
		for _, it := range its {
			isPackable[it.idx] = true
		}
	}
	for i := range b.queue {
		if b.taken[i] || !isPackable[i] {
			continue
		}
		b.take(i)
		if b.total == b.size {
			break
		}
	}
}

// without is the queue less the groups at the taken indices, in order.
func without(queue []group, taken map[int]bool) []group {
	var rest []group
	for i, g := range queue {
		if !taken[i] {
			rest = append(rest, g)
		}
	}
	return rest
}
