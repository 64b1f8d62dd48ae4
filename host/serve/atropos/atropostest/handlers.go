package atropostest

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// The handlers of server.py, one per route, with s.mu held (FastAPI runs
// them one at a time on its event loop). A Python exception is errServer
// (500); a pydantic error is a *validationError (422). Line numbers are
// those of atroposlib/api/server.py and utils.py at commit 296a0bc5; the
// answers of the registration states, of /status-env for an unknown
// env_id and of a minimum allocation with nothing queued were checked
// against that server, run unchanged (TestStrandedByMinimum).

func (s *Server) root([]byte) (any, error) {
	return map[string]string{"message": "AtroposLib API"}, nil
}

// register is server.py register (lines 256-279): the first trainer sets
// the state up; every caller gets a fresh uuid.
func (s *Server) register(b []byte) (any, error) {
	m, err := body(b, registration)
	if err != nil {
		return nil, err
	}
	st := &s.st
	if !st.hasQueue {
		wgroup, project := m["wandb_group"].(string), m["wandb_project"].(string)
		*st = state{
			hasQueue: true, hasStarted: true, hasEnvs: true, hasBatch: true, hasMaxTok: true, hasStep: true, hasTrainer: true,
			wandbGroup: &wgroup, wandbProject: &project,
			batchSize: intOf(m["batch_size"]), maxTokenLen: intOf(m["max_token_len"]), step: intOf(m["starting_step"]),
			checkpointDir: m["checkpoint_dir"].(string), checkpointEvery: intOf(m["save_checkpoint_interval"]),
			numSteps: intOf(m["num_steps"]), buffer: map[int][]group{}, requesters: st.requesters, latest: st.latest,
		}
	}
	st.requesters = append(st.requesters, newRequester())
	return map[string]any{"uuid": st.requesters[len(st.requesters)-1]}, nil
}

// registerEnv is server.py register_env_url (lines 282-322): "wait for
// trainer to start" until the trainer's first /batch (285-288), then a
// new env_id per call, its place in the list (300), and the name
// desired_name_N, N counting the environments of that name before it
// (296-299). Nothing is ever taken out of the list: an environment that
// registers again is a new one, and the old one stays connected.
func (s *Server) registerEnv(b []byte) (any, error) {
	m, err := body(b, registerEnv)
	if err != nil {
		return nil, err
	}
	st := &s.st
	if !st.hasStarted || !st.started {
		return map[string]string{"status": "wait for trainer to start"}, nil
	}
	st.hasEnvs = true
	name := m["desired_name"].(string)
	same := 0
	for _, e := range st.envs {
		if e.DesiredName == name {
			same++
		}
	}
	e := env{MaxContextLen: intOf(m["max_token_length"]), Weight: floatOf(m["weight"]), DesiredName: name,
		RealName: fmt.Sprintf("%s_%d", name, same), RegisteredID: len(st.envs), Connected: true, GroupSize: intOf(m["group_size"])}
	if v := m["min_batch_allocation"]; v != nil {
		f := floatOf(v)
		e.MinBatchAllocation = &f
	}
	st.envs = append(st.envs, e)
	if !st.hasStep || !st.hasTrainer {
		return nil, errServer // app.state.status_dict / save_checkpoint_interval missing
	}
	return map[string]any{"status": "success", "env_id": e.RegisteredID, "wandb_name": e.RealName,
		"checkpoint_dir": st.checkpointDir, "starting_step": st.step, "checkpoint_interval": st.checkpointEvery,
		"num_steps": st.numSteps}, nil
}

// disconnectEnv is server.py disconnect_env (lines 325-331): failures
// are answered, not raised: an unknown env_id is HTTP 200 {"status":
// "failure", "error": "list index out of range"}.
func (s *Server) disconnectEnv(b []byte) (any, error) {
	m, err := body(b, envIdentifier)
	if err != nil {
		return nil, err
	}
	if !s.st.hasEnvs {
		return map[string]string{"status": "failure", "error": "'State' object has no attribute 'envs'"}, nil
	}
	i, ok := pyIndex(intOf(m["env_id"]), len(s.st.envs))
	if !ok {
		return map[string]string{"status": "failure", "error": "list index out of range"}, nil
	}
	s.st.envs[i].Connected = false
	return map[string]string{"status": "success"}, nil
}

func (s *Server) wandbInfo([]byte) (any, error) {
	return map[string]any{"group": s.st.wandbGroup, "project": s.st.wandbProject}, nil
}

// info is server.py info (lines 342-350): -1, -1 until the trainer
// registers.
func (s *Server) info([]byte) (any, error) {
	if !s.st.hasBatch || !s.st.hasMaxTok {
		return map[string]int{"batch_size": -1, "max_token_len": -1}, nil
	}
	return map[string]int{"batch_size": s.st.batchSize, "max_token_len": s.st.maxTokenLen}, nil
}

