#pragma once
// Test helpers: n members of a fake NCCL communicator, each run on a thread of its own.
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fake_nccl.hpp"
#include "tpipe/nccl/basic_communicator.hpp"

namespace tpipe::nccl::fake {

using communicator = basic_communicator<api>;

//! Members 0..n-1 of one fake NCCL communicator (ncclCommInitAll).
inline std::vector<communicator> members(world& w, int n, communicator_options o = {})
{
    std::vector<communicator> out;
    int r = 0;
    for (comm_obj* c : w.init_all(n)) out.emplace_back(api{&w}, c, r++, n, o);
    return out;
}

//! Runs body(rank) on n threads; returns each thread's exception message ("" if none).
inline std::vector<std::string> on_threads(int n, const std::function<void(int)>& body)
{
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    return errors;
}

} // namespace tpipe::nccl::fake
