/* libopfuse_capi.so: a small C interface to opfuse's CUDA executor, for measuring opfuse's kernels
 * inside another process with that process's own timing — tools/bench_peer.py loads it with ctypes
 * (--opfuse-lib) to time opfuse and torch.compile side by side in one process (docs/bench.md).
 *
 * A program is one graph (opfuse's text format, e.g. cases.json "graph") built for the CUDA device
 * with one variant, exactly as `opfuse bench ops` builds a case: FusionConfig from the environment,
 * min_tensor_elements 0 for library/jit, jit_single_ops on. Inputs and outputs are device pointers in
 * the graph's declared order (names: opfuse_capi_input_name / output_name); a run enqueues on the
 * given stream (a CUstream / cudaStream_t of the caller's, NULL = the legacy default stream) and does
 * not synchronise. Errors: NULL / nonzero, with a one-line message in err (truncated to err_len). */
#ifndef OPFUSE_CAPI_H_
#define OPFUSE_CAPI_H_
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct opfuse_capi_program opfuse_capi_program;

#if defined(OPFUSE_CAPI_BUILD)
#define OPFUSE_CAPI __attribute__((visibility("default")))
#else
#define OPFUSE_CAPI
#endif

/* variant: "auto", "unfused", "library" or "jit". */
OPFUSE_CAPI opfuse_capi_program* opfuse_capi_create(const char* graph_text, const char* variant, char* err, size_t err_len);
OPFUSE_CAPI int opfuse_capi_num_inputs(const opfuse_capi_program* p);
OPFUSE_CAPI int opfuse_capi_num_outputs(const opfuse_capi_program* p);
OPFUSE_CAPI const char* opfuse_capi_input_name(const opfuse_capi_program* p, int i);
OPFUSE_CAPI const char* opfuse_capi_output_name(const opfuse_capi_program* p, int i);
/* Kernels one run launches (from the plan of the last run; 0 before the first). */
OPFUSE_CAPI int opfuse_capi_kernels_per_run(const opfuse_capi_program* p);
OPFUSE_CAPI int opfuse_capi_run(opfuse_capi_program* p, const void* const* inputs, void* const* outputs, void* stream, char* err,
                    size_t err_len);
OPFUSE_CAPI void opfuse_capi_destroy(opfuse_capi_program* p);

#ifdef __cplusplus
}
#endif
#endif
