// libtorch_user_model: docs/libtorch.md's walk-through, a user's own model (not the example's
// GPT) taken from a plain libtorch loop to a tpipe pipeline over threads and over MPI, in one
// binary with one runner type. Every line of it is shown in the doc (tools/snippets.py).
//
//   libtorch_user_model --plain             the plain libtorch loop
//   libtorch_user_model                     2 stages on 2 threads of this process
//   mpirun -np 2 libtorch_user_model        2 stages on 2 processes
//   ... --check                             also trains plainly and compares the losses
//
// Exit status: 0 ok, 1 failure, 3 --check found a difference.
// [snippet:user-includes]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include <torch/torch.h>

#include <tpipe/adapters/libtorch.hpp>
#include <tpipe/adapters/libtorch/process_sum.hpp>
#include <tpipe/exec/run.hpp>
#include <tpipe/mpi/environment.hpp>
#include <tpipe/mpi/job.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/spec.hpp>
// [/snippet]

namespace {

// [snippet:user-model]
// A small language model: token embedding, residual MLP blocks, and a head tied to the
// embedding (the head's weight is the embedding's tensor).
struct BlockImpl : torch::nn::Module {
    torch::nn::LayerNorm norm{nullptr};
    torch::nn::Linear up{nullptr}, down{nullptr};
    explicit BlockImpl(std::int64_t d)
        : norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
          up(register_module("up", torch::nn::Linear(d, 4 * d))),
          down(register_module("down", torch::nn::Linear(4 * d, d)))
    {
    }
    torch::Tensor forward(torch::Tensor x) { return x + down(torch::gelu(up(norm(x)))); }
};
TORCH_MODULE(Block);

struct TiedHeadImpl : torch::nn::Module {
    torch::Tensor weight;
    explicit TiedHeadImpl(torch::nn::Embedding& embedding)
        : weight(register_parameter("weight", embedding->weight))
    {
    }
    torch::Tensor forward(torch::Tensor x) { return torch::matmul(x, weight.t()); }
};
TORCH_MODULE(TiedHead);

constexpr std::int64_t vocab = 64, d_model = 32, layers = 4, rows = 8, tokens = 16;

torch::nn::Sequential make_model()
{
    torch::manual_seed(0);
    torch::nn::Embedding embedding(vocab, d_model);
    torch::nn::Sequential model(embedding);
    for (std::int64_t i = 0; i < layers; ++i) model->push_back(Block(d_model));
    model->push_back(TiedHead(embedding));
    return model;
}

// libtorch lists a tied tensor once per module that registers it; the optimizer needs it once.
std::vector<torch::Tensor> unique_parameters(const torch::nn::Module& m)
{
    std::vector<torch::Tensor> out;
    for (const auto& p : m.parameters())
        if (std::none_of(out.begin(), out.end(), [&](const torch::Tensor& q) { return q.is_same(p); }))
            out.push_back(p);
    return out;
}

// Next-token batches of a repeating pattern: [rows, tokens] inputs and targets.
std::pair<torch::Tensor, torch::Tensor> batch(int step)
{
    auto ids = (torch::arange(rows * (tokens + 1), torch::kLong).view({rows, tokens + 1}) * 7 + step) % vocab;
    return {ids.slice(1, 0, tokens), ids.slice(1, 1, tokens + 1)};
}
// [/snippet]

// [snippet:user-plain]
std::vector<double> train_plain(int steps)
{
    auto model = make_model();
    torch::optim::AdamW optimizer(unique_parameters(*model), torch::optim::AdamWOptions(1e-2));
    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
        auto [inputs, targets] = batch(step);
        optimizer.zero_grad();
        auto logits = model->forward(inputs);
        auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}));
        loss.backward();
        optimizer.step();
        losses.push_back(loss.item<double>());
    }
    return losses;
}
// [/snippet]

// [snippet:user-pipelined]
std::vector<double> train_pipelined(int steps)
{
    constexpr int stages = 2;
    tpipe::mpi::job job({.pipeline_ranks = stages});  // 1 process: every stage on a thread here; 2: one each

    auto model = make_model();  // every process builds the whole model (see "Only the local stages")
    torch::optim::AdamW optimizer(unique_parameters(*model), torch::optim::AdamWOptions(1e-2));

    // Stage 0: the embedding and two blocks; stage 1: two blocks and the tied head.
    tpipe::uniform_pipeline<tpipe::libtorch::module_stage> pipe(tpipe::libtorch::cut(model, {0, 3, 6}));
    const tpipe::scheme units = tpipe::scheme_from_spec("microbatch:4", {rows, tokens});
    const tpipe::program prog = tpipe::make_schedule("zb-h1").program(tpipe::topology{.ranks = stages}, units);
    tpipe::cpu_engine engine(job.single_process() ? stages : 1);  // one loop thread per stage run here
    tpipe::runner runner(pipe, prog, engine, job.transport());

    std::vector<double> losses;
    for (int step = 0; step < steps; ++step) {
        auto [inputs, targets] = batch(step);
        double loss = 0;  // summed over the units by the last stage
        // Each unit's rows of the inputs into the first stage; the loss on the last stage's output
        // and the same rows of the targets, each unit weighted by its share of the batch mean.
        const auto io = tpipe::libtorch::batch_io(inputs, targets, [](const torch::Tensor& y, const torch::Tensor& t) {
            return torch::nn::functional::cross_entropy(y.reshape({-1, vocab}), t.reshape({-1}));
        }, loss);
        optimizer.zero_grad();
        runner.run(io);
        // The tied head's and embedding's gradients added, then gradients and loss summed over
        // the processes (each has its stages' gradients, the last stage the loss).
        tpipe::libtorch::sum_over_processes(pipe, unique_parameters(*model), loss);
        optimizer.step();
        losses.push_back(loss);
    }
    return losses;
}
// [/snippet]

} // namespace

// [snippet:user-main]
int main(int argc, char** argv)
{
    const bool plain = argc > 1 && std::strcmp(argv[1], "--plain") == 0;
    const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
    constexpr int steps = 5;
    if (plain) {
        for (double l : train_plain(steps)) std::printf("loss %.6f\n", l);
        return 0;
    }
    tpipe::mpi::environment env(argc, argv);  // MPI, also for one process (all stages on threads)
    const std::vector<double> losses = train_pipelined(steps);
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    bool same = true;
    if (check) {
        const std::vector<double> reference = train_plain(steps);
        for (std::size_t s = 0; s < losses.size(); ++s)
            same = same && std::abs(losses[s] - reference[s]) <= 1e-5 * std::abs(reference[s]);
    }
    if (me == 0)
        for (double l : losses) std::printf("loss %.6f\n", l);
    if (me == 0 && check) std::printf("check against the plain loop: %s\n", same ? "MATCH" : "MISMATCH");
    return same ? 0 : 3;
}
// [/snippet]
