// Streams the runtime creates, and what process-wide caches hold for each.
//
// The cuBLASLt engine (a 32 MiB workspace per stream) and the caching allocator (free lists keyed
// by stream) are process-wide, the streams are not: an engine, an executable or a benchmark
// creates its own. DestroyStream returns what those caches hold for the stream before destroying
// it, so creating and destroying engines in one process does not lose device memory (each
// destroyed stream's workspace stayed allocated before). Built with OPFUSE_CUDA only.
#pragma once
#include <cuda_runtime_api.h>

#include "opfuse/status.h"

namespace opfuse::cuda {

// Frees the stream's cuBLASLt workspace and cached allocator blocks (after its queued work),
// marks its live blocks to be returned to the device when freed, then destroys it. nullptr: no-op.
Status DestroyStream(cudaStream_t stream);

}  // namespace opfuse::cuda
