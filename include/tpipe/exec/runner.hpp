#pragma once
// tpipe::runner: executes training iterations of a pipeline on an engine, following a program
// (a schedule's actions per rank), and reports what really ran (tpipe::run, exec/run.hpp, is one
// iteration through a runner).
//
// Execution: one coroutine per rank of this process walks the rank's action list in order on
// the loop of the device the rank is placed on. F/B/I/W call the stage functor through the
// engine's compute awaitable (inline on the CPU engine); SEND hands the payload to the
// boundary's channel (never blocks); RECV posts the receive (remote receives are all posted
// when the rank starts its iteration, so transfers overlap compute) and the compute that
// consumes the payload suspends until it has arrived, as PyTorch runs a lowered program. A rank
// finishes once the transport has released every payload it sent. Payloads live in typed
// storage per stage boundary indexed by the unit's dense index, so nothing is allocated per
// action.
//
// SPMD: with a transport whose ranks are spread over processes (tpipe::mpi::transport), every
// process builds the same pipeline and program and runs only its own ranks; the boundaries
// between ranks of different processes get the transport's channels (tpipe/transport/transport.hpp).
//
// I/O (see tpipe/exec/stage.hpp): `source(u)` makes the first stage's input; `output_grad(u, out)`
// receives the last stage's output and returns the gradient that seeds its backward (without
// it: the output is dropped and backward gets Out{}); `input_grad(u, dx)` receives the first
// stage's input gradient (optional).
//
// Failure: an exception from a stage (or from source/output_grad/input_grad) cancels the iteration on
// every device: the iteration has one std::stop_source, whose token every channel, the engine
// and the backward_hook got when it started, and the failure stops it. run throws one
// tpipe::execution_error naming rank, device, stage, action and unit, and tells the transport,
// which stops the other processes with a tpipe::peer_error. The watchdog turns "no rank started
// a new action for `watchdog`" into a tpipe::watchdog_error listing what every rank waits for.
// Cancellation is cooperative: waits are interrupted, a stage function that never returns is
// not. A tpipe::cancellable_engine (the CUDA engine) has its computes' waits interrupted too,
// and a tpipe::reporting_engine says in the watchdog's report what such a compute waits for
// (tpipe/exec/cancellable_engine.hpp, reporting_engine.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/async/any_awaiter.hpp"
#include "tpipe/exec/detail/boundary.hpp"
#include "tpipe/exec/detail/placement.hpp"
#include "tpipe/exec/detail/program_fit.hpp"
#include "tpipe/exec/detail/rank_plan.hpp"
#include "tpipe/async/detail/joinable_job.hpp"
#include "tpipe/async/detail/root.hpp"
#include "tpipe/exec/detail/steps.hpp"
#include "tpipe/exec/detail/supervisor.hpp"
#include "tpipe/exec/cancellable_engine.hpp"
#include "tpipe/exec/detail/tick_clock.hpp"
#include "tpipe/exec/detail/user_stop.hpp"
#include "tpipe/exec/detail/type_name.hpp"
#include "tpipe/exec/engine.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/exec/pipeline.hpp"
#include "tpipe/exec/reporting_engine.hpp"
#include "tpipe/exec/run_options.hpp"
#include "tpipe/exec/stage.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/transport/link_transport.hpp"
#include "tpipe/transport/transport.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/program.hpp"
#include "tpipe/schedule/schedule.hpp"
#include "tpipe/schedule/validate.hpp"

namespace tpipe {

//! Runs iterations of one pipeline with one program on one engine over one transport; reusable
//! across iterations (storage and channels are kept, so a steady state allocates only the
//! per-rank coroutines). Over threads and over processes (every tpipe::link_transport: MPI, UCX,
//! NCCL) it is one type, runner<Pipe, E> (tpipe/transport/link_transport.hpp).
template <pipeline_graph Pipe, engine E, transport X = link_transport>
class runner {
    // An engine that declares an optional capability must have its members (a sentence names them).
    static_assert(detail::check_cancellable_engine<E>() && detail::check_reporting_engine<E>());

public:
    using input = typename Pipe::input;
    using output = typename Pipe::output;
    using io_type = run_io<input, output>;

    //! Every rank in this process.
    runner(Pipe& pipe, const program& prog, E& eng, run_options opts = {})
        requires std::same_as<X, link_transport> || std::same_as<X, local_transport>
        : runner(pipe, prog, eng, local_, std::move(opts))
    {
    }

