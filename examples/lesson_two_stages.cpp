// Lesson 1: a two-stage model in plain C++, trained with a 1F1B pipeline on two CPU threads.
//
// Each stage is a functor with forward and backward (tpipe::stage). It keeps what its backward
// needs, keyed by the unit (here: the microbatch), and accumulates its weight gradients; the
// optimizer step is yours, after the iteration. The program checks that pipelined training
// gives the same weights, bit for bit, as running the same stages one microbatch at a time.
//
//   build/examples/lesson_two_stages
#include <cmath>
#include <cstdio>
#include <map>
#include <vector>

#include <tpipe/tpipe.hpp>

using vec = std::vector<float>;

// [snippet:stage]
//! y = act(W x + b) for every row of a microbatch; `relu` on the hidden stage only.
struct dense {
    using input = vec;
    using output = vec;
    int in = 0, out = 0;
    bool relu = false;
    vec w, b, dw, db;
    std::map<int, vec> x_of, y_of;  // what backward needs, per microbatch
    // [/snippet]

    dense(int in_, int out_, bool relu_, float scale) : in(in_), out(out_), relu(relu_), w(in_ * out_), b(out_)
    {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = scale * std::sin(float(i + 1) * 0.7f);
        dw.assign(w.size(), 0), db.assign(b.size(), 0);
    }
    vec forward(const tpipe::unit& u, vec x)
    {
        const std::size_t rows = x.size() / in;
        vec y(rows * out);
        for (std::size_t r = 0; r < rows; ++r)
            for (int o = 0; o < out; ++o) {
                float s = b[o];
                for (int i = 0; i < in; ++i) s += w[o * in + i] * x[r * in + i];
                y[r * out + o] = relu && s < 0 ? 0 : s;
            }
        x_of[u.microbatch] = std::move(x);
        y_of[u.microbatch] = y;
        return y;
    }
    vec backward(const tpipe::unit& u, vec dy)
    {
        const vec x = std::move(x_of.at(u.microbatch)), y = std::move(y_of.at(u.microbatch));
        x_of.erase(u.microbatch), y_of.erase(u.microbatch);
        const std::size_t rows = x.size() / in;
        vec dx(x.size(), 0.f);
        for (std::size_t r = 0; r < rows; ++r)
            for (int o = 0; o < out; ++o) {
                const float g = relu && y[r * out + o] <= 0 ? 0 : dy[r * out + o];
                db[o] += g;
                for (int i = 0; i < in; ++i) {
                    dw[o * in + i] += g * x[r * in + i];
                    dx[r * in + i] += g * w[o * in + i];
                }
            }
        return dx;
    }
    void step(float lr)
    {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * dw[i], dw[i] = 0;
        for (std::size_t i = 0; i < b.size(); ++i) b[i] -= lr * db[i], db[i] = 0;
    }
};

constexpr int features = 4, hidden = 16, rows = 32;

//! The data: y = sum of x's features, per row.
float input_at(std::int64_t row, int f) { return std::cos(float(row * features + f)); }
float target_at(std::int64_t row)
{
    float s = 0;
    for (int f = 0; f < features; ++f) s += input_at(row, f);
    return s;
}
vec inputs(const tpipe::unit& u)
{
    vec x;
    for (auto r = u.row_begin; r < u.row_end; ++r)
        for (int f = 0; f < features; ++f) x.push_back(input_at(r, f));
    return x;
}
// [snippet:loss]
//! Mean squared error over the whole batch: returns dL/dy and adds the loss to `total`.
vec loss_gradient(const tpipe::unit& u, const vec& y, double& total)
{
    vec dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        const float e = y[i] - target_at(u.row_begin + std::int64_t(i));
        total += double(e) * e / rows;
        dy[i] = 2 * e / rows;
    }
    return dy;
}
// [/snippet]

int main()
{
    const auto units = tpipe::microbatch_slicer{.count = 4}.scheme({.rows = rows, .seq_len = 1});
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{.ranks = 2}, units);

    // [snippet:loop]
    auto pipe = tpipe::pipeline(dense(features, hidden, true, 0.5f), dense(hidden, 1, false, 0.3f));
    tpipe::cpu_engine cpu{2};  // two devices: one loop thread each
    tpipe::runner r(pipe, prog, cpu);
    double loss = 0;
    tpipe::io_for<decltype(pipe)> io;
    io.source = inputs;  // the first stage's input of each unit
    io.output_grad = [&](const tpipe::unit& u, vec&& y) { return loss_gradient(u, y, loss); };
    for (int step = 0; step < 50; ++step) {
        loss = 0;
        r.run(io);  // forward and backward of every microbatch, 1F1B on the two threads
        pipe.stage<0>().step(0.05f), pipe.stage<1>().step(0.05f);  // your optimizer, after the iteration
        if (step % 10 == 0) std::printf("step %2d  loss %.5f\n", step, loss);
    }
    // [/snippet]

    // The same stages, one microbatch at a time on this thread: the reference.
    dense h(features, hidden, true, 0.5f), o(hidden, 1, false, 0.3f);
    double unused = 0;
    for (int step = 0; step < 50; ++step) {
        for (int i = 0; i < units.units(); ++i) {
            const tpipe::unit u = units.at(i);
            h.backward(u, o.backward(u, loss_gradient(u, o.forward(u, h.forward(u, inputs(u))), unused)));
        }
        h.step(0.05f), o.step(0.05f);
    }
    const bool same = pipe.stage<0>().w == h.w && pipe.stage<1>().w == o.w && pipe.stage<0>().b == h.b &&
                      pipe.stage<1>().b == o.b;
    std::printf("final loss %.5f; pipelined weights %s the sequential ones\n", loss,
                same ? "equal (bitwise)" : "DIFFER from");
    return same ? 0 : 1;
}
