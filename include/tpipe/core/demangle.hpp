#pragma once
// detail::readable_name(typeid(X)): a type's name as its source spells it, for error messages
// inside one process (`tpipe::cuda::memory_pool`, not GCC's `N5tpipe4cuda11memory_poolE`). Not
// for what processes compare: spellings differ between compilers (tpipe/exec/detail/type_name.hpp
// names payload types for that).
#include <cstdlib>
#include <memory>
#include <string>
#include <typeinfo>
#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

namespace tpipe::detail {

inline std::string readable_name(const std::type_info& t)
{
#if __has_include(<cxxabi.h>)
    int status = 0;
    const std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
    if (status == 0 && name) return name.get();
#endif
    return t.name();  // MSVC's is readable already
}

} // namespace tpipe::detail
