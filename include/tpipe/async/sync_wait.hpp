#pragma once
// tpipe::sync_wait(task): runs a task to completion on the calling thread, which drives a
// private loop meanwhile (the task may hop to other loops and back). Returns its value or
// rethrows its exception. For tests, tools and main(); never call it from inside a loop.
#include <type_traits>
#include <utility>

#include "tpipe/async/detail/root.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/task.hpp"

namespace tpipe {

template <class T>
decltype(auto) sync_wait(task<T>& t, loop::options opts = {})
{
    loop l(opts);
    bool done = false;  // set on this thread: the root finishes on l
    detail::root r = detail::make_root<T>(t.handle(), &l);
    r.on_done([](void* p) noexcept { *static_cast<bool*>(p) = true; }, &done);
    wake_node start{nullptr, r.handle()};
    l.post(&start);
    l.drive([&] { return done; });
    return t.result();
}

template <class T>
decltype(auto) sync_wait(task<T>&& t, loop::options opts = {})
{
    task<T> owned = std::move(t);
    if constexpr (std::is_void_v<T>) sync_wait(owned, opts);
    else if constexpr (std::is_reference_v<T>) return sync_wait(owned, opts);
    else return T(sync_wait(owned, opts));
}

} // namespace tpipe