// batch is server.py get_batch (lines 353-408): the first call marks the
// trainer started (363-364);
// a batch is exactly batch_size sequences; every batch that can be made
// is cut at once, the step advances by their number, and they are handed
// out last first.
func (s *Server) batch([]byte) (any, error) {
	st := &s.st
	if !st.hasStarted {
		return map[string]any{"status": "error", "message": "Trainer not registered. Call /register first.", "batch": []any{}}, nil
	}
	st.started = true
	if n := len(st.currBatch); n > 0 {
		b := st.currBatch[n-1]
		st.currBatch = st.currBatch[:n-1]
		return map[string]any{"batch": dicts(b)}, nil
	}
	if !st.hasQueue || !st.hasBatch {
		return nil, errServer // app.state.queue deleted by /reset_data
	}
	minimums := false
	for _, e := range st.envs {
		minimums = minimums || e.MinBatchAllocation != nil
	}
	grab := func() []group {
		var b []group
		if minimums {
			b, st.queue = grabWithMinimums(st.queue, st.batchSize, st.envs)
		} else {
			b, st.queue = grabExact(st.queue, st.batchSize)
		}
		return b
	}
	var batches [][]group
	for b := grab(); b != nil; b = grab() {
		batches = append(batches, b)
	}
	if len(batches) == 0 {
		return map[string]any{"batch": nil}, nil
	}
	st.step += len(batches)
	st.currBatch = append(st.currBatch, batches...)
	n := len(st.currBatch)
	b := st.currBatch[n-1]
	st.currBatch = st.currBatch[:n-1]
	return map[string]any{"batch": dicts(b)}, nil
}

func dicts(b []group) []map[string]json.RawMessage {
	out := make([]map[string]json.RawMessage, len(b))
	for i, g := range b {
		out[i] = g.raw
	}
	return out
}

// latestExample is server.py get_latest_example.
func (s *Server) latestExample([]byte) (any, error) {
	if s.st.latest == nil {
		return map[string]any{"tokens": []any{}, "masks": []any{}, "scores": []any{}, "advantages": []any{},
			"ref_logprobs": []any{}, "generation_params": []any{}, "inference_logprobs": []any{}, "messages": []any{}, "images": []any{}}, nil
	}
	return s.st.latest, nil
}

// scoredData is server.py scored_data.
func (s *Server) scoredData(b []byte) (any, error) {
	m, err := body(b, scoredData)
	if err != nil {
		return nil, err
	}
	return s.process(m)
}

// scoredDataList is server.py scored_data_list: the whole list is
// validated before any item is processed.
func (s *Server) scoredDataList(b []byte) (any, error) {
	v, err := decode(b)
	if err != nil {
		return nil, invalid([]any{"body"}, "JSON decode error")
	}
	list, ok := v.([]any)
	if !ok {
		return nil, invalid([]any{"body"}, "Input should be a valid list")
	}
	items := make([]map[string]any, len(list))
	for i, x := range list {
		m, verr := model(x, scoredData, []any{"body", i})
		if verr != nil {
			return nil, verr
		}
		items[i] = m
	}
	buffered, last := 0, -1
	for _, m := range items {
		res, err := s.process(m)
		if err != nil {
			return nil, err
		}
		if r := res.(map[string]any); r["status"] == "buffered" {
			buffered++
			last = r["buffer_size"].(int)
		}
	}
	resp := map[string]any{"status": "received", "groups_processed": len(items)}
	if buffered > 0 {
		resp["buffered"] = buffered
		if last >= 0 {
			resp["last_buffer_size"] = last
		}
	}
	return resp, nil
}

