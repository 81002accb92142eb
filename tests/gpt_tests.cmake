# Tests of the reference GPT (examples/gpt). Included from tests/CMakeLists.txt.
# tpipe_gpt is defined later (examples/ is added after tests/); link by name.
if(TPIPE_BUILD_EXAMPLES)
  file(GLOB gpt_test_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpt/test_*.cpp)
  add_executable(tpipe_tests_gpt ${gpt_test_sources})
  target_link_libraries(tpipe_tests_gpt PRIVATE tpipe_catch_main tpipe_gpt)
  target_compile_definitions(tpipe_tests_gpt PRIVATE TPIPE_GPT_TEST_DIR="${CMAKE_CURRENT_SOURCE_DIR}/gpt")
  add_test(NAME gpt COMMAND tpipe_tests_gpt)
  set_tests_properties(gpt PROPERTIES TIMEOUT 600)
endif()
