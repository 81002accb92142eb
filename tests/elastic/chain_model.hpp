#pragma once
// The elastic drivers' test model of its own (not the GPT): a chain of scalar units y = w_i x
// with a squared loss. tests/elastic/test_driver.cpp trains it on threads,
// tests/mpi/test_mpi_elastic_driver.cpp over MPI processes.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "tpipe/elastic/freezable_model.hpp"
#include "tpipe/exec/pipeline.hpp"

namespace tpipe_test {

// [snippet:user_model]
// A user's model for tpipe::elastic::thread_driver: units y = w[i] * x, then the loss
// 0.5 (y - target)^2 averaged over the batch; every unit but the last may freeze.
struct chain;

struct chain_stage {  // units [u0, u1) of one pipeline stage
    using input = std::vector<double>;
    using output = std::vector<double>;
    chain* m;
    int u0, u1;
    std::map<int, std::vector<std::vector<double>>> saved;  // per microbatch: each unit's input
    output forward(const tpipe::unit& u, input x);
    input backward(const tpipe::unit& u, output g);
    std::span<double> gradients();
};

struct chain {
    using stage_type = chain_stage;
    using frozen_output = std::vector<double>;  // one sample's value after the frozen units

    std::vector<double> w, grad;
    const std::vector<double>* x;  // the data set: sample k is x[k], its target 1.0
    int frozen = 0;
    double lr = 0.05, loss = 0;
    std::vector<double> in;  // this step's stage-0 inputs, one per row
    std::optional<tpipe::uniform_pipeline<chain_stage>> pipe;
    tpipe::io_for<tpipe::uniform_pipeline<chain_stage>> io_;

    chain(int units, const std::vector<double>& data) : w(static_cast<std::size_t>(units)), grad(w.size()), x(&data)
    {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.9 + 0.05 * static_cast<double>(i);
        io_.source = [this](const tpipe::unit& u) {
            return std::vector<double>(in.begin() + u.row_begin, in.begin() + u.row_end);
        };
        io_.output_grad = [this](const tpipe::unit&, std::vector<double>&& y) {
            for (auto& v : y) {
                loss += 0.5 * (v - 1) * (v - 1) / static_cast<double>(in.size());
                v = (v - 1) / static_cast<double>(in.size());
            }
            return std::move(y);
        };
    }
    std::vector<double> unit_costs() const { return std::vector<double>(w.size(), 1.0); }
    int freezable_units() const { return static_cast<int>(w.size()) - 1; }
    tpipe::uniform_pipeline<chain_stage>& build(const tpipe::elastic::stage_request& r)
    {
        std::vector<chain_stage> stages;
        for (int s = 0; s < r.stages(); ++s) stages.push_back({this, r.cuts[s], r.cuts[s + 1], {}});
        return pipe.emplace(std::move(stages));
    }
    const auto& io() const { return io_; }
    void begin_step(std::span<const std::int64_t> ids, std::vector<frozen_output> outs)
    {
        in.clear();
        for (std::size_t r = 0; r < ids.size(); ++r) in.push_back(outs.empty() ? (*x)[ids[r]] : outs[r][0]);
        std::fill(grad.begin(), grad.end(), 0.0);
        loss = 0;
    }
    double finish_step() { return loss; }
    void optimizer_step()
    {
        for (std::size_t i = static_cast<std::size_t>(frozen); i < w.size(); ++i) w[i] -= lr * grad[i];
    }
    void freeze(int units) { frozen = units; }
    std::vector<std::span<std::byte>> trainable_state() { return {std::as_writable_bytes(std::span<double>(w))}; }
    // For tpipe::mpi::elastic_driver (a process_freezable_model): the gradients it sums over the
    // pipeline's processes.
    tpipe::gradient_view trainable_gradients() { return {.f32 = {}, .f64 = {std::span<double>(grad).subspan(static_cast<std::size_t>(frozen))}}; }
    frozen_output run_frozen(std::int64_t id, std::optional<frozen_output> from, int lo, int hi)
    {
        double v = from ? (*from)[0] : (*x)[static_cast<std::size_t>(id)];
        for (int i = lo; i < hi; ++i) v *= w[static_cast<std::size_t>(i)];
        return {v};
    }
};

inline chain_stage::output chain_stage::forward(const tpipe::unit& u, input v)
{
    auto& ins = saved[u.microbatch];
    for (int i = u0; i < u1; ++i) {
        ins.push_back(v);
        for (auto& e : v) e *= m->w[static_cast<std::size_t>(i)];
    }
    return v;
}
inline chain_stage::input chain_stage::backward(const tpipe::unit& u, output g)
{
    auto ins = std::move(saved.at(u.microbatch));
    saved.erase(u.microbatch);
    for (int i = u1 - 1; i >= u0; --i)
        for (std::size_t r = 0; r < g.size(); ++r) {
            m->grad[static_cast<std::size_t>(i)] += ins[static_cast<std::size_t>(i - u0)][r] * g[r];
            g[r] *= m->w[static_cast<std::size_t>(i)];
        }
    return g;
}
inline std::span<double> chain_stage::gradients() { return std::span<double>(m->grad).subspan(static_cast<std::size_t>(u0), static_cast<std::size_t>(u1 - u0)); }
static_assert(tpipe::elastic::process_freezable_model<chain>);
// [/snippet]

} // namespace tpipe_test
