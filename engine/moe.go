package engine

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tarfa-ai/tarfa/backend"
	"github.com/tarfa-ai/tarfa/expertstream"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/ledger"
	"github.com/tarfa-ai/tarfa/weights"
)

// moe is the routed-expert block (plus the shared expert when the model has
// one). The router runs on the backend and its top-k ids come back to the
// host (the step's one synchronisation in this layer); the (row, slot)
// pairs are grouped by expert, each expert is fetched once per step and
// evaluated for all rows routed to it, as the source places it — bound
// from a device slot that holds it, filled into a device slot and bound, or
// from its verified bytes on the device or on the host — and each row's k
// slot outputs are combined in slot order. The engine keeps no residency
// of its own: the source (the tier's device and RAM levels) decides it.
func (w *work) moe(ctx context.Context, L *layer, segs []segment, x, out backend.Buf, T int) error {
	m, c, q := w.m, w.m.cfg, w.q
	E, k, H, I := c.Experts, c.TopK, c.Hidden, c.MoEIntermediate
	logits := w.buf(&w.logits, T*E)
	wts := w.buf(&w.wts, T*k)
	idx := grow(&w.idx, T*k)
	q.MatMul(logits, L.router, x, T)
	q.Route(idx, wts, logits, T, E, k, c.NormTopKProb)
	// The combine weights come back to the host only for a ledger.
	ledgered := false
	for _, sg := range segs {
		ledgered = ledgered || sg.s.ledger != nil
	}
	var wH []float32
	if ledgered {
		wH = grow(&w.wH, T*k)
		q.Read(wH, wts)
	}
	hinter, hinting := m.experts.(Hinter)
	if hinting {
		w.hintRoute(L, x, T)
	}
	split := m.host != nil && m.place.mayUseHost()
	if split {
		xH, _ := w.growHost(&w.xH, &w.xHB, T*H)
		q.Read(xH, x)
	}
	if err := w.sync(); err != nil {
		return err
	}
	if ledgered {
		for _, sg := range segs {
			r0, r1 := sg.row0, sg.row0+sg.n
			sg.s.ledger.Route(L.index, idx[r0*k:r1*k], wH[r0*k:r1*k], k)
		}
	}
	if hinting {
		w.hint(hinter, L, segs)
	}
	for _, sg := range segs {
		r1 := sg.row0 + sg.n
		st := &sg.s.st.layers[L.index]
		st.last = append(st.last[:0], idx[(r1-1)*k:r1*k]...)
	}

	// Group the T·k (row, slot) pairs by expert (counting sort).
	cnt := grow(&w.cnt, E)
	start := grow(&w.start, E+1)
	order := grow(&w.order, T*k)
	clear(cnt)
	for _, e := range idx {
		if e < 0 || int(e) >= E {
			return fmt.Errorf("engine: layer %d: router chose expert %d of %d", L.index, e, E)
		}
		cnt[e]++
	}
	start[0] = 0
	for e := range E {
		start[e+1] = start[e] + cnt[e]
	}
	copy(cnt, start[:E])
	for i, e := range idx {
		order[cnt[e]] = i
		cnt[e]++
	}
	pairTok := grow(&w.pairTok, T*k)
	pairRow := grow(&w.pairRow, T*k)
	for j, p := range order {
		pairTok[j], pairRow[j] = int32(p/k), int32(p)
	}
	xe := w.buf(&w.xe, T*k*H)
	q.Gather(xe, x, pairTok, H)
	// The shared expert needs no route: queued now, the device computes it
	// while the host places the routed experts (their copies, the host's
	// share); its gated output is added last, as before.
	var ys, gl backend.Buf
	if L.shared != nil {
		ys = w.buf(&w.ss, T*H)
		w.mlp(L.shared, x, ys, T)
		gl = w.buf(&w.gl, T)
		q.MatMul(gl, L.sharedGate, x, T)
	}
	w.buf(&w.ge, T*k*I)
	w.buf(&w.ue, T*k*I)
	ye := w.buf(&w.ye, T*k*H)

	perTok := grow(&w.perToken, T)
	clear(perTok)
	need := w.need[:0]
	for e := range E {
		if start[e+1] > start[e] {
			need = append(need, e)
		}
	}
	w.need = need
	pick := grow(&w.hostPick, E)
	clear(pick)
	if _, balance := m.place.(balancePlacer); balance && split {
		w.placeStats.beginLayer()
		if mt, ok := m.be.(backend.Meter); ok && L.index == m.firstMoE {
			c := mt.Counters() // once a step: it copies the backend's map of kernel times
			w.placeStats.copyRate(c.H2DBytes, c.H2DSeconds)
		}
	}
	u := &w.use
	*u = moeUse{w: w, L: L, segs: segs, order: order, start: start, perTok: perTok, k: k, H: H, I: I, split: split, ledgered: ledgered, pick: pick, left: len(need)}
	if g, ok := w.q.(backend.Grouper); ok {
		u.group = g
		w.held = grow(&w.held, len(need))[:0]
	}
	// The work outlives the step: it must keep no session alive (segs
	// can point into a Session: its own Forward's segment), or a session
	// dropped without Close is never collected and its cleanup never runs.
	defer func() { u.segs = nil }()
	if len(need) > 0 {
		err := m.experts.Stream(ctx, L.index, need, u)
		// Slots still bound (a Stream that failed or stopped short) are
		// let go uncomputed: the step fails below.
		for i := range w.held {
			w.q.ReleaseExpert(&w.held[i].x)
		}
		w.held = w.held[:0]
		if err != nil {
			return err
		}
	}
	if w.err != nil {
		return w.err
	}
	for t, n := range perTok {
		if n != k {
			return fmt.Errorf("engine: layer %d token %d: %d experts evaluated, want top-k = %d", L.index, t, n, k)
		}
	}
	slots := w.buf(&w.slots, T*k*H)
	q.Scatter(slots, ye, pairRow, H)
	q.Combine(out, slots, wts, T, k, H)

	if L.shared != nil {
		q.GateAdd(out, ys, gl, T, H)
	}
	return nil
}

