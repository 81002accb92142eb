# The CUDA tree's GPU suite (tests/cuda/gpu_*.cpp, *.cu): needs a GPU to run.
tpipe_gpu_suite(cuda)
