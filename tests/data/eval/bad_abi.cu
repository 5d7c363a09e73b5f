// Not an eval candidate: no opfuse_eval_launch array.
extern "C" __global__ void opfuse_eval_kernel(const float* x, float* y) {}