// moeUse computes one MoE step's experts as the source delivers them: for
// expert e, the rows of the pairs routed to it (rows start[e]..start[e+1]
// of the grouped buffers). Consume runs on the step's goroutine.
type moeUse struct {
	w            *work
	L            *layer
	segs         []segment
	order, start []int
	perTok       []int
	k, H, I      int
	split        bool // experts may be placed on the host
	ledgered     bool // some segment's session has a ledger
	// group, when the queue has one, computes the experts bound from
	// device slots together (w.held), once the last of the step's left
	// experts has been delivered: each keeps its rows and its bits, and the
	// device runs them in one launch per stage instead of one per expert.
	group backend.Grouper
	left  int
	// pick is each expert's placement once decided (PreferHost, Consume):
	// 0 not yet, 1 the host, 2 the device; one decision an expert a step.
	pick []int8
}

var _ expertstream.HostPlacer = (*moeUse)(nil)
var _ expertstream.Prefiller = (*moeUse)(nil)

// Prefill implements expertstream.Prefiller: it fills p.Slot on the step's
// queue with the verified copy of an expert of a later layer (the
// source's device prefetch), checked against the manifest first; it
// computes nothing and records no use.
func (u *moeUse) Prefill(p expertstream.Placed) error {
	w, m := u.w, u.w.m
	ve, id := p.Host, p.ID
	if err := m.checkExpert(id.Layer, id.Expert, ve); err != nil {
		return err
	}
	sq, ok := w.q.(backend.SlotQueue)
	if !ok {
		return fmt.Errorf("engine: prefetch of %s into a device slot, and the %s backend has none", id, m.be.Name())
	}
	if err := sq.FillSlot(p.Slot, id, ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), u.I, u.H); err != nil {
		return fmt.Errorf("engine: prefetch of %s: %w", id, err)
	}
	return nil
}

// PreferHost implements expertstream.HostPlacer: the placement's choice
// for expert e, whose verified copy the source keeps in RAM, against a
// copy into a device slot (never, for a placement that leaves RAM copies
// to the device level).
func (u *moeUse) PreferHost(e int, bytes int64) bool {
	return u.w.m.place.takesRAMCopies() && u.onHost(e, bytes)
}

