#pragma once
// The CUDA GPT as tpipe stages (gpt/pipeline.hpp's counterpart): a model cut into parts on one
// GPU, each part a stage functor that enqueues on the stream the tpipe::cuda::engine gives its
// stage (cuda::current_stream()), run by tpipe::run with any program.
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tpipe/cuda/engine.hpp>
#include <tpipe/cuda/error.hpp>
#include <tpipe/exec/run.hpp>

#include "gpt/pipeline.hpp"
#include "gpt_cuda/model.hpp"

namespace gpt::cuda {

//! One pipeline stage: a view of a part that moves it to the engine's stream for each call.
struct stage {
    using input = activation;
    using output = activation;
    part* p = nullptr;

    output forward(const tpipe::unit& u, input x) { return here().forward(u, std::move(x)); }
    input backward(const tpipe::unit& u, output g) { return here().backward(u, std::move(g)); }
    input backward_input(const tpipe::unit& u, output g) { return here().backward_input(u, std::move(g)); }
    void backward_weight(const tpipe::unit& u) { here().backward_weight(u); }

private:
    part& here()
    {
        p->set_stream(tpipe::cuda::current_stream());
        return *p;
    }
};
static_assert(tpipe::split_backward_stage<stage>);

//! The model cut into `stages` parts on the GPU of `params` (layers split as even_layer_cuts).
//! `control` is the stream of the work between iterations (zeroing gradients, uploading the batch,
//! flushing the tied head's gradient); it is synchronised before each run starts.
class pipelined_model {
public:
    pipelined_model(parameters& params, int stages, cudaStream_t control) : params_(&params), control_(control)
    {
        if (stages < 1)
            throw tpipe::invalid_argument("the CUDA GPT pipeline needs at least 1 stage, got " + std::to_string(stages));
        const auto cuts = gpt::even_layer_cuts(params.cfg.layers, stages);
        std::vector<stage> views;
        for (int i = 0; i < stages; ++i) {
            parts_.push_back(std::make_unique<part>(params, cuts[i], cuts[i + 1], i == 0, i + 1 == stages, control));
            views.push_back(stage{parts_.back().get()});
        }
        pipe_.emplace(std::move(views));
        io_.source = [](const tpipe::unit&) { return activation{}; };
    }

    int stages() const { return static_cast<int>(parts_.size()); }
    part& part_at(int i) { return *parts_.at(static_cast<std::size_t>(i)); }
    parameters& params() { return *params_; }
    tpipe::uniform_pipeline<stage>& pipe() { return *pipe_; }

    void begin_step(const gpt::batch& b)
    {
        params_->zero_grad(control_);
        for (auto& p : parts_) {
            p->set_stream(control_);
            p->begin(&b);
        }
        TPIPE_CUDA_TRY(cudaStreamSynchronize(control_));
    }
    //! After the run (every stage's work complete): flushes the tied head; the mean loss.
    double finish_step()
    {
        for (auto& p : parts_) {
            p->set_stream(control_);
            p->flush_grad();
        }
        return parts_.back()->loss();
    }
    //! One iteration's forward and backward under `prog` on `eng`.
    double step(const gpt::batch& b, const tpipe::program& prog, tpipe::cuda::engine& eng,
                tpipe::run_stats* stats = nullptr, tpipe::run_options opts = {})
    {
        begin_step(b);
        tpipe::run_stats s = tpipe::run(pipe(), prog, eng, io_, std::move(opts));
        if (stats) *stats = std::move(s);
        return finish_step();
    }

private:
    parameters* params_;
    cudaStream_t control_;
    std::vector<std::unique_ptr<part>> parts_;
    std::optional<tpipe::uniform_pipeline<stage>> pipe_;
    tpipe::io_for<tpipe::uniform_pipeline<stage>> io_;
};

} // namespace gpt::cuda