    //! Lowers the program if it is compute-only, checks its shape against the pipeline, the
    //! engine and the transport, validates it (unless options.validate is false), connects the
    //! boundaries and checks with the other processes that they run the same configuration.
    //! Throws tpipe::invalid_program or tpipe::invalid_argument saying what does not fit.
    runner(Pipe& pipe, const program& prog, E& eng, X& x, run_options opts = {})
        : eng_(eng), x_(&x), opts_(std::move(opts)), prog_(prog.lowered() ? prog : lower(prog))
    {
        detail::check_program_fits(prog_, static_cast<int>(pipe.size()));
        if (opts_.validate) validate(prog_);
        else validate_structure(prog_);
        R_ = prog_.ranks;
        U_ = prog_.units.units();
        for (int i = 0; i < U_; ++i) units_.push_back(prog_.units.at(i));
        frame_.units = units_.data();
        where_ = detail::place_ranks(R_, opts_.device_of_rank, eng_, [this](int r) { return x_->runs(r); });
        bind(pipe);
        plan_ = detail::compile_ranks(prog_, bindings_, U_, [this](int r) { return x_->runs(r); });
        x_->agree(detail::program_fingerprint(prog_, bindings_.size(), U_, payload_names_));
        progress_ = std::make_unique<detail::rank_progress[]>(static_cast<std::size_t>(R_));
        events_.resize(static_cast<std::size_t>(R_));
        busy_.assign(static_cast<std::size_t>(R_), 0.0);
        done_.assign(static_cast<std::size_t>(R_), 0);
        peak_.assign(static_cast<std::size_t>(R_), 0);
    }

    const program& lowered_program() const noexcept { return prog_; }
    const std::vector<int>& device_of_rank() const noexcept { return where_.device; }
    //! The ranks this process runs.
    const std::vector<int>& local_ranks() const noexcept { return where_.local_ranks; }

