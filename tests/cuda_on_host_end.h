// The end of a test file that included tests/cuda_on_host.h: its CUDA keywords undefined,
// so that the next file of a unity batch sees none of them.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#undef __align__
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