// process is server.py _process_scored_data: a group of the environment's
// group size is queued; another length waits in the environment's buffer
// until buffered groups add up to its group size.
func (s *Server) process(m map[string]any) (any, error) {
	st := &s.st
	if !st.hasQueue {
		st.hasQueue, st.queue = true, nil
	}
	if st.buffer == nil {
		st.buffer = map[int][]group{}
	}
	g := group{raw: map[string]json.RawMessage{}, size: len(m["tokens"].([]any))}
	for _, f := range scoredData {
		raw, _ := json.Marshal(m[f.name])
		g.raw[f.name] = raw
	}
	taken := Taken{Life: s.life, Group: g.raw, At: time.Now(), Status: "received"}
	if v := m["env_id"]; v != nil {
		id := intOf(v)
		g.envID, taken.EnvID = &id, &id
		if id < len(st.envs) {
			i, ok := pyIndex(id, len(st.envs))
			if !ok {
				return nil, errServer // IndexError
			}
			if want := st.envs[i].GroupSize; g.size != want {
				st.buffer[id] = append(st.buffer[id], g)
				if idx := findGroupsSummingTo(st.buffer[id], want); idx != nil {
					var add []group
					for j := len(idx) - 1; j >= 0; j-- {
						add = append(add, st.buffer[id][idx[j]])
						st.buffer[id] = append(st.buffer[id][:idx[j]], st.buffer[id][idx[j]+1:]...)
					}
					for j := len(add) - 1; j >= 0; j-- {
						st.queue = append(st.queue, add[j])
						st.latest = mustJSON(add[j].raw)
					}
				}
				size := 0
				for _, x := range st.buffer[id] {
					size += x.size
				}
				taken.Status = "buffered"
				s.taken = append(s.taken, taken)
				return map[string]any{"status": "buffered", "buffer_size": size}, nil
			}
		}
	}
	st.queue = append(st.queue, g)
	st.latest = mustJSON(g.raw)
	s.taken = append(s.taken, taken)
	return map[string]any{"status": "received"}, nil
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// status is server.py get_status.
func (s *Server) status([]byte) (any, error) {
	if !s.st.hasStep || !s.st.hasQueue {
		return map[string]int{"current_step": 0, "queue_size": 0}, nil
	}
	return map[string]int{"current_step": s.st.step, "queue_size": len(s.st.queue)}, nil
}

// statusEnv is server.py get_status_env (lines 471-580): the queue as the
// environment
// env_id should count it (its own sequences, and what other environments
// have beyond their minimum allocations, in packs of the largest group
// size), in groups of its group size; the group size it registered grows
// to the largest group it has queued.
func (s *Server) statusEnv(b []byte) (any, error) {
	m, err := body(b, envIdentifier)
	if err != nil {
		return nil, err
	}
	st := &s.st
	if !st.hasEnvs {
		return nil, errServer // AttributeError at line 476: no trainer registered since the start
	}
	envID := intOf(m["env_id"])
	total := 0.0
	for _, e := range st.envs {
		if e.Connected {
			total += float64(e.MaxContextLen) * math.Max(0, e.Weight)
		}
	}
	// It answers for a disconnected environment as for any other.
	i, ok := pyIndex(envID, len(st.envs))
	if !ok {
		return nil, errServer // IndexError at line 480: the API does not hold env_id
	}
	me := st.envs[i]
	groupSize := me.GroupSize
	if total == 0 {
		return nil, errServer // ZeroDivisionError at line 484: no environment connected
	}
	weight := math.Max(0.01, float64(me.MaxContextLen)*me.Weight/total)
	minTotal := 0.0
	for _, e := range st.envs {
		if e.Connected && e.MinBatchAllocation != nil {
			minTotal += *e.MinBatchAllocation
		}
	}
	unallocated := 1 - math.Min(minTotal, 1)
	maxGroup, self := 1, 0
	for _, g := range st.queue {
		maxGroup = max(maxGroup, g.size)
		if g.envID != nil && *g.envID == envID {
			groupSize = max(groupSize, g.size)
			self += g.size
		}
	}
	st.envs[i].GroupSize = groupSize
	batchSize := 0
	if st.hasBatch {
		batchSize = st.batchSize
	}
	minSeqs := map[int]int{}
	for _, e := range st.envs {
		if e.Connected && e.MinBatchAllocation != nil {
			minSeqs[e.RegisteredID] = int(float64(batchSize) * *e.MinBatchAllocation)
		}
	}
	const none = math.MinInt // a group without env_id
	others, mine := map[int]int{}, 0
	for _, g := range st.queue {
		if g.envID != nil && *g.envID == envID {
			mine += g.size
			continue
		}
		id := none
		if g.envID != nil {
			id = *g.envID
		}
		others[id] += g.size
	}
	available := 0
	if maxGroup > 1 {
		for id, n := range others {
			packed := int(math.Ceil(float64(n)/float64(maxGroup))) * maxGroup
			available += max(0, packed-minSeqs[id])
		}
	}
	queue, err := floorDiv(mine+available, groupSize)
	if err != nil {
		return nil, err
	}
	selfQueue, err := floorDiv(self, groupSize)
	if err != nil {
		return nil, err
	}
	if !st.hasStep {
		return map[string]any{"current_step": 0, "queue_size": 0, "unallocated_fraction": 1.0,
			"num_self_sequences_in_queue": 0, "env_weight": weight}, nil
	}
	return map[string]any{"current_step": st.step, "queue_size": queue, "unallocated_fraction": unallocated,
		"self_queue_size": selfQueue, "max_group_size": maxGroup, "env_weight": weight}, nil
}

// resetData is server.py reset_data: it deletes the queue (a KeyError,
// caught, when there is none: then nothing else changes) and forgets the
// trainer and the environments.
func (s *Server) resetData([]byte) (any, error) {
	st := &s.st
	if st.hasQueue {
		*st = state{hasStarted: true, hasEnvs: true, hasBatch: true, hasMaxTok: st.hasMaxTok, hasStep: true,
			hasTrainer: st.hasTrainer, maxTokenLen: st.maxTokenLen, checkpointDir: st.checkpointDir,
			checkpointEvery: st.checkpointEvery, batchSize: -1, numSteps: -1, buffer: map[int][]group{}, latest: st.latest}
	}
	return plainText("Reset successful"), nil
}
