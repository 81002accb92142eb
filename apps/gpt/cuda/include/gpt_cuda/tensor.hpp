#pragma once
// A view of a tensor the CUDA GPT's kernels read or write: pointer, shape, how many elements the
// buffer behind the pointer holds (when known) and which memory it is in. Launchers check every
// view against the shape the kernel needs before anything is enqueued, so a wrong size is a
// tpipe::invalid_argument naming the kernel, the tensor and both shapes, never a stray write on
// the device. No CUDA header: the checks run (and are tested) on the host.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include <tpipe/core/error.hpp>

namespace gpt::cuda {

//! Up to three dimensions, e.g. [n, d] for n token rows of width d.
struct shape {
    std::array<std::int64_t, 3> dim{};
    int rank = 0;

    shape() = default;
    shape(std::initializer_list<std::int64_t> dims)
    {
        if (dims.size() > dim.size()) throw tpipe::invalid_argument("gpt::cuda::shape: at most 3 dimensions");
        for (auto d : dims) dim[static_cast<std::size_t>(rank++)] = d;
    }
    std::int64_t count() const
    {
        std::int64_t n = 1;
        for (int i = 0; i < rank; ++i) n *= dim[static_cast<std::size_t>(i)];
        return n;
    }
    bool operator==(const shape& o) const
    {
        if (rank != o.rank) return false;
        for (int i = 0; i < rank; ++i)
            if (dim[static_cast<std::size_t>(i)] != o.dim[static_cast<std::size_t>(i)]) return false;
        return true;
    }
    std::string str() const
    {
        std::string s = "[";
        for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dim[static_cast<std::size_t>(i)]);
        return s + "]";
    }
};

//! Where a view's elements are. `unknown` for raw pointers whose origin the caller did not say.
enum class memory { unknown, host, device };

inline const char* memory_name(memory m)
{
    switch (m) {
    case memory::host: return "host";
    case memory::device: return "device";
    default: return "unknown";
    }
}

template <class T>
struct tensor {
    T* data = nullptr;
    gpt::cuda::shape shape;
    std::int64_t capacity = -1;  //!< elements the buffer holds from `data` on; -1: not known
    gpt::cuda::memory where = memory::unknown;

    //! A read-only view of the same elements.
    template <class U = T>
        requires(!std::is_const_v<U>)
    operator tensor<const U>() const
    {
        return {data, shape, capacity, where};
    }
    std::int64_t count() const { return shape.count(); }
};

//! A view of host memory (a std::vector's data, say), capacity known.
template <class T>
tensor<T> host_view(T* data, shape s, std::int64_t capacity)
{
    return {data, s, capacity, memory::host};
}

namespace detail {
[[noreturn]] inline void refuse_tensor(const char* kernel, const char* name, const std::string& what)
{
    throw tpipe::invalid_argument(std::string("gpt::cuda::") + kernel + ": tensor " + name + " " + what);
}
} // namespace detail

//! Checks that `t` has shape `want`, points somewhere when it has elements, and fits its buffer.
//! `needs` is the memory the executor runs on: a view known to be elsewhere is refused.
template <class T>
void expect_shape(const char* kernel, const char* name, const tensor<T>& t, const shape& want, memory needs)
{
    if (!(t.shape == want))
        detail::refuse_tensor(kernel, name, "has shape " + t.shape.str() + ", the kernel needs " + want.str());
    if (want.count() > 0 && t.data == nullptr)
        detail::refuse_tensor(kernel, name, "is null but has shape " + want.str());
    if (t.capacity >= 0 && t.capacity < want.count())
        detail::refuse_tensor(kernel, name,
                              "has room for " + std::to_string(t.capacity) + " values, its shape " + want.str() +
                                  " needs " + std::to_string(want.count()));
    if (t.where != memory::unknown && needs != memory::unknown && t.where != needs)
        detail::refuse_tensor(kernel, name,
                              std::string("is in ") + memory_name(t.where) + " memory; this executor runs on the " +
                                  memory_name(needs));
}

//! A size argument that must be positive (or non-negative).
inline void expect_size(const char* kernel, const char* name, std::int64_t value, std::int64_t at_least)
{
    if (value < at_least)
        throw tpipe::invalid_argument(std::string("gpt::cuda::") + kernel + ": " + name + " is " +
                                      std::to_string(value) + ", must be >= " + std::to_string(at_least));
}

} // namespace gpt::cuda