// onHost decides, once a step, whether expert e of bytes is computed on
// the host.
func (u *moeUse) onHost(e int, bytes int64) bool {
	if !u.split || e < 0 || e >= len(u.pick) {
		return false
	}
	if u.pick[e] == 0 {
		u.pick[e] = 2
		if u.w.m.place.onHost(&u.w.placeStats, bytes, u.start[e+1]-u.start[e]) {
			u.pick[e] = 1
		}
	}
	return u.pick[e] == 1
}

// heldExpert is an expert bound from a device slot, waiting for the
// layer's grouped compute.
type heldExpert struct {
	e int
	x backend.Expert
}

// Consume evaluates expert e as the source placed it (consume); after the
// layer's last expert it computes those held for the grouped launch, still
// inside the source's leases.
func (u *moeUse) Consume(e int, p expertstream.Placed, tier ledger.Tier) error {
	u.left--
	if err := u.consume(e, p, tier); err != nil {
		return err
	}
	if u.left == 0 && len(u.w.held) > 0 {
		u.computeHeld()
	}
	return nil
}

// bound computes expert e, bound in w.x3 from a device slot: now, or held
// for the grouped launch.
func (u *moeUse) bound(e int) {
	w := u.w
	if u.group == nil {
		u.compute(e, &w.x3)
		w.q.ReleaseExpert(&w.x3)
		w.m.onDevice.Add(1)
		return
	}
	w.held = append(w.held, heldExpert{e: e, x: w.x3})
	w.x3 = backend.Expert{}
}

// computeHeld evaluates the held experts for their rows: gate and up of
// all of them in one grouped product, the SiLU·up of each run of held
// experts whose rows are contiguous in one call (an elementwise function:
// each element's bits are the same whatever the call covers; with every
// expert of the step held, one call), then every down product in one
// more; then lets their slots go.
func (u *moeUse) computeHeld() {
	w, q := u.w, u.w.q
	H, I := u.H, u.I
	// In row order (experts in increasing order: their rows follow each
	// other), so that contiguous runs are found by one pass.
	slices.SortFunc(w.held, func(a, b heldExpert) int { return cmp.Compare(a.e, b.e) })
	ops := w.mmOps[:0]
	for i := range w.held {
		h := &w.held[i]
		a, b := u.start[h.e], u.start[h.e+1]
		xe := w.xe.Rows(a, b, H)
		ops = append(ops, backend.MatMulOp{Y: w.ge.Rows(a, b, I), W: &h.x.Gate, X: xe, T: b - a},
			backend.MatMulOp{Y: w.ue.Rows(a, b, I), W: &h.x.Up, X: xe, T: b - a})
	}
	u.group.MatMuls(ops)
	ops = ops[:0]
	for i := 0; i < len(w.held); {
		a, b := u.start[w.held[i].e], u.start[w.held[i].e+1]
		j := i + 1
		for ; j < len(w.held) && u.start[w.held[j].e] == b; j++ {
			b = u.start[w.held[j].e+1]
		}
		ge := w.ge.Rows(a, b, I)
		q.SiLUMul(ge, ge, w.ue.Rows(a, b, I))
		i = j
	}
	for i := range w.held {
		h := &w.held[i]
		a, b := u.start[h.e], u.start[h.e+1]
		ops = append(ops, backend.MatMulOp{Y: w.ye.Rows(a, b, H), W: &h.x.Down, X: w.ge.Rows(a, b, I), T: b - a})
	}
	u.group.MatMuls(ops)
	w.mmOps = ops[:0]
	for i := range w.held {
		u.done(w.held[i].e)
		q.ReleaseExpert(&w.held[i].x)
		w.m.onDevice.Add(1)
	}
	w.held = w.held[:0]
}

