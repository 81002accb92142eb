#pragma once
// What tpipe::run takes and gives back: the user's ends of the pipeline (run_io), how to run
// (run_options) and what an iteration did (run_stats).
#include <chrono>
#include <cstddef>
#include <functional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/timeline.hpp"

namespace tpipe {

//! Work that starts on a stage's loop as soon as the stage's last backward action (B, or the
//! last W) of the iteration has finished, overlapped with the rest of the rank's actions; the
//! rank finishes its iteration only once that work has (tpipe::data_parallel all-reduces the
//! stage's gradients this way). The tasks of one rank run one after another, in the order
//! their stages finished, so that every replica issues its collectives in the same order.
struct backward_hook {
    std::function<task<void>(int stage)> start;  //!< empty: no hook
    //! Before every iteration, with its stop token: once the iteration fails (the token is
    //! stopped), work started must end soon (with tpipe::operation_cancelled).
    std::function<void(std::stop_token)> reset;
    std::string what = "after-backward work";  //!< what the work is, in the runner's messages
};

//! How to run: placement of ranks on devices, watchdog, validation.
struct run_options {
    std::vector<int> device_of_rank;                                //!< empty: rank r on device r % devices
    std::chrono::milliseconds watchdog{std::chrono::seconds(60)};   //!< 0: no watchdog
    bool validate = true;                                           //!< tpipe::validate first (false: validate_structure)
    //! Record every action's interval into run_stats::events (for trace(), text_timeline,
    //! svg_timeline). Off, only compute actions are timed (for busy): two TSC reads per compute
    //! action and none per send or receive.
    bool trace = false;
    //! Work after each stage's last backward (e.g. tpipe::data_parallel's); see backward_hook.
    backward_hook after_backward{};
    //! Called once, from the thread in run(), when the watchdog fired and a rank has still not
    //! finished one watchdog period later: a stage function that never returns (cancellation
    //! cannot interrupt it), so run() cannot return either. The text is the watchdog's report
    //! (rank, stage, action, unit). Empty: the report is written to stderr. A program that cannot
    //! wait may end itself here; the other processes have already been told (transport fail()).
    std::function<void(const std::string&)> on_stuck{};
    //! The user's stop (e.g. on a preemption notice, or a stage that decides the run must end):
    //! once it is requested, the iteration in progress ends on every rank as a failed one does
    //! (it cancels the iteration's own stop token), run() throws tpipe::stopped_error and the
    //! other processes tpipe::peer_error; every later run() of the runner does the same before
    //! any stage runs. Request it from a thread, not from a signal handler (std::stop_source is
    //! not async-signal-safe). Default: never stops.
    std::stop_token stop{};
};

//! What an iteration did. Times are seconds since the iteration started.
struct run_stats {
    int ranks = 0;
    double time = 0;                     //!< from the start until the last rank finished
    std::vector<double> busy;            //!< per rank, seconds spent in compute actions
    std::vector<int> peak_activations;   //!< per rank, most units alive at once (F done, B/W not)
    std::vector<int> device_of_rank;
    std::vector<int> local_ranks;        //!< the ranks this process ran (SPMD); others' figures are 0
    std::size_t actions = 0;             //!< actions executed (compute and communication)
    //! With run_options::trace: what ran, per rank in order (same form as the simulator).
    std::vector<timed_action> events;

    //! Perfetto/Chrome trace of what ran (the simulator's exporter). Throws tpipe::error if the
    //! iteration ran without run_options::trace.
    std::string trace(const std::string& title = "tpipe run") const
    {
        if (events.empty() && actions > 0)
            throw error("run_stats::trace: the iteration was run without run_options::trace = true, so no events "
                        "were recorded");
        return chrome_trace(events, ranks, title);
    }
};

//! The user's end of the pipeline: the first stage's input, the gradient of the loss with respect
//! to the last stage's output, and the first stage's input gradient. (`output_grad` was named
//! `loss` before December 2026: it returns a gradient, not a loss.)
template <class In, class Out>
struct run_io {
    // Initialised, so that `io{.source = f, .output_grad = g}` names only what it sets.
    std::function<In(const unit&)> source{};               //!< required
    std::function<Out(const unit&, Out&&)> output_grad{};  //!< optional: default drops out, seeds Out{}
    std::function<void(const unit&, In&&)> input_grad{};   //!< optional: default drops it
};

//! The run_io of a pipeline type.
template <class P>
using io_for = run_io<typename std::remove_cvref_t<P>::input, typename std::remove_cvref_t<P>::output>;

} // namespace tpipe
