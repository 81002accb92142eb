#pragma once
// The CUDA GPT as tpipe stages, over a backend B (gpt/pipeline.hpp's counterpart): a model cut
// into parts, each part a stage functor that first moves its part to the stream the engine gives
// the stage now (B::current_stream(): tpipe::cuda::current_stream() on the device), run by
// tpipe::run with any program on any engine B works with (cuda::engine for the device backend).
// No CUDA header: the host backend runs it on tpipe::cpu_engine in the CPU tests.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <tpipe/exec/engine.hpp>
#include <tpipe/exec/run.hpp>

#include "gpt/pipeline.hpp"
#include "gpt_cuda/basic_model.hpp"

namespace gpt::cuda {

template <class B, class S = float>
struct basic_stage {
    using input = basic_activation<B>;
    using output = basic_activation<B>;
    basic_part<B, S>* p = nullptr;

    output forward(const tpipe::unit& u, input x) { return here().forward(u, std::move(x)); }
    input backward(const tpipe::unit& u, output g) { return here().backward(u, std::move(g)); }
    input backward_input(const tpipe::unit& u, output g) { return here().backward_input(u, std::move(g)); }
    void backward_weight(const tpipe::unit& u) { here().backward_weight(u); }

private:
    basic_part<B, S>& here()
    {
        p->set_stream(B::current_stream());
        return *p;
    }
};

//! The model cut into `stages` parts (layers as gpt::even_layer_cuts), storage type S. `control` is the stream of
//! the work between iterations (zeroing gradients, uploading the batch, flushing the tied head's
//! gradient); it is waited for before each run starts, and the run's engine has finished every
//! stage's work before finish_step.
template <class B, class S = float>
class basic_pipelined_model {
public:
    using stage = basic_stage<B, S>;

    basic_pipelined_model(basic_parameters<B>& params, int stages, typename B::stream_type control)
        : params_(&params), control_(control)
    {
        if (stages < 1)
            throw tpipe::invalid_argument("the CUDA GPT pipeline needs at least 1 stage, got " + std::to_string(stages));
        const auto cuts = gpt::even_layer_cuts(params.cfg.layers, stages);
        std::vector<stage> views;
        for (int i = 0; i < stages; ++i) {
            parts_.push_back(
                std::make_unique<basic_part<B, S>>(params, cuts[i], cuts[i + 1], i == 0, i + 1 == stages, control));
            views.push_back(stage{parts_.back().get()});
        }
        pipe_.emplace(std::move(views));
        io_.source = [](const tpipe::unit&) { return basic_activation<B>{}; };
    }

    int stages() const { return static_cast<int>(parts_.size()); }
    basic_part<B, S>& part_at(int i) { return *parts_.at(static_cast<std::size_t>(i)); }
    basic_parameters<B>& params() { return *params_; }
    tpipe::uniform_pipeline<stage>& pipe() { return *pipe_; }
    const tpipe::io_for<tpipe::uniform_pipeline<stage>>& io() const { return io_; }

    void begin_step(const gpt::batch& b)
    {
        params_->template refresh<S>(control_);
        params_->zero_grad(control_);
        for (auto& p : parts_) {
            p->set_stream(control_);
            p->begin(&b);
        }
        parts_.front()->sync();
    }
    //! After the run: flushes the tied head; the mean loss (waits for the control stream).
    double finish_step()
    {
        for (auto& p : parts_) {
            p->set_stream(control_);
            p->flush_grad();
        }
        return parts_.back()->loss();
    }
    //! One iteration's forward and backward under `prog` on `eng`.
    template <tpipe::engine E>
    double step(const gpt::batch& b, const tpipe::program& prog, E& eng, tpipe::run_stats* stats = nullptr,
                tpipe::run_options opts = {})
    {
        begin_step(b);
        tpipe::run_stats s = tpipe::run(pipe(), prog, eng, io_, std::move(opts));
        if (stats) *stats = std::move(s);
        return finish_step();
    }

private:
    basic_parameters<B>* params_;
    typename B::stream_type control_;
    std::vector<std::unique_ptr<basic_part<B, S>>> parts_;
    std::optional<tpipe::uniform_pipeline<stage>> pipe_;
    tpipe::io_for<tpipe::uniform_pipeline<stage>> io_;
};

} // namespace gpt::cuda
