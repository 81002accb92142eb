// Lesson 5: a weight that two stages share, in plain C++. A token embedding E (vocab x d) is
// looked up by the first stage and used again, transposed, as the output layer of the second
// (a tied LM head). Each stage holds its own copy of E and accumulates its copy's gradient;
// tpipe::tied_gradient makes both gradients the sum of the two before the optimizer steps, so
// the same step keeps the copies equal. The program checks, bit for bit, that pipelined training
// equals one model with one E trained a microbatch at a time, and that the copies stay equal.
//
//   build/examples/lesson_tied_weights
#include <cmath>
#include <cstdio>
#include <map>
#include <span>
#include <vector>

#include <tpipe/tpipe.hpp>

using vec = std::vector<float>;
using ids = std::vector<int>;

constexpr int vocab = 8, d = 4, rows = 16;

vec initial_embedding()
{
    vec e(vocab * d);
    for (std::size_t i = 0; i < e.size(); ++i) e[i] = 0.5f * std::sin(float(i + 1) * 0.37f);
    return e;
}

//! Stage 0: x = E[id] for every row.
struct embed {
    using input = ids;
    using output = vec;
    vec e = initial_embedding(), de = vec(vocab * d, 0.f);
    std::map<int, ids> ids_of;

    vec forward(const tpipe::unit& u, ids tokens)
    {
        vec x;
        for (int t : tokens) x.insert(x.end(), e.begin() + t * d, e.begin() + (t + 1) * d);
        ids_of[u.microbatch] = std::move(tokens);
        return x;
    }
    ids backward(const tpipe::unit& u, vec dx)
    {
        const ids tokens = std::move(ids_of.at(u.microbatch));
        ids_of.erase(u.microbatch);
        for (std::size_t r = 0; r < tokens.size(); ++r)
            for (int k = 0; k < d; ++k) de[tokens[r] * d + k] += dx[r * d + k];
        return {};  // token ids have no gradient
    }
};

//! Stage 1: logits = x E^T, the tied head.
struct head {
    using input = vec;
    using output = vec;
    vec e = initial_embedding(), de = vec(vocab * d, 0.f);
    std::map<int, vec> x_of;

    vec forward(const tpipe::unit& u, vec x)
    {
        const std::size_t n = x.size() / d;
        vec y(n * vocab, 0.f);
        for (std::size_t r = 0; r < n; ++r)
            for (int v = 0; v < vocab; ++v)
                for (int k = 0; k < d; ++k) y[r * vocab + v] += x[r * d + k] * e[v * d + k];
        x_of[u.microbatch] = std::move(x);
        return y;
    }
    vec backward(const tpipe::unit& u, vec dy)
    {
        const vec x = std::move(x_of.at(u.microbatch));
        x_of.erase(u.microbatch);
        const std::size_t n = x.size() / d;
        vec dx(x.size(), 0.f);
        for (std::size_t r = 0; r < n; ++r)
            for (int v = 0; v < vocab; ++v)
                for (int k = 0; k < d; ++k) {
                    de[v * d + k] += dy[r * vocab + v] * x[r * d + k];
                    dx[r * d + k] += dy[r * vocab + v] * e[v * d + k];
                }
        return dx;
    }
};

//! The data: row r's token is r mod vocab, and its target the one-hot of the next token.
ids tokens(const tpipe::unit& u)
{
    ids t;
    for (auto r = u.row_begin; r < u.row_end; ++r) t.push_back(int(r % vocab));
    return t;
}
//! Mean squared error against the one-hot targets: returns dL/dy.
vec loss_gradient(const tpipe::unit& u, const vec& y, double& total)
{
    vec dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        const auto row = u.row_begin + std::int64_t(i / vocab);
        const float e = y[i] - (int(i % vocab) == int((row + 1) % vocab) ? 1.f : 0.f);
        total += double(e) * e / rows;
        dy[i] = 2 * e / rows;
    }
    return dy;
}
void sgd(vec& w, vec& g, float lr)
{
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * g[i], g[i] = 0;
}

int main()
{
    const auto units = tpipe::microbatch_slicer{.count = 4}.scheme({.rows = rows, .seq_len = 1});
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{.ranks = 2}, units);
    auto pipe = tpipe::pipeline(embed{}, head{});
    tpipe::cpu_engine cpu{2};
    tpipe::runner r(pipe, prog, cpu);

    // [snippet:tie]
    // Stages 0 and 1 hold a copy of E; their gradients are added in that order.
    tpipe::tied_gradient<float> tie({0, 1}, vocab * d);
    tie.hold(0, std::span(pipe.stage<0>().de));
    tie.hold(1, std::span(pipe.stage<1>().de));
    // [/snippet]

    double loss = 0;
    tpipe::io_for<decltype(pipe)> io;
    io.source = tokens;
    io.output_grad = [&](const tpipe::unit& u, vec&& y) { return loss_gradient(u, y, loss); };
    for (int step = 0; step < 40; ++step) {
        loss = 0;
        r.run(io);
        // [snippet:step]
        tie.sum_here();  // both copies' gradients: 0 + dE(stage 0) + dE(stage 1)
        sgd(pipe.stage<0>().e, pipe.stage<0>().de, 0.2f);
        sgd(pipe.stage<1>().e, pipe.stage<1>().de, 0.2f);  // the same step on the same gradient
        // [/snippet]
        if (step % 10 == 0) std::printf("step %2d  loss %.5f\n", step, loss);
    }

    // The reference: one model, one E, a microbatch at a time. Its gradient is the sum of its two
    // uses' gradients, each accumulated over the microbatches, added in the holders' order.
    embed lookup;
    head out;
    double unused = 0;
    for (int step = 0; step < 40; ++step) {
        for (int i = 0; i < units.units(); ++i) {
            const tpipe::unit u = units.at(i);
            lookup.backward(u, out.backward(u, loss_gradient(u, out.forward(u, lookup.forward(u, tokens(u))), unused)));
        }
        vec g(vocab * d);
        for (std::size_t k = 0; k < g.size(); ++k) g[k] = 0.f + lookup.de[k] + out.de[k];
        sgd(lookup.e, g, 0.2f);
        out.e = lookup.e, lookup.de.assign(g.size(), 0.f), out.de.assign(g.size(), 0.f);
    }
    const bool copies = pipe.stage<0>().e == pipe.stage<1>().e;
    const bool same = copies && pipe.stage<0>().e == lookup.e;
    std::printf("final loss %.5f; the two copies of E are %s; pipelined E %s the single model's\n", loss,
                copies ? "equal" : "DIFFERENT", same ? "equals (bitwise)" : "DIFFERS from");
    return same ? 0 : 1;
}