    //! Runs one iteration. Throws tpipe::execution_error, tpipe::watchdog_error,
    //! tpipe::peer_error or tpipe::stopped_error (run_options::stop) on failure (after every rank
    //! of this process stopped), tpipe::invalid_argument when io.source is missing.
    run_stats run(const io_type& io)
    {
        if (!io.source) throw invalid_argument("run: io.source is required (it makes the first stage's input per unit)");
        if constexpr (!std::default_initializable<output>)
            if (!io.output_grad)
                throw invalid_argument("run: the last stage's output type is not default-constructible, so io.output_grad "
                                       "must provide the gradient that seeds backward");
        if (broken_)
            throw error("run: an earlier iteration failed across processes, so messages of it may still be in "
                        "flight; build a new transport and runner");
        // One iteration at a time: the runner's storage, channels and counters are per iteration.
        if (running_.exchange(true, std::memory_order_acquire))
            throw error("run: this runner (" + std::to_string(bindings_.size()) + " stages on " + std::to_string(R_) +
                        " ranks, " + std::to_string(U_) + " units) is already running an iteration on another "
                        "thread; call run() on one thread at a time, or give each thread a runner of its own");
        struct release_running {
            std::atomic<bool>& flag;
            ~release_running() { flag.store(false, std::memory_order_release); }
        } released_at_exit{running_};
        // Holding a loop wakes it if it sleeps, so that it is spinning by the time the ranks are
        // posted (the wake-up overlaps the setup below). Each rank releases its hold when done.
        for (int r : where_.local_ranks) eng_.loop_of(where_.device[r]).hold();
        std::vector<task<void>> tasks;
        std::vector<detail::root> roots;
        std::vector<wake_node> starts(where_.local_ranks.size());
        detail::user_stop<fail_stopped> stopped_by_user;  // run_options::stop, for this iteration
        try {
            prepare();
            stopped_by_user.watch(opts_.stop, fail_stopped{this});
            tasks.reserve(where_.local_ranks.size());
            roots.reserve(where_.local_ranks.size());
            for (std::size_t k = 0; k < where_.local_ranks.size(); ++k) {
                tasks.push_back(rank_main(where_.local_ranks[k]));
                roots.push_back(detail::make_root<void>(tasks.back().handle()));
                roots.back().on_done(&runner::root_done, this);
                starts[k].handle = roots.back().handle();
            }
        } catch (...) {
            for (int r : where_.local_ranks) eng_.loop_of(where_.device[r]).release();
            throw;
        }
        frame_.io = &io;
        clock_.start();
        completion_.start(static_cast<int>(where_.local_ranks.size()));
        for (std::size_t k = 0; k < where_.local_ranks.size(); ++k) eng_.loop_of(where_.device[where_.local_ranks[k]]).post(&starts[k]);
        completion_.wait(
            opts_.watchdog, progress_.get(), R_,
            [&] {
                auto peer = x_->failure();
                if (!peer) return false;
                set_error(std::make_exception_ptr(peer_error(*peer)), false);
                return true;
            },
            [&] {
                std::string report = detail::stuck_report(prog_, progress_.get(), where_.device,
                                                          std::chrono::duration<double>(opts_.watchdog).count(),
                                                          [&](int r) { return x_->where(r); },
                                                          [&](int r) { return tpipe::engine_waits(eng_, where_.device[r]); },
                                                          opts_.after_backward.what);
                // A process may have stopped: a transport that cannot end cleanly then hears it.
                if constexpr (requires { x_->stalled(report); }) x_->stalled(report);
                set_error(std::make_exception_ptr(watchdog_error(std::move(report))), true);
                return true;
            },
            [&] {  // a stage function that does not return: say so now, and tell the other processes
                std::exception_ptr e;
                {
                    std::lock_guard<std::mutex> g(error_m_);
                    e = error_;
                }
                const std::string report = detail::what_of(e) +
                                           "; run() returns (throwing this error) once the stage function does";
                x_->fail(report);
                told_peers_ = true;
                if (opts_.on_stuck) opts_.on_stuck(report);
                else std::fprintf(stderr, "tpipe::run: %s\n", report.c_str());
            });
        stopped_by_user.end();
        if (!error_ && stop_.stop_requested()) {  // the user's stop could not record its error
            error_ = stopped_by_user.error();
            error_is_local_ = true;
        }
        // Every rank finished: nothing waits on the engine any more, so this iteration's stop
        // (if it failed) must not reach the engine's later computes.
        reset_computes(eng_, {});
        roots.clear();
        tasks.clear();
        frame_.io = nullptr;
        left_payloads_ = error_ != nullptr || (plan_.unmatched_sends != 0 && where_.all_local);
        if (error_) {
            if (!where_.all_local) broken_ = true;
            if (error_is_local_ && !told_peers_) x_->fail(detail::what_of(error_));
            std::rethrow_exception(error_);
        }

        run_stats s;
        s.ranks = R_;
        s.time = completion_.end();
        s.busy = busy_;
        s.peak_activations = peak_;
        s.device_of_rank = where_.device;
        s.local_ranks = where_.local_ranks;
        for (std::size_t n : done_) s.actions += n;
        if (opts_.trace) {
            s.events.reserve(s.actions);
            for (const auto& ev : events_) s.events.insert(s.events.end(), ev.begin(), ev.end());
        }
        return s;
    }

private:
    //! One binding and one output boundary per stage, connected by where its ranks run.
    void bind(Pipe& pipe)
    {
        const std::size_t n = pipe.size();
        bindings_.resize(n);
        pipe.visit_stages([&]<stage S>(std::size_t i, S& s) {
            using out_t = stage_output_t<S>;
            auto b = std::make_unique<detail::boundary<out_t, X>>();
            payload_names_ += detail::portable_type_name<out_t>() + ";";
            if (i + 1 < n) {
                const int from = prog_.stage_rank[i], to = prog_.stage_rank[i + 1];
                const bool here_from = x_->runs(from), here_to = x_->runs(to);
                const auto ends = from == to                ? detail::boundary_ends::same_rank
                                  : here_from && here_to    ? detail::boundary_ends::both_here
                                  : here_from               ? detail::boundary_ends::sender_here
                                  : here_to                 ? detail::boundary_ends::receiver_here
                                                            : detail::boundary_ends::none;
                b->connect(*x_, ends, static_cast<int>(i), from, to, U_);
            } else {
                b->reset(U_, true, {});
            }
            detail::stage_binding& sb = bindings_[i];
            sb.frame = &frame_;
            sb.out = b.get();
            sb.in = i == 0 ? nullptr : boundaries_.back().get();
            detail::bind_stage<input, output, X>(sb, s, i, n);
            boundaries_.push_back(std::move(b));
        });
    }

