# The CUDA GPT's GPU suite (tests/gpt_cuda/gpu_*.cpp): the CUDA model against the CPU model, the
# pipeline on cuda::engine against the sequential run. Needs a GPU to run; compiles everywhere.
if(TPIPE_BUILD_EXAMPLES)
  tpipe_gpu_suite(gpt_cuda tpipe_gpt_cuda)
endif()
