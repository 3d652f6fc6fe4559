package cuda

// Options configures New.
type Options struct {
	// Device is the CUDA device ordinal.
	Device int
	// VRAMBudget bounds the device memory in use as the driver reports it
	// (total − free, the CUDA context included), in bytes; 0: the whole
	// device. Weights that do not fit stay on the host and are computed
	// there, the embedding table first; the expert slots of the pool
	// (SlotPool) take what the budget leaves.
	VRAMBudget int64
	// Reserve is device memory kept free within the budget for sessions
	// (KV caches, recurrent state, scratch) by the expert slots
	// (SlotCapacity, AllocSlot; 0: DefaultReserve, at most an eighth of a
	// budget).
	Reserve int64
	// ExpertSlots bounds the pool's expert slots (0: as many as the budget
	// leaves room for; < 0: none, every streamed expert passes through the
	// queue's two transient slots).
	ExpertSlots int
	// Threads sizes the host CPU backend the device backend computes
	// host-resident weights with (0: all cores).
	Threads int
	// Timing measures the device time of every kernel and host-to-device
	// copy with a pair of CUDA events around each (Counters): for
	// benchmarks, at the cost of two event records per operation.
	Timing bool
	// VerifyCopies hashes every routed expert copied into device memory, on
	// the device, against the digest it was verified with on the host, and
	// fails the step at its synchronisation if the copy differs (digest.go).
	VerifyCopies bool
	// MatMulRows is the weight rows one warp of a MatMul computes: 0
	// chooses (four where the grid of four-row blocks still has a block
	// for every multiprocessor, else one), 1 or 4 forces it (tests and
	// benchmarks). Every row's lane order is the same either way, so the
	// bits are too.
	MatMulRows int
	// MatMulDepth is the chunks of 8 weights a lane of a one-row-a-warp
	// MatMul (and of the grouped experts' MatMuls) loads before it uses
	// the first: 0 chooses (4), 1 or 4 forces it (tests and benchmarks).
	// Each lane still adds its chunks in increasing order, so the bits are
	// the same either way.
	MatMulDepth int
}

// devOptions, when set (only by a device-validation build: ptxdir.go),
// changes the Options every New is given.
var devOptions func(*Options)

// DefaultReserve is the device memory Options.Reserve keeps free for
// sessions by default.
const DefaultReserve = 512 << 20