    //! Per-iteration state back to the start: storage, channels, counters.
    void prepare()
    {
        // One stop source per iteration: every channel, the engine and the hook get its token, and
        // a failure stops it (set_error). Consumption empties storage and channels; a
        // forward-only program's loss seeds are overwritten when written again.
        stop_ = std::stop_source();
        const std::stop_token stop = stop_.get_token();
        for (auto& b : boundaries_) b->reset(U_, left_payloads_, stop);
        reset_computes(eng_, stop);
        error_ = nullptr;
        error_is_local_ = false;
        told_peers_ = false;
        if (opts_.after_backward.reset) opts_.after_backward.reset(stop);
        for (int r = 0; r < R_; ++r) {
            progress_[r].at.store(0, std::memory_order_relaxed);
            progress_[r].draining.store(false, std::memory_order_relaxed);
            progress_[r].receiving.store(false, std::memory_order_relaxed);
            progress_[r].finished.store(false, std::memory_order_relaxed);
            events_[r].clear();
            if (opts_.trace) events_[r].reserve(plan_.steps[r].size());
            busy_[r] = 0;
            done_[r] = 0;
            peak_[r] = 0;
        }
    }

    // ---- backward_hook work ---------------------------------------------------------------------
    //! The hook's work for `stage`, after the rank's previous job (whatever became of it).
    task<void> after_backward(detail::joinable_job* previous, int stage)
    {
        if (previous) co_await previous->join();
        co_await opts_.after_backward.start(stage);
    }

    // ---- the rank coroutine -------------------------------------------------------------------
    task<void> rank_main(int r)
    {
        const auto& steps = plan_.steps[r];
        auto& ev = events_[r];
        auto& prog = progress_[r];
        const int dev = where_.device[r];
        loop& home = eng_.loop_of(dev);
        const bool trace = opts_.trace;
        // Ranks that share a loop take turns: a rank that has computed since it last suspended
        // lets the other ready ranks of its loop run before its next compute, so that a rank
        // that never waits cannot hold its neighbours (and the ranks downstream of them) back.
        const bool shared = where_.shares_loop[static_cast<std::size_t>(r)];
        bool owes_turn = false;
        std::int64_t busy = 0;  // ticks; signed, as TSCs of different cores may differ by a few
        std::size_t done = 0;
        int live = 0, peak = 0;
        std::size_t i = 0;
        std::vector<std::unique_ptr<detail::joinable_job>> jobs;  // backward_hook work started by this rank
        try {
            for (const detail::post_of& p : plan_.posts[r]) p.b->post(p.forward, p.u);
            for (; i < steps.size(); ++i) {
                if (stop_.stop_requested()) break;
                const detail::step& st = steps[i];
                prog.at.store(i + 1, std::memory_order_relaxed);
                const bool compute = is_compute(st.kind);
                if (compute && owes_turn && home.has_ready()) co_await home.yield();
                if (compute && st.waits_on) {  // the payload this compute consumes must have arrived
                    detail::any_awaiter arrival;
                    st.waits_on->arrival(arrival, st.forward, st.u);
                    if (!arrival.await_ready()) {
                        prog.receiving.store(true, std::memory_order_relaxed);
                        co_await arrival;
                        prog.receiving.store(false, std::memory_order_relaxed);
                        owes_turn = false;
                    } else {
                        arrival.await_resume();
                    }
                }
                const std::uint64_t start = trace || compute ? detail::tick_clock::now() : 0;
                switch (st.kind) {
                case op::RECV_F:
                case op::RECV_B: break;               // posted: remote receives when the rank started
                case op::OVERLAP_F_B: break;          // its computes are the next steps
                case op::SEND_F:
                case op::SEND_B:
                    st.run(*st.stage, st.u);
                    break;
                default: co_await eng_.compute(dev, [&st] { st.run(*st.stage, st.u); });
                }
                if (st.last_backward && opts_.after_backward.start) {
                    jobs.push_back(std::make_unique<detail::joinable_job>());
                    detail::joinable_job* prev = jobs.size() > 1 ? jobs[jobs.size() - 2].get() : nullptr;
                    jobs.back()->start(after_backward(prev, prog_.actions[r][i].stage), home);
                }
                if (trace || compute) {
                    const std::uint64_t end = detail::tick_clock::now();
                    if (trace) ev.push_back(timed_action{r, prog_.actions[r][i], clock_.seconds(start), clock_.seconds(end)});
                    if (compute) {
                        busy += static_cast<std::int64_t>(end - start);
                        if (st.kind == op::F) peak = std::max(peak, ++live);
                        else if (st.kind != op::I) --live;
                        owes_turn = shared;
                    }
                }
                ++done;
            }
            if ((!plan_.drains[r].empty() || !jobs.empty()) && !stop_.stop_requested()) {
                prog.draining.store(true, std::memory_order_relaxed);
                for (const detail::drain_of& d : plan_.drains[r]) {
                    detail::any_awaiter drained;
                    d.b->drain(drained, d.forward);
                    co_await drained;
                }
            }
            if (!jobs.empty()) {
                co_await jobs.back()->join();  // each job joined the one before it
                for (auto& j : jobs) j->body.result();  // rethrows the first failure
            }
        } catch (const operation_cancelled&) {
            // Cancelled by this runner: its error is recorded. Otherwise the after-backward work
            // was cancelled from elsewhere (a data_parallel communicator, by another replica
            // that failed).
            if (!stop_.stop_requested())
                set_error(std::make_exception_ptr(peer_error(
                              "rank " + std::to_string(r) + ": its " + opts_.after_backward.what +
                              " was cancelled from outside this runner (another replica or process it works with "
                              "failed its iteration)")),
                          false);
        } catch (...) {
            fail(r, std::min(i, steps.size() - 1), std::current_exception());
        }
        if (!jobs.empty() && !jobs.back()->done) co_await jobs.back()->join();  // never leave one running
        busy_[r] = static_cast<double>(busy) * clock_.spt;
        peak_[r] = peak;
        done_[r] = done;
        prog.finished.store(true, std::memory_order_relaxed);
        home.release();
    }

