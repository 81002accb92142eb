// The reference GPT (apps/gpt) on CPU threads: whole training steps (forward + backward +
// AdamW) per model, per slicing and per thread count, and its kernels alone at the models' shapes.
// The PyTorch twin of the same steps is bench/gpt_torch.py; bench/gpt_vs_torch.sh runs both in one
// window and prints the table of docs/gpt.md.
//
// Step benchmarks: gpt_step/<model>/<threads>/<config>, tokens/s as the `tokens_per_s` counter.
//   model:  0 default (4 layers, d 128, seq 128, batch 4), 1 long (4, 128, 1024, 1),
//           2 wide (6, 256, 256, 4); 4 heads each, vocabulary 256, tied head.
//   config: 0 one stage (the non-pipelined model; its pool has `threads` threads),
//           1 two stages, microbatches of one row (1f1b), 2 two stages, token slices of each
//           row (terapipe-1f1b; 2 per row, 8 for the long model's one row). Two stages share
//           `threads`: one each at 2. 3 two stages, TeraPipe-planned (profiled and planned
//           before the timing, as train_gpt --slicer terapipe does). Each is timed after 3
//           untimed steps, as the PyTorch twin is.
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <tpipe/exec/run.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "gpt/kernels.hpp"
#include "gpt/model.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/planning.hpp"

namespace {

struct model_shape {
    const char* name;
    int layers, d_model, seq_len, batch;
};
constexpr model_shape models[] = {{"default", 4, 128, 128, 4}, {"long", 4, 128, 1024, 1}, {"wide", 6, 256, 256, 4}};

gpt::config config_of(const model_shape& m)
{
    gpt::config c;
    c.layers = m.layers;
    c.d_model = m.d_model;
    c.heads = 4;
    c.seq_len = m.seq_len;
    return c;
}

gpt::batch random_batch(const model_shape& m, std::uint64_t seed)
{
    gpt::batch b;
    b.rows = m.batch;
    b.seq_len = m.seq_len;
    b.inputs.resize(static_cast<std::size_t>(m.batch * m.seq_len));
    b.targets.resize(b.inputs.size());
    for (std::size_t i = 0; i < b.inputs.size(); ++i) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        b.inputs[i] = static_cast<std::int32_t>((seed >> 33) % 256);
        b.targets[i] = static_cast<std::int32_t>((seed >> 45) % 256);
    }
    return b;
}

std::string describe(const tpipe::scheme& units)
{
    std::string out;
    for (int i = 0; i < units.units(); ++i) {
        const auto u = units.at(i);
        if (u.row_begin > 0) break;  // every row slice has the same token cut
        out += (out.empty() ? "" : ",") + std::to_string(u.token_end - u.token_begin);
    }
    return std::to_string(units.microbatches()) + " x [" + out + "]";
}

//! The TeraPipe plan for two stages of model `which` (one thread each): both parts profiled with
//! tpipe's profiler at granularity seq_len/16, then tpipe::plan_slices, as `train_gpt --slicer
//! terapipe` does. Planned once per model and process (Google Benchmark calls a benchmark
//! several times).
tpipe::scheme planned_units(int which, gpt::parameters<float>& params)
{
    static std::map<int, tpipe::scheme> plans;
    if (auto it = plans.find(which); it != plans.end()) return it->second;
    const model_shape& m = models[which];
    gpt::pipelined_model<float> model(params, 2, 1);
    const std::int64_t g = m.seq_len / 16;
    const auto latency = gpt::profile_parts(model, random_batch(m, 3), tpipe::token_profile_grid(m.batch, m.seq_len, g));
    const auto plan = tpipe::plan_slices(
        latency, tpipe::slicing_problem{.stages = 2, .seq_len = m.seq_len, .batch = m.batch, .granularity = g});
    return plans.emplace(which, plan.scheme()).first->second;
}

constexpr int warmup_steps = 3;

