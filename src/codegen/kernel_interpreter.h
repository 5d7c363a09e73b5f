// CPU execution of the kernel IR — the same program the CUDA emitter turns into a kernel, run by
// an interpreter on HostTensors.
//
// Why an interpreter rather than compiling the emitted code with the host compiler: it needs no
// compiler at run time (CI, sanitizers and the fuzzer stay simple), it is deterministic, and it
// follows the emitter's structure step for step (f32 intermediates, reductions per pass, rounding
// only where the IR says kRound), so a disagreement with the op-by-op CPU reference is a bug in the
// lowering, found without a GPU. Speed is irrelevant here: it only has to be right.
#pragma once
#include <vector>

#include "codegen/kernel_ir.h"
#include "ir/host_tensor.h"

namespace opfuse::codegen {

// `inputs` in kernel input order, `outputs` preallocated (bound shapes) in kernel output order.
Status RunKernelCpu(const Kernel& k, const std::vector<const HostTensor*>& inputs,
                    const std::vector<HostTensor*>& outputs, const Bindings& bindings);

}  // namespace opfuse::codegen
