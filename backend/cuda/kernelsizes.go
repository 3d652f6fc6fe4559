package cuda

// Launch sizes the kernels are compiled for: each is a #define of
// kernels/ops.cu, which TestKernelSizesMatchSources checks (a block
// launched with another size than its kernel's shared arrays and strides
// assume gives wrong results, or overruns them).
const (
	// softmaxNormThreads is softmax_norm's block (SN_THREADS).
	softmaxNormThreads = 1024
	// argmaxThreads is argmax_rows' block (ARGMAX_THREADS).
	argmaxThreads = 1024
	// RMSNorm's rows of rmsRowMin to rmsRowMax values (the hidden
	// state's) take a block of rmsRowThreads each (rmsnorm_row:
	// RN_THREADS, its shared row RN_MAX); shorter ones (a head's q or k)
	// a warp each, eight rows a block.
	rmsRowThreads = 256
	rmsRowMin     = 1024
	rmsRowMax     = 8192
)