func (u *moeUse) consume(e int, p expertstream.Placed, tier ledger.Tier) error {
	w, m := u.w, u.w.m
	a, b := u.start[e], u.start[e+1]
	n := b - a
	if n == 0 {
		return fmt.Errorf("engine: layer %d: the expert source delivered expert %d, which no token was routed to", u.L.index, e)
	}
	if p.Slot != nil && p.Filled {
		// A device hit: the slot must hold this model's expert, by the
		// manifest's digest.
		if id := (weights.ExpertID{Layer: u.L.index, Expert: e}); p.ID != id {
			return fmt.Errorf("engine: asked for layer %d expert %d, got a slot holding %s", u.L.index, e, p.ID)
		}
		if m.digests != nil && p.Digest != m.digests[u.L.index][e] {
			return fmt.Errorf("engine: layer %d expert %d: the slot holds %s, the manifest's digest is %s", u.L.index, e, p.Digest, m.digests[u.L.index][e])
		}
		sq, ok := w.q.(backend.SlotQueue)
		if !ok {
			return fmt.Errorf("engine: layer %d expert %d: the source placed it in a device slot, and the %s backend has none", u.L.index, e, m.be.Name())
		}
		u.account(e, p.Digest, tier, 0)
		if err := sq.BindSlot(&w.x3, p.Slot, p.ID, p.Digest); err != nil {
			return fmt.Errorf("engine: layer %d expert %d: %w", u.L.index, e, err)
		}
		u.bound(e)
		return nil
	}
	ve := p.Host
	if err := m.checkExpert(u.L.index, e, ve); err != nil {
		return err
	}
	if tier == ledger.TierStorage {
		m.fetches[u.L.index].Add(1)
	}
	hashed := int64(0)
	if tier == ledger.TierStorage {
		hashed = ve.Bytes()
	}
	u.account(e, ve.Digest(), tier, hashed)
	if p.Slot != nil {
		// Admitted to the device level: fill the slot on this queue, then
		// compute from it.
		sq, ok := w.q.(backend.SlotQueue)
		if !ok {
			return fmt.Errorf("engine: layer %d expert %d: the source placed it in a device slot, and the %s backend has none", u.L.index, e, m.be.Name())
		}
		t0 := time.Now()
		if err := sq.FillSlot(p.Slot, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), u.I, u.H); err != nil {
			return fmt.Errorf("engine: layer %d expert %d: %w", u.L.index, e, err)
		}
		if u.split {
			w.placeStats.deviceDone(ve.Bytes(), time.Since(t0))
		}
		if err := sq.BindSlot(&w.x3, p.Slot, ve.ID(), ve.Digest()); err != nil {
			return fmt.Errorf("engine: layer %d expert %d: %w", u.L.index, e, err)
		}
		u.bound(e)
		return nil
	}
	if u.onHost(e, ve.Bytes()) {
		return u.host(e, ve)
	}
	t0 := time.Now()
	if err := w.q.LoadExpert(&w.x3, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), u.I, u.H); err != nil {
		return fmt.Errorf("engine: layer %d expert %d: %w", u.L.index, e, err)
	}
	if u.split {
		w.placeStats.deviceDone(ve.Bytes(), time.Since(t0))
	}
	u.compute(e, &w.x3)
	// The views end here: the source may recycle the copy.
	w.q.ReleaseExpert(&w.x3)
	m.onDevice.Add(1)
	return nil
}

// compute evaluates expert e on the step's queue for its rows.
func (u *moeUse) compute(e int, x *backend.Expert) {
	w, q := u.w, u.w.q
	H, I := u.H, u.I
	a, b := u.start[e], u.start[e+1]
	n := b - a
	xe, ge, ue, ye := w.xe.Rows(a, b, H), w.ge.Rows(a, b, I), w.ue.Rows(a, b, I), w.ye.Rows(a, b, H)
	q.MatMul(ge, &x.Gate, xe, n)
	q.MatMul(ue, &x.Up, xe, n)
	q.SiLUMul(ge, ge, ue)
	q.MatMul(ye, &x.Down, ge, n)
	u.done(e)
}

