// Lesson 2: token slices (TeraPipe) through a causal stage that keeps a K/V-style cache.
//
// A sequence is cut into token slices [t0, t1) that flow through the stages one after another.
// A causal stage sees slice k only after slices 0..k-1 of the same rows, so it carries what
// attention needs from the earlier tokens (here: a running sum, as a K/V cache would) from one
// slice to the next. Backward runs the slices of a microbatch in reverse order, and gradients
// that later tokens send to earlier ones (the dK/dV) are accumulated and added when the earlier
// slice's backward runs. The program checks that training on 4 slices per sequence gives the
// same weights, bit for bit, as training on whole sequences.
//
//   build/examples/lesson_token_slices
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include <tpipe/tpipe.hpp>

using vec = std::vector<float>;  // [rows][tokens][width] of one unit, row-major
constexpr int width = 4, seq_len = 16, batch_rows = 4;

//! Per token: h = tanh(w * x), elementwise. No state across tokens.
struct token_mix {
    using input = vec;
    using output = vec;
    vec w = vec(width, 0.8f), dw = vec(width, 0.f);
    std::map<std::pair<int, int>, vec> x_of;  // (microbatch, slice) -> input, for backward

    vec forward(const tpipe::unit& u, vec x)
    {
        vec h(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) h[i] = std::tanh(w[i % width] * x[i]);
        x_of[{u.microbatch, u.slice}] = std::move(x);
        return h;
    }
    vec backward(const tpipe::unit& u, vec dh)
    {
        auto node = x_of.extract({u.microbatch, u.slice});
        const vec& x = node.mapped();
        vec dx(dh.size());
        for (std::size_t i = dh.size(); i-- > 0;) {  // last token first, as the slices arrive
            const float h = std::tanh(w[i % width] * x[i]), g = dh[i] * (1 - h * h);
            dw[i % width] += g * x[i];
            dx[i] = g * w[i % width];
        }
        return dx;
    }
};

//! Causal: y_t = v * (h_0 + ... + h_t) / (t + 1). The running sum of earlier tokens is the
//! "cache" a later slice needs; its gradient flows back to every earlier token.
struct causal_mean {
    using input = vec;
    using output = vec;
    float v = 0.5f, dv = 0;
    std::map<int, vec> sum_of;   // microbatch -> running sum per (row, feature): the cache
    std::map<int, vec> dsum_of;  // microbatch -> gradient later tokens sent to the earlier ones
    std::map<std::pair<int, int>, vec> mean_of;

    // [snippet:causal]
    vec forward(const tpipe::unit& u, vec h)
    {
        auto& sum = sum_of[u.microbatch];  // empty at the first slice (u.context() == 0)
        if (u.context() == 0) sum.assign(u.rows() * width, 0.f);
        vec mean(h.size());
        for (std::int64_t r = 0; r < u.rows(); ++r)
            for (std::int64_t t = 0; t < u.tokens(); ++t)
                for (int f = 0; f < width; ++f) {
                    const auto i = (r * u.tokens() + t) * width + f;
                    sum[r * width + f] += h[i];
                    mean[i] = sum[r * width + f] / float(u.token_begin + t + 1);
                }
        vec y(mean.size());
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = v * mean[i];
        mean_of[{u.microbatch, u.slice}] = std::move(mean);
        return y;
    }
    vec backward(const tpipe::unit& u, vec dy)
    {
        // Slices arrive last to first: dsum holds what the later slices' tokens sent back.
        auto& dsum = dsum_of[u.microbatch];
        if (dsum.empty()) dsum.assign(u.rows() * width, 0.f);
        auto node = mean_of.extract({u.microbatch, u.slice});
        const vec& mean = node.mapped();
        vec dh(dy.size());
        for (std::int64_t r = 0; r < u.rows(); ++r)
            for (std::int64_t t = u.tokens() - 1; t >= 0; --t)
                for (int f = 0; f < width; ++f) {
                    const auto i = (r * u.tokens() + t) * width + f;
                    dv += dy[i] * mean[i];
                    dsum[r * width + f] += v * dy[i] / float(u.token_begin + t + 1);
                    dh[i] = dsum[r * width + f];  // every token at or after t reads h_t
                }
        if (u.context() == 0) sum_of.erase(u.microbatch), dsum_of.erase(u.microbatch);  // sequence done
        return dh;
    }
    // [/snippet]
};

float input_at(std::int64_t row, std::int64_t token, int f) { return std::sin(0.3f * float(row + 2 * token + 5 * f)); }
//! The unit's rows x tokens x width block of the batch.
vec inputs(const tpipe::unit& u)
{
    vec x;
    for (auto r = u.row_begin; r < u.row_end; ++r)
        for (auto t = u.token_begin; t < u.token_end; ++t)
            for (int f = 0; f < width; ++f) x.push_back(input_at(r, t, f));
    return x;
}
//! Loss: mean of (y - 0.1)^2 over the batch; returns dL/dy.
vec loss_gradient(const vec& y, double& total)
{
    const float n = float(batch_rows * seq_len * width);
    vec dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) total += double(y[i] - 0.1f) * (y[i] - 0.1f) / n, dy[i] = 2 * (y[i] - 0.1f) / n;
    return dy;
}

//! Trains `steps` steps on the units of `units` with `sched`, two stages on two CPU threads.
template <class Schedule>
std::pair<vec, float> train(const tpipe::scheme& units, const Schedule& sched, int steps)
{
    auto pipe = tpipe::pipeline(token_mix{}, causal_mean{});
    tpipe::cpu_engine cpu{2};
    tpipe::runner r(pipe, sched.program(tpipe::topology{.ranks = 2}, units), cpu);
    double loss = 0;
    tpipe::io_for<decltype(pipe)> io;
    io.source = inputs;
    io.output_grad = [&](const tpipe::unit&, vec&& y) { return loss_gradient(y, loss); };
    for (int step = 0; step < steps; ++step) {
        loss = 0;
        r.run(io);
        auto& mix = pipe.stage<0>();
        auto& causal = pipe.stage<1>();
        for (int f = 0; f < width; ++f) mix.w[f] -= 0.5f * mix.dw[f], mix.dw[f] = 0;
        causal.v -= 0.5f * causal.dv, causal.dv = 0;
        if (step % 10 == 0) std::printf("  step %2d  loss %.6f\n", step, loss);
    }
    return {pipe.stage<0>().w, pipe.stage<1>().v};
}

int main()
{
    const tpipe::batch_shape batch{.rows = batch_rows, .seq_len = seq_len};
    // 4 microbatches of 1 row, each sequence cut into token slices of 3, 5, 4 and 4 tokens
    // (tpipe::plan_slices chooses such lengths from a latency model: docs/planner.md). One row
    // per microbatch keeps every sum in the same order as on whole sequences, so the weights
    // are equal bit for bit; with several rows per unit they agree up to rounding.
    std::printf("token slices 3,5,4,4 with terapipe-1f1b:\n");
    // [snippet:slices]
    const auto sliced = train(tpipe::grid_slicer{.microbatches = 4, .lengths = {3, 5, 4, 4}}.scheme(batch),
                              tpipe::terapipe_1f1b{}, 30);
    // [/snippet]
    std::printf("whole sequences with 1f1b:\n");
    const auto whole = train(tpipe::microbatch_slicer{.count = 4}.scheme(batch), tpipe::one_f_one_b{}, 30);
    const bool same = sliced == whole;
    std::printf("token-sliced weights %s the whole-sequence ones\n", same ? "equal (bitwise)" : "DIFFER from");
    return same ? 0 : 1;
}
