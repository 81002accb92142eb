# The NCCL tree's GPU suite (tests/nccl/gpu_*.cpp, *.cu): needs a GPU to run. gpu_nccl runs the
# one-GPU tests; gpu_nccl_multi the hidden [multi_gpu] ones, which need two GPUs (skipped with a
# reason on fewer: NCCL needs a distinct GPU per rank).
tpipe_gpu_suite(nccl tpipe::nccl)
if(TARGET tpipe_gpu_tests_nccl)
  add_test(NAME gpu_nccl_multi COMMAND tpipe_gpu_tests_nccl "[multi_gpu]")
  set_tests_properties(gpu_nccl_multi PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu TIMEOUT 300 ENVIRONMENT TPIPE_GPU_MIN_DEVICES=2)
endif()