    // ---- failure, completion ------------------------------------------------------------------

    //! Records the first error of the iteration and stops it: every channel's waits, the hook's
    //! work and the computes an engine waits for end (a GPU's work that never completes must not
    //! hold the iteration); `local`: it happened in this process (so the other processes must be
    //! told).
    void set_error(std::exception_ptr e, bool local)
    {
        {
            std::lock_guard<std::mutex> g(error_m_);
            if (!error_) {
                error_ = std::move(e);
                error_is_local_ = local;
            }
        }
        stop_.request_stop();
    }

    //! run_options::stop's failure path (detail::user_stop), on the thread that requested it.
    struct fail_stopped {
        runner* self;
        void operator()(const std::exception_ptr& stopped) const noexcept
        {
            try {
                self->set_error(stopped, true);
            } catch (...) {  // the error mutex failed to lock: stop all the same (run() records the error)
                self->stop_.request_stop();
            }
        }
    };

    void fail(int r, std::size_t i, std::exception_ptr cause)
    {
        const action& a = prog_.actions[r][i];
        const unit& un = units_[plan_.steps[r][i].u];
        std::string m = "rank " + std::to_string(r) + " (device " + std::to_string(where_.device[r]) +
                        "), stage " + std::to_string(a.stage) + ", action " + detail::describe(a, un) +
                        " failed: " + detail::what_of(cause);
        set_error(std::make_exception_ptr(execution_error(std::move(m), r, where_.device[r], a, un, cause)), true);
    }

    static void root_done(void* p) noexcept
    {
        auto* self = static_cast<runner*>(p);
        self->completion_.done(self->clock_.now());
    }

    E& eng_;
    //! The transport of the constructor without one: every rank here.
    [[no_unique_address]] std::conditional_t<std::same_as<X, local_transport>, local_transport, all_here> local_;
    X* x_;
    run_options opts_;
    program prog_;
    int R_ = 0, U_ = 0;
    std::vector<unit> units_;
    detail::iteration_frame frame_;
    detail::rank_placement where_;
    std::vector<detail::stage_binding> bindings_;
    std::vector<std::unique_ptr<detail::boundary_base>> boundaries_;  //!< per stage: at its output
    std::string payload_names_;
    detail::rank_plan plan_;
    std::vector<std::vector<timed_action>> events_;
    std::unique_ptr<detail::rank_progress[]> progress_;
    std::vector<double> busy_;
    std::vector<std::size_t> done_;        //!< per rank, actions executed
    std::vector<int> peak_;
    bool left_payloads_ = false;  //!< the last iteration may have left payloads in storage or channels
    bool broken_ = false;         //!< an iteration failed with ranks in other processes
    std::atomic<bool> running_{false};  //!< run() is in progress (on some thread)
    detail::iteration_clock clock_;
    std::stop_source stop_;  //!< this iteration's: stopped when it fails
    std::mutex error_m_;
    std::exception_ptr error_;
    bool error_is_local_ = false;
    bool told_peers_ = false;  //!< the transport was told of this iteration's failure already
    detail::completion completion_;
};

//! Every tpipe::link_transport model (tpipe::mpi::transport, tpipe::nccl::transport) runs the one runner type
//! runner<Pipe, E> (= runner<Pipe, E, link_transport>).
template <pipeline_graph Pipe, engine E, transport X>
    requires std::derived_from<X, link_transport>
runner(Pipe&, const program&, E&, X&, run_options = {}) -> runner<Pipe, E, link_transport>;

} // namespace tpipe