// host evaluates expert e on the host CPU from the verified bytes in place
// (no copy to the device) and sends its output rows to the device.
func (u *moeUse) host(e int, ve weights.VerifiedExpert) error {
	w, m := u.w, u.w.m
	H, I := u.H, u.I
	a, b := u.start[e], u.start[e+1]
	n := b - a
	var x backend.Expert
	if err := backend.ViewExpert(&x, ve.ID(), ve.Digest(), ve.Gate(), ve.Up(), ve.Down(), I, H); err != nil {
		return fmt.Errorf("engine: layer %d expert %d: %w", u.L.index, e, err)
	}
	t0 := time.Now()
	T := len(w.perToken)
	_, xeB := w.growHost(&w.xeH, &w.xeHB, T*u.k*H)
	_, geB := w.growHost(&w.geH, &w.geHB, T*u.k*I)
	_, ueB := w.growHost(&w.ueH, &w.ueHB, T*u.k*I)
	yeH, yeB := w.growHost(&w.yeH, &w.yeHB, T*u.k*H)
	hq := w.hq
	xe, ge, ue, ye := xeB.Rows(a, b, H), geB.Rows(a, b, I), ueB.Rows(a, b, I), yeB.Rows(a, b, H)
	hq.Gather(xe, w.xHB.Slice(0, T*H), w.pairTok[a:b], H)
	hq.MatMul(ge, &x.Gate, xe, n)
	hq.MatMul(ue, &x.Up, xe, n)
	hq.SiLUMul(ge, ge, ue)
	hq.MatMul(ye, &x.Down, ge, n)
	if err := hq.Sync(); err != nil {
		return fmt.Errorf("engine: layer %d expert %d on the host: %w", u.L.index, e, err)
	}
	w.placeStats.hostDone(ve.Bytes(), n, time.Since(t0))
	w.q.Write(w.ye.Rows(a, b, H), yeH[a*H:b*H])
	m.onHost.Add(1)
	u.done(e)
	return nil
}

// done counts expert e's pairs as evaluated.
func (u *moeUse) done(e int) {
	a, b := u.start[e], u.start[e+1]
	for _, p := range u.order[a:b] {
		u.perTok[p/u.k]++
	}
	u.w.m.evals[u.L.index].Add(int64(b - a))
}

// account records one use of expert e in the ledgers of the segments whose
// rows were routed to it (the bytes hashed for it go to the first one).
func (u *moeUse) account(e int, digest jnf.Digest, tier ledger.Tier, hashed int64) {
	if !u.ledgered {
		return
	}
	a, b := u.start[e], u.start[e+1]
	if len(u.segs) == 1 {
		u.segs[0].s.ledger.UseExpert(u.L.index, e, digest, tier, b-a, hashed)
		return
	}
	w := u.w
	cnt := grow(&w.segPairs, len(u.segs))
	clear(cnt)
	for _, p := range u.order[a:b] {
		r := p / u.k
		for i := range u.segs {
			if r < u.segs[i].row0+u.segs[i].n {
				cnt[i]++
				break
			}
		}
	}
	for i, n := range cnt {
		if n > 0 {
			u.segs[i].s.ledger.UseExpert(u.L.index, e, digest, tier, n, hashed)
			hashed = 0
		}
	}
}

// hintRoute enqueues the prediction of the next MoE layer's experts for
// the step's last row: that layer's router on this layer's input (a cheap
// and well-known predictor). It changes nothing the model computes.
func (w *work) hintRoute(L *layer, x backend.Buf, T int) {
	m, c := w.m, w.m.cfg
	if L.nextMoE < 0 {
		return
	}
	E, k, H := c.Experts, c.TopK, c.Hidden
	lg := w.buf(&w.hintLogits, E)
	hw := w.buf(&w.hintW, k)
	w.q.MatMul(lg, m.layers[L.nextMoE].router, x.Rows(T-1, T, H), 1)
	w.q.Route(grow(&w.hintIdx, k), hw, lg, 1, E, k, c.NormTopKProb)
}

// hint tells a source which experts to expect next: for the next MoE layer
// of the step's last token, those hintRoute predicted and those the
// previous token used; after the last MoE layer, the first MoE layer's
// experts of this token.
func (w *work) hint(h Hinter, L *layer, segs []segment) {
	m := w.m
	hint := w.hintList[:0]
	add := func(e int32) {
		for _, x := range hint {
			if x == int(e) {
				return
			}
		}
		hint = append(hint, int(e))
	}
	next := L.nextMoE
	if next >= 0 {
		for _, e := range w.hintIdx {
			add(e)
		}
	} else {
		next = m.firstMoE
	}
	for _, e := range segs[len(segs)-1].s.st.layers[next].last {
		add(e)
	}
	w.hintList = hint
	if len(hint) > 0 {
		h.Hint(next, hint)
	}
}