void gpt_step(benchmark::State& state)
{
    const model_shape& m = models[state.range(0)];
    const int threads = static_cast<int>(state.range(1));
    const int config = static_cast<int>(state.range(2));
    const int stages = config == 0 ? 1 : 2;
    if (threads < stages) {
        state.SkipWithError("two stages need at least two threads");
        return;
    }
    gpt::parameters<float> params(config_of(m));
    params.init(1);
    gpt::adamw<float> opt(params, {});
    const tpipe::batch_shape shape{m.batch, m.seq_len};
    tpipe::scheme units = tpipe::microbatch_slicer{1}.scheme(shape);
    std::string schedule = "1f1b", label = "1 stage";
    if (config == 1) {
        units = tpipe::microbatch_slicer{m.batch}.scheme(shape);
        label = "2 stages, " + std::to_string(m.batch) + " microbatches, 1f1b";
    } else if (config == 2) {  // token slices, of each row when there are several
        const int slices = m.batch == 1 ? 8 : 2;
        const std::vector<std::int64_t> lengths(static_cast<std::size_t>(slices), m.seq_len / slices);
        units = m.batch == 1 ? tpipe::token_slicer{lengths}.scheme(shape)
                             : tpipe::grid_slicer{m.batch, lengths}.scheme(shape);
        schedule = "terapipe-1f1b";
        label = "2 stages, " + std::to_string(m.batch) + " x " + std::to_string(slices) + " token slices, terapipe-1f1b";
    } else if (config == 3) {
        units = planned_units(static_cast<int>(state.range(0)), params);
        schedule = "terapipe-1f1b";
        label = "2 stages, TeraPipe-planned " + describe(units) + ", terapipe-1f1b";
    }
    gpt::pipelined_model<float> model(params, stages, threads / stages);
    const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{.ranks = stages}, units);
    tpipe::cpu_engine engine(stages);
    tpipe::runner<tpipe::uniform_pipeline<gpt::stage<float>>, tpipe::cpu_engine> run(model.pipe(), prog, engine);
    const gpt::batch b = random_batch(m, 7);
    double loss = 0;
    auto step = [&] {
        model.begin_step(b);
        run.run(model.io());
        loss = model.finish_step();
        opt.step(params);
    };
    // Untimed warm-up steps, as the PyTorch twin's (bench/gpt_torch.py --warmup 3): the first
    // step faults its workspaces in, and a wide model's timing holds only 3 steps.
    for (int i = 0; i < warmup_steps; ++i) step();
    for (auto _ : state) step();
    if (!std::isfinite(loss)) state.SkipWithError("the loss is not finite");
    state.SetLabel(std::string(m.name) + ", " + label);
    state.counters["tokens_per_s"] =
        benchmark::Counter(double(m.batch) * m.seq_len, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- kernels alone, at the default and wide models' shapes ---------------------------------

std::vector<float> filled(std::size_t n, float scale = 0.02f)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.37f * float(i));
    return v;
}

