// Does not compile.
extern "C" __global__ void opfuse_eval_kernel(const float* x, float* y) { this is not C++; }
