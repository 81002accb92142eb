# Runtime benchmarks compare against oneTBB's parallel_pipeline in the same run.
find_package(TBB REQUIRED)
if(TARGET bench_runtime)
  target_link_libraries(bench_runtime PRIVATE TBB::tbb)
endif()
