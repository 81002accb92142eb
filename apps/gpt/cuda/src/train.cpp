#include "gpt_cuda/train.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include <tpipe/core/json.hpp>
#include <tpipe/cuda/availability.hpp>
#include <tpipe/cuda/error_macros.hpp>

#include "gpt/compare.hpp"
#include "gpt_cuda/pipeline.hpp"

namespace gpt::cuda {
namespace {

//! Refuses, in words, a machine where CUDA cannot run (the usual case: no GPU or no driver).
void require_gpu()
{
    if (const auto why = tpipe::cuda::why_no_gpu())
        throw tpipe::error("--device cuda: no usable CUDA GPU (" + *why + "); run without --device cuda to train on the CPU");
    TPIPE_CUDA_TRY(cudaSetDevice(0));
}

struct stream {
    cudaStream_t s{};
    stream() { TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
    ~stream() { cudaStreamDestroy(s); }
};

//! The training loop for storage type S.
template <class S>
int train_as(const train_options& o, const tpipe::program& prog, const std::string& text)
{
    gpt::parameters<float> host(o.cfg);
    host.init(o.seed);
    tpipe::cuda::engine eng({.gpu_of_device = std::vector<int>(static_cast<std::size_t>(o.ranks), 0)});
    stream control;
    parameters dev(host, {&eng.memory(), 0}, control.s);
    basic_pipelined_model<device_backend, S> model(dev, o.stages, control.s);
    adamw opt(dev, {.lr = o.lr}, control.s);

    std::unique_ptr<gpt::parameters<float>> ref;
    std::unique_ptr<gpt::adamw<float>> ref_opt;
    if (o.check) {
        ref = std::make_unique<gpt::parameters<float>>(o.cfg);
        ref->init(o.seed);
        ref_opt = std::make_unique<gpt::adamw<float>>(*ref, gpt::adamw_options{.lr = o.lr});
    }
    if (!o.json)
        std::cout << "model: " << o.cfg.layers << " layers, d_model " << o.cfg.d_model << ", " << host.size()
                  << " parameters on the GPU (" << (o.bf16 ? "bf16 storage, float32 master weights" : "float32")
                  << "); " << o.ranks << " rank(s) = compute streams on GPU 0, "
                  << o.stages << " stage(s), schedule " << o.schedule << "\nunits: " << o.units << "\n";

    std::uint64_t rng = o.data_seed;
    const double tokens_per_step = double(o.batch) * o.cfg.seq_len;
    double elapsed = 0, first_loss = 0, last_loss = 0, worst_loss = 0, step1_loss = 0, step1_grad = 0;
    for (int step = 1; step <= o.steps; ++step) {
        const auto b = gpt::sample_batch(text, o.batch, o.cfg.seq_len, rng);
        const auto t0 = std::chrono::steady_clock::now();
        const double loss = model.step(b, prog, eng);  // waits for the loss: the step is done
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        elapsed += dt;
        if (!std::isfinite(loss)) throw tpipe::error("step " + std::to_string(step) + ": the loss is not finite; lower --lr");
        double ref_loss = 0;
        if (ref) {
            ref_loss = gpt::full_step(*ref, b, 1);
            worst_loss = std::max(worst_loss, std::abs(loss - ref_loss) / std::abs(ref_loss));
            if (step == 1) {  // same weights, same batch: the GPU model against the CPU model
                dev.download(host, control.s);
                step1_loss = std::abs(loss - ref_loss) / std::abs(ref_loss);
                step1_grad = relative_difference(host.grad, ref->grad);
            }
            ref_opt->step(*ref);
        }
        opt.step(control.s);
        if (step == 1) first_loss = loss;
        last_loss = loss;
        if (o.json) {
            tpipe::json::object line{{"step", step}, {"loss", loss}, {"tokens_per_s", tokens_per_step / dt}, {"step_s", dt}};
            if (ref) line["reference_loss"] = ref_loss;
            std::cout << tpipe::json::dump(tpipe::json::value(std::move(line))) << std::endl;
        } else if (step == 1 || step == o.steps || step % std::max(1, o.steps / 20) == 0) {
            char buf[160];
            std::snprintf(buf, sizeof buf, "step %4d/%d  loss %.4f  %8.0f tok/s", step, o.steps, loss,
                          tokens_per_step * step / elapsed);
            std::cout << buf << (ref ? "  (CPU, non-pipelined " + std::to_string(ref_loss) + ")" : std::string()) << "\n";
        }
    }
    dev.download(host, control.s);
    tpipe::json::object summary{{"summary", true},         {"device", "cuda"},
                                {"steps", o.steps},        {"first_loss", first_loss},
                                {"last_loss", last_loss},  {"tokens_per_s", tokens_per_step * o.steps / elapsed},
                                {"schedule", o.schedule},  {"ranks", o.ranks},
                                {"stages", o.stages},      {"units", o.units},
                                {"precision", o.bf16 ? "bf16" : "fp32"}};
    int status = 0;
    if (ref) {
        // Float32 on the GPU against float32 on the CPU: other summation orders, so 1e-4 at step 1;
        // bf16 storage keeps 8 significant bits: 3e-2 (docs/gpt_cuda.md).
        const double step1_tol = o.bf16 ? 3e-2 : 1e-4;
        const double werr = relative_difference(host.value, ref->value);
        const bool ok = step1_loss <= step1_tol && step1_grad <= step1_tol && worst_loss <= o.check_tol &&
                        werr <= o.check_tol;
        summary["check_step1_loss_rel"] = step1_loss;
        summary["check_step1_grad_rel"] = step1_grad;
        summary["check_loss_rel"] = worst_loss;
        summary["check_weights_rel"] = werr;
        summary["check_ok"] = ok;
        if (!ok) status = 3;
        if (!o.json)
            std::cout << "check against the CPU model without a pipeline: step 1 loss " << step1_loss << ", gradients "
                      << step1_grad << " (tolerance " << step1_tol << "); loss curve " << worst_loss << ", final weights " << werr
                      << " (tolerance " << o.check_tol << "): " << (ok ? "MATCH" : "MISMATCH") << "\n";
    }
    if (o.json) std::cout << tpipe::json::dump(tpipe::json::value(std::move(summary))) << "\n";
    else
        std::cout << "loss " << first_loss << " -> " << last_loss << "; " << tokens_per_step * o.steps / elapsed
                  << " tokens/s on the GPU\n";
    return status;
}

} // namespace

int train(const train_options& o, const tpipe::program& prog, const std::string& text)
{
    require_gpu();
    return o.bf16 ? train_as<bf16>(o, prog, text) : train_as<float>(o, prog, text);
}

} // namespace gpt::cuda
