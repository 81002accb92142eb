#pragma once
// tpipe::tied_gradient: a parameter that several stages hold a copy of, such as a token embedding
// tied to the LM head (Megatron's shared embedding). Each holder accumulates its own copy's
// gradient in the backward. Before the optimizer steps, every copy's gradient must become the sum
// of all of them, so that the same step on the same gradient keeps the copies equal.
//
//   tpipe::tied_gradient<float> tie({0, K - 1}, vocab * d);  // stages 0 and K-1 hold vocab * d elements
//   tie.hold(0, embedding_grad);                      // the copies held in this process
//   tie.hold(K - 1, head_grad);
//   tie.sum_here();                                   // every holder in this process, or
//   co_await tie.sum(pipeline);                       // every member of the pipeline calls it
//
// Order and bits: the sum starts from +0 and adds the holders' gradients in the order given, so
// it has the same bits wherever the holders run. Over a communicator, each member writes the
// copies it holds into their holders' slots of a buffer (zeros elsewhere) and all-reduces it:
// adding zeros is exact. Two holders share one slot, because a + b = b + a exactly, so the bytes
// are those of one gradient; three or more holders take a slot each. A -0 becomes +0, on both
// paths. A member that holds no copy still calls sum(): it adds zeros.
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/async/task.hpp"
#include "tpipe/comm/communicator.hpp"
#include "tpipe/core/error.hpp"

namespace tpipe {

template <class T = float>
class tied_gradient {
public:
    //! `holders`: the stages that hold a copy, in the order their gradients are added; each copy
    //! has `size` elements.
    tied_gradient(std::vector<int> holders, std::size_t size) : holders_(std::move(holders)), size_(size)
    {
        if (size_ == 0) throw invalid_argument("tied_gradient: a tied parameter of 0 elements");
        if (holders_.size() < 2)
            throw invalid_argument("tied_gradient: a tied parameter needs at least 2 holders, got " +
                                   std::to_string(holders_.size()));
        for (std::size_t i = 0; i < holders_.size(); ++i) {
            if (holders_[i] < 0) throw invalid_argument("tied_gradient: holder " + std::to_string(holders_[i]) + " is not a stage");
            for (std::size_t j = 0; j < i; ++j)
                if (holders_[j] == holders_[i])
                    throw invalid_argument("tied_gradient: stage " + std::to_string(holders_[i]) + " is listed twice as a holder");
        }
        here_.resize(holders_.size());
    }

    //! The gradient of the copy that stage `stage` holds in this process (size() elements; it
    //! must outlive the sums). Registered once per stage.
    void hold(int stage, std::span<T> gradient)
    {
        const std::size_t h = holder(stage);
        if (gradient.size() != size_)
            throw invalid_argument("tied_gradient: stage " + std::to_string(stage) + "'s gradient has " +
                                   std::to_string(gradient.size()) + " elements, the tied parameter " + std::to_string(size_));
        if (held(h)) throw invalid_argument("tied_gradient: stage " + std::to_string(stage) + " is held twice");
        here_[h] = gradient;
    }

    const std::vector<int>& holders() const noexcept { return holders_; }
    std::size_t size() const noexcept { return size_; }
    //! Every holder is in this process: each copy's gradient becomes the sum of all of them.
    void sum_here()
    {
        std::string missing;
        for (std::size_t h = 0; h < holders_.size(); ++h)
            if (!held(h)) missing += (missing.empty() ? "" : ", ") + std::to_string(holders_[h]);
        if (!missing.empty())
            throw invalid_argument("tied_gradient::sum_here: stage(s) " + missing +
                                   " hold a copy but not in this process; sum over their communicator (sum)");
        std::vector<T> total(size_, T(0));
        for (const auto& g : here_)
            for (std::size_t i = 0; i < size_; ++i) total[i] += g[i];
        write(total);
    }

    //! Over the members of `c` (every member calls it, like a collective; each holder's copy is
    //! held by one member, e.g. `c` is one pipeline's processes): each copy held here becomes
    //! the sum of all holders' gradients.
    template <communicator C>
        requires reducible<T>
    task<void> sum(C& c)
    {
        co_await sum_with([&c](std::span<T> v) { return c.all_reduce_sum(v); });
    }
    //! The same with any sum over the members: `all_reduce(span)` returns an awaitable that
    //! leaves the members' elementwise sum of the span on every member.
    template <class AllReduce>
    task<void> sum_with(AllReduce all_reduce)
    {
        const std::size_t slots = holders_.size() == 2 ? 1 : holders_.size();
        std::vector<T> buffer(slots * size_, T(0));
        for (std::size_t h = 0; h < holders_.size(); ++h) {
            if (!held(h)) continue;
            T* slot = buffer.data() + (slots == 1 ? 0 : h * size_);
            for (std::size_t i = 0; i < size_; ++i) slot[i] += here_[h][i];
        }
        co_await all_reduce(std::span<T>(buffer));
        if (slots == 1) {
            for (T& x : buffer) x += T(0);  // a -0 becomes +0, as sum_here's sum from +0 gives
            write(buffer);
            co_return;
        }
        std::vector<T> total(size_, T(0));
        for (std::size_t h = 0; h < slots; ++h)
            for (std::size_t i = 0; i < size_; ++i) total[i] += buffer[h * size_ + i];
        write(total);
    }

private:
    std::size_t holder(int stage) const
    {
        for (std::size_t h = 0; h < holders_.size(); ++h)
            if (holders_[h] == stage) return h;
        std::string list;
        for (int s : holders_) list += (list.empty() ? "" : ", ") + std::to_string(s);
        throw invalid_argument("tied_gradient: stage " + std::to_string(stage) + " is not a holder (" + list + ")");
    }
    bool held(std::size_t h) const noexcept { return here_[h].data() != nullptr; }
    void write(const std::vector<T>& total)
    {
        for (auto& g : here_)
            if (g.data()) std::copy(total.begin(), total.begin() + static_cast<std::ptrdiff_t>(size_), g.begin());
    }

    std::vector<int> holders_;
    std::size_t size_;
    std::vector<std::span<T>> here_;  //!< per holder: its copy's gradient here, or empty
};

} // namespace tpipe