//! C[m x n] = A[m x k] B[k x n] on the pool, B transposed in memory when range(4) (as in the
//! backward's dX = dY W^T); flops as the rate.
void gemm(benchmark::State& state)
{
    const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
    gpt::thread_pool pool(static_cast<int>(state.range(3)));
    const bool bt = state.range(4) != 0;
    auto a = filled(static_cast<std::size_t>(m * k)), b = filled(static_cast<std::size_t>(k * n));
    std::vector<float> c(static_cast<std::size_t>(m * n));
    const gpt::mat<float> B = bt ? gpt::mat<float>{b.data(), 1, k} : gpt::mat<float>{b.data(), n, 1};
    for (auto _ : state) {
        gpt::gemm<float>(pool, m, n, k, {a.data(), k, 1}, B, c.data(), n, false);
        benchmark::DoNotOptimize(c.data());
    }
    state.SetLabel(gpt::blas_core());
    state.counters["flops"] = benchmark::Counter(2.0 * double(m) * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

//! Causal attention of a whole sequence (t0 = 0) or of the last quarter over a cached prefix.
void attention(benchmark::State& state)
{
    const std::int64_t rows = state.range(0), L = state.range(1), d = state.range(2), H = 4;
    const bool backward = state.range(4) != 0, last_quarter = state.range(5) != 0;
    gpt::thread_pool pool(static_cast<int>(state.range(3)));
    const std::int64_t t0 = last_quarter ? 3 * L / 4 : 0, s = L - t0;
    const gpt::attention_shape a{rows, H, d / H, s, t0, L};
    auto q = filled(static_cast<std::size_t>(rows * s * d), 0.5f);
    auto k = filled(static_cast<std::size_t>(rows * L * d), 0.5f), v = filled(static_cast<std::size_t>(rows * L * d));
    std::vector<float> probs(static_cast<std::size_t>(rows * H * s * L)), out(q.size()), dq(q.size());
    std::vector<float> dk(k.size()), dv(v.size()), scratch;
    gpt::attention_forward(pool, a, q.data(), d, k.data(), v.data(), probs.data(), out.data());
    for (auto _ : state) {
        if (backward)
            gpt::attention_backward(pool, a, q.data(), d, k.data(), v.data(), probs.data(), out.data(), dq.data(),
                                    dk.data(), dv.data(), scratch);
        else
            gpt::attention_forward(pool, a, q.data(), d, k.data(), v.data(), probs.data(), out.data());
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["tokens_per_s"] = benchmark::Counter(double(rows * s), benchmark::Counter::kIsIterationInvariantRate);
}

//! The row-wise passes over [n x d]: 0 LayerNorm forward, 1 LayerNorm backward, 2 bias + GELU
//! (d is the MLP width), 3 GELU backward, 4 softmax cross-entropy (d is the vocabulary).
void rowwise(benchmark::State& state)
{
    const std::int64_t n = state.range(0), d = state.range(1);
    const int which = static_cast<int>(state.range(2));
    gpt::thread_pool pool(static_cast<int>(state.range(3)));
    auto x = filled(static_cast<std::size_t>(n * d), 1.0f), y = filled(x.size()), g = filled(static_cast<std::size_t>(d), 1.0f);
    std::vector<float> mean(static_cast<std::size_t>(n)), rstd(mean.size()), work(x.size());
    std::vector<std::int32_t> targets(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) targets[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i % d);
    gpt::layernorm_forward(pool, n, d, x.data(), g.data(), g.data(), 1e-5, y.data(), mean.data(), rstd.data());
    const char* names[] = {"layernorm forward", "layernorm backward", "bias+gelu", "gelu backward", "softmax-ce"};
    for (auto _ : state) {
        switch (which) {
        case 0: gpt::layernorm_forward(pool, n, d, x.data(), g.data(), g.data(), 1e-5, y.data(), mean.data(), rstd.data()); break;
        case 1: gpt::layernorm_backward(pool, n, d, y.data(), x.data(), mean.data(), rstd.data(), g.data(), work.data()); break;
        case 2: gpt::bias_gelu_forward(pool, n, d, g.data(), work.data(), y.data()); break;
        case 3: gpt::gelu_backward(pool, n * d, x.data(), work.data()); break;
        default:
            work = x;
            benchmark::DoNotOptimize(gpt::softmax_cross_entropy(pool, n, d, targets.data(), 1.0f, work.data()));
        }
        benchmark::DoNotOptimize(work.data());
        benchmark::DoNotOptimize(y.data());
    }
    state.SetLabel(names[which]);
    state.counters["values_per_s"] = benchmark::Counter(double(n * d), benchmark::Counter::kIsIterationInvariantRate);
}

//! One AdamW step over the default and wide models' parameter counts.
void adamw(benchmark::State& state)
{
    gpt::parameters<float> params(config_of(models[state.range(0)]));
    params.init(1);
    params.grad = filled(params.grad.size());
    gpt::adamw<float> opt(params, {});
    for (auto _ : state) opt.step(params);
    state.SetLabel(models[state.range(0)].name);
    state.counters["params_per_s"] = benchmark::Counter(double(params.size()), benchmark::Counter::kIsIterationInvariantRate);
}

} // namespace

BENCHMARK(gpt_step)
    ->ArgNames({"model", "threads", "config"})
    ->ArgsProduct({{0, 1, 2}, {1, 2}, {0}})
    ->ArgsProduct({{0, 1, 2}, {2}, {1, 2, 3}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);
// The default model's GEMMs (512 tokens): QKV, MLP up, MLP down, head, and a backward dX = dY W^T;
// the wide model's MLP up (1024 tokens).
BENCHMARK(gemm)
    ->ArgNames({"m", "n", "k", "threads", "bt"})
    ->Args({512, 384, 128, 1, 0})
    ->Args({512, 512, 128, 1, 0})
    ->Args({512, 128, 512, 1, 0})
    ->Args({512, 256, 128, 1, 1})
    ->Args({512, 512, 128, 1, 1})
    ->Args({1024, 1024, 256, 1, 0})
    ->Args({1024, 1024, 256, 2, 0})
    ->UseRealTime();
BENCHMARK(attention)
    ->ArgNames({"rows", "L", "d", "threads", "backward", "last_quarter"})
    ->ArgsProduct({{4}, {128}, {128}, {1, 2}, {0, 1}, {0}})
    ->ArgsProduct({{1}, {1024}, {128}, {1, 2}, {0, 1}, {0, 1}})
    ->UseRealTime();
BENCHMARK(rowwise)
    ->ArgNames({"n", "d", "kernel", "threads"})
    ->Args({512, 128, 0, 1})
    ->Args({512, 128, 1, 1})
    ->Args({512, 512, 2, 1})
    ->Args({512, 512, 3, 1})
    ->Args({512, 256, 4, 1})
    ->Args({1024, 1024, 2, 2})
    ->UseRealTime();
BENCHMARK(adamw)->ArgNames({"model"})->Arg(0)->Arg(2);

BENCHMARK_MAIN();
