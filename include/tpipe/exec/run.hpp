#pragma once
// tpipe::run: executes one training iteration of a pipeline on an engine, following a program
// (a schedule's actions per rank), and reports what really ran.
//
// Execution: one coroutine per rank walks the rank's action list in order on the loop of the
// device the rank is placed on. F/B/I/W call the stage functor through the engine's compute
// awaitable (inline on the CPU engine); SEND moves the payload into a local channel (never
// blocks); RECV suspends until the payload has arrived. Payloads live in typed storage per stage
// boundary indexed by the unit's dense index, so nothing is allocated per action.
//
// I/O (see tpipe/exec/stage.hpp): `source(u)` makes the first stage's input; `loss(u, out)`
// receives the last stage's output and returns the gradient that seeds its backward (without
// it: the output is dropped and backward gets Out{}); `input_grad(u, dx)` receives the first
// stage's input gradient (optional).
//
// Failure: an exception from a stage (or from source/loss/input_grad) cancels the iteration on
// every device; run throws one tpipe::execution_error naming rank, device, stage, action and
// unit. The watchdog turns "no rank started a new action for `watchdog`" into a
// tpipe::watchdog_error listing what every rank waits for. Cancellation is cooperative: waits
// are interrupted, a stage function that never returns is not.
#include <algorithm>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/detail/root.hpp"
#include "tpipe/exec/detail/tick_clock.hpp"
#include "tpipe/exec/engine.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/exec/local_channel.hpp"
#include "tpipe/exec/pipeline.hpp"
#include "tpipe/exec/stage.hpp"
#include "tpipe/exec/task.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/program.hpp"
#include "tpipe/schedule/schedule.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/timeline.hpp"

namespace tpipe {

//! How to run: placement of ranks on devices, watchdog, validation.
struct run_options {
    std::vector<int> device_of_rank;                                //!< empty: rank r on device r % devices
    std::chrono::milliseconds watchdog{std::chrono::seconds(60)};   //!< 0: no watchdog
    bool validate = true;                                           //!< tpipe::validate the program first
    //! Record every action's interval into run_stats::events (for trace(), text_timeline,
    //! svg_timeline). Off, only compute actions are timed (for busy): two TSC reads per compute
    //! action and none per send or receive.
    bool trace = false;
};

//! What an iteration did. Times are seconds since the iteration started.
struct run_stats {
    int ranks = 0;
    double time = 0;                     //!< from the start until the last rank finished
    std::vector<double> busy;            //!< per rank, seconds spent in compute actions
    std::vector<int> peak_activations;   //!< per rank, most units alive at once (F done, B/W not)
    std::vector<int> device_of_rank;
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

//! The user's end of the pipeline: first input, loss gradient, first input gradient.
template <class In, class Out>
struct run_io {
    std::function<In(const unit&)> source;            //!< required
    std::function<Out(const unit&, Out&&)> loss;      //!< optional: default drops out, seeds Out{}
    std::function<void(const unit&, In&&)> input_grad;  //!< optional: default drops it
};

template <pipeline_graph P>
using io_for = run_io<typename std::remove_cvref_t<P>::input, typename std::remove_cvref_t<P>::output>;

namespace detail {

template <class T>
T take_optional(std::optional<T>& o)
{
    T v = std::move(*o);
    o.reset();
    return v;
}

//! Storage at the output of one stage (type T = that stage's output).
template <class T>
struct boundary {
    boundary() {}
    local_channel<T> fwd;                    //!< activations to the next stage (other rank)
    local_channel<T> bwd;                    //!< gradients from the next stage (other rank)
    std::vector<std::optional<T>> act_out;   //!< forward output not yet sent or consumed
    std::vector<std::optional<T>> grad_out;  //!< next stage's input gradient not yet sent or consumed
    std::vector<std::optional<T>> seed;      //!< last stage only: loss gradient per unit

    //! Starts an iteration. Storage and channels are emptied by consumption (every value taken
    //! is reset), so they are cleared only when asked: after an iteration that left payloads
    //! behind (a failure, or a program run unvalidated that sends what it never receives).
    void reset(int units, bool clear)
    {
        fwd.reset(units);
        bwd.reset(units);
        if (!clear) return;
        fwd.clear();
        bwd.clear();
        for (auto* v : {&act_out, &grad_out, &seed}) {
            v->clear();  // keeps the capacity: no allocation after the first iteration
            v->resize(static_cast<std::size_t>(units));
        }
    }
    void cancel() noexcept
    {
        fwd.cancel();
        bwd.cancel();
    }
};

template <class Pipe, class Seq>
struct boundaries_of;
template <class Pipe, std::size_t... I>
struct boundaries_of<Pipe, std::index_sequence<I...>> {
    using type = std::tuple<boundary<stage_output_t<typename Pipe::template stage_type<I>>>...>;
};

struct alignas(64) rank_progress {
    std::atomic<std::size_t> at{0};
    std::atomic<bool> finished{false};
};

inline std::string describe(const action& a, const unit& u)
{
    return "'" + to_string(a) + "' (microbatch " + std::to_string(u.microbatch) + ", slice " + std::to_string(u.slice) +
           ", rows [" + std::to_string(u.row_begin) + "," + std::to_string(u.row_end) + "), tokens [" +
           std::to_string(u.token_begin) + "," + std::to_string(u.token_end) + "))";
}

inline std::string what_of(const std::exception_ptr& e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "an exception not derived from std::exception";
    }
}

} // namespace detail

//! Runs iterations of one pipeline with one program on one engine; reusable across iterations
//! (storage and channels are kept, so a steady state allocates only the per-rank coroutines).
template <pipeline_graph Pipe, engine E>
class runner {
public:
    static constexpr std::size_t stages = Pipe::size;
    using input = typename Pipe::input;
    using output = typename Pipe::output;
    using io_type = run_io<input, output>;

    //! Lowers the program if it is compute-only, checks its shape against the pipeline and the
    //! engine, and validates it (unless options.validate is false). Throws tpipe::invalid_program
    //! or tpipe::invalid_argument saying what does not fit.
    runner(Pipe& pipe, const program& prog, E& eng, run_options opts = {})
        : pipe_(pipe), eng_(eng), opts_(std::move(opts)), prog_(prog.lowered() ? prog : lower(prog))
    {
        if (prog_.stages() != static_cast<int>(stages))
            throw invalid_program("the program has " + std::to_string(prog_.stages()) + " stages but the pipeline has " +
                                  std::to_string(stages) + "; build the schedule for " + std::to_string(stages) +
                                  " stages");
        if (prog_.ranks < 1 || static_cast<int>(prog_.actions.size()) != prog_.ranks)
            throw invalid_program("the program must have one action list per rank (" + std::to_string(prog_.ranks) +
                                  " ranks, " + std::to_string(prog_.actions.size()) + " lists)");
        if (opts_.validate) validate(prog_);
        R_ = prog_.ranks;
        U_ = prog_.units.units();
        for (int i = 0; i < U_; ++i) units_.push_back(prog_.units.at(i));
        device_ = opts_.device_of_rank;
        if (device_.empty())
            for (int r = 0; r < R_; ++r) device_.push_back(r % eng_.devices());
        if (static_cast<int>(device_.size()) != R_)
            throw invalid_argument("device_of_rank names " + std::to_string(device_.size()) +
                                   " ranks but the program has " + std::to_string(R_));
        for (int d : device_)
            if (d < 0 || d >= eng_.devices())
                throw invalid_argument("device_of_rank names device " + std::to_string(d) + " but the engine has " +
                                       std::to_string(eng_.devices()) + " devices");
        for (int r = 0; r < R_; ++r) {
            const loop* home = &eng_.loop_of(device_[r]);
            shares_loop_.push_back(
                std::count_if(device_.begin(), device_.end(), [&](int d) { return &eng_.loop_of(d) == home; }) > 1);
        }
        std::apply([&](auto&... b) { (b.reset(U_, true), ...); }, bounds_);
        compile();
        progress_ = std::make_unique<detail::rank_progress[]>(static_cast<std::size_t>(R_));
        events_.resize(static_cast<std::size_t>(R_));
        busy_.assign(static_cast<std::size_t>(R_), 0.0);
        done_.assign(static_cast<std::size_t>(R_), 0);
        transfers_.assign(static_cast<std::size_t>(R_), 0);
        peak_.assign(static_cast<std::size_t>(R_), 0);
    }

    const program& lowered_program() const noexcept { return prog_; }
    const std::vector<int>& device_of_rank() const noexcept { return device_; }

    //! Runs one iteration. Throws tpipe::execution_error or tpipe::watchdog_error on failure
    //! (after every rank stopped), tpipe::invalid_argument when io.source is missing.
    run_stats run(const io_type& io)
    {
        if (!io.source) throw invalid_argument("run: io.source is required (it makes the first stage's input per unit)");
        if constexpr (!std::default_initializable<output>)
            if (!io.loss)
                throw invalid_argument("run: the last stage's output type is not default-constructible, so io.loss "
                                       "must provide the gradient that seeds backward");
        // Holding a loop wakes it if it sleeps, so that it is spinning by the time the ranks are
        // posted (the wake-up overlaps the setup below). Each rank releases its hold when done.
        for (int r = 0; r < R_; ++r) eng_.loop_of(device_[r]).hold();
        std::vector<task<void>> tasks;
        std::vector<detail::root> roots;
        std::vector<wake_node> starts(static_cast<std::size_t>(R_));
        try {
            prepare();
            tasks.reserve(static_cast<std::size_t>(R_));
            roots.reserve(static_cast<std::size_t>(R_));
            for (int r = 0; r < R_; ++r) {
                tasks.push_back(rank_main(r));
                roots.push_back(detail::make_root<void>(tasks.back().handle()));
                roots.back().on_done(&runner::root_done, this);
                starts[r].handle = roots.back().handle();
            }
        } catch (...) {
            for (int r = 0; r < R_; ++r) eng_.loop_of(device_[r]).release();
            throw;
        }
        io_ = &io;
        spt_ = detail::tick_clock::seconds_per_tick();
        t0_ = detail::tick_clock::now();
        for (int r = 0; r < R_; ++r) eng_.loop_of(device_[r]).post(&starts[r]);
        wait();
        roots.clear();
        tasks.clear();
        io_ = nullptr;
        std::int64_t undelivered = 0;  // sends minus receives: each receive takes one distinct sent payload
        for (std::int64_t n : transfers_) undelivered += n;
        left_payloads_ = error_ != nullptr || undelivered != 0;
        if (error_) std::rethrow_exception(error_);

        run_stats s;
        s.ranks = R_;
        s.time = end_;
        s.busy = busy_;
        s.peak_activations = peak_;
        s.device_of_rank = device_;
        for (std::size_t n : done_) s.actions += n;
        if (opts_.trace) {
            s.events.reserve(s.actions);
            for (const auto& ev : events_) s.events.insert(s.events.end(), ev.begin(), ev.end());
        }
        return s;
    }

private:
    //! Per-iteration state back to the start: storage, channels, counters.
    void prepare()
    {
        // Consumption empties storage and channels; a forward-only program's loss seeds are
        // overwritten when written again.
        if (iterations_++ > 0) std::apply([&](auto&... b) { (b.reset(U_, left_payloads_), ...); }, bounds_);
        cancel_.store(false, std::memory_order_relaxed);
        error_ = nullptr;
        end_ = 0;
        remaining_ = R_;
        for (int r = 0; r < R_; ++r) {
            progress_[r].at.store(0, std::memory_order_relaxed);
            progress_[r].finished.store(false, std::memory_order_relaxed);
            events_[r].clear();
            if (opts_.trace) events_[r].reserve(steps_[r].size());
            busy_[r] = 0;
            done_[r] = 0;
            transfers_[r] = 0;
            peak_[r] = 0;
        }
    }

    template <std::size_t I>
    using stage_t = typename Pipe::template stage_type<I>;
    template <std::size_t I>
    using out_t = stage_output_t<stage_t<I>>;
    template <std::size_t I>
    using in_t = stage_input_t<stage_t<I>>;
    using handler = void (*)(runner&, int u);

    //! What the rank coroutine needs of an action, compiled once per runner; 32 bytes, as the
    //! steps are streamed through once per iteration. The action itself stays in prog_.
    struct step {
        handler run = nullptr;                       //!< compute and send
        detail::slot_header* slot = nullptr;         //!< receive: slot and channel waited on
        const detail::channel_base* chan = nullptr;
        int u = 0;                                   //!< dense unit index
        op kind = op::F;
    };

    template <std::size_t I>
    auto& bnd() noexcept
    {
        return std::get<I>(bounds_);
    }

    [[noreturn]] static void missing(const char* what) { throw error(std::string("runtime: ") + what); }

    // ---- per-stage actions (typed) ----------------------------------------------------------
    template <std::size_t S>
    in_t<S> forward_input(int u)
    {
        if constexpr (S == 0) {
            return io_->source(units_[u]);
        } else {
            auto& b = bnd<S - 1>();
            if (b.fwd.ready(u)) return b.fwd.take(u);
            if (b.act_out[u]) return detail::take_optional(b.act_out[u]);
            missing("the forward input has not arrived (the program lacks a RECV_F, or stage S-1 did not run F)");
        }
    }

    template <std::size_t S>
    out_t<S> backward_grad(int u)
    {
        if constexpr (S + 1 == stages) {
            auto& seed = bnd<S>().seed[u];
            if (!seed) missing("the loss gradient is not there (forward of the last stage did not run)");
            return detail::take_optional(seed);
        } else {
            auto& b = bnd<S>();
            if (b.bwd.ready(u)) return b.bwd.take(u);
            if (b.grad_out[u]) return detail::take_optional(b.grad_out[u]);
            missing("the output gradient has not arrived (the program lacks a RECV_B, or stage S+1 did not run B)");
        }
    }

    template <std::size_t S>
    static void do_forward(runner& r, int u)
    {
        auto& st = r.pipe_.template stage<S>();
        const unit& un = r.units_[u];
        if constexpr (S + 1 == stages) {
            out_t<S> y = st.forward(un, r.forward_input<S>(u));
            auto& seed = r.bnd<S>().seed[u];
            if (r.io_->loss) seed.emplace(r.io_->loss(un, std::move(y)));
            else if constexpr (std::default_initializable<out_t<S>>) seed.emplace();
        } else {
            r.bnd<S>().act_out[u].emplace(st.forward(un, r.forward_input<S>(u)));
        }
    }

    template <std::size_t S, bool InputOnly>
    static void do_backward(runner& r, int u)
    {
        auto& st = r.pipe_.template stage<S>();
        const unit& un = r.units_[u];
        in_t<S> dx = [&] {
            if constexpr (InputOnly && split_backward_stage<stage_t<S>>) return st.backward_input(un, r.backward_grad<S>(u));
            else return st.backward(un, r.backward_grad<S>(u));
        }();
        if constexpr (S == 0) {
            if (r.io_->input_grad) r.io_->input_grad(un, std::move(dx));
        } else {
            r.bnd<S - 1>().grad_out[u].emplace(std::move(dx));
        }
    }

    template <std::size_t S>
    static void do_weight(runner& r, int u)
    {
        if constexpr (split_backward_stage<stage_t<S>>) r.pipe_.template stage<S>().backward_weight(r.units_[u]);
        else (void)r, (void)u;  // fallback: the I action already ran the whole backward
    }

    template <std::size_t S>
    static void do_send_f(runner& r, int u)
    {
        auto& b = r.bnd<S>();
        if (!b.act_out[u]) missing("SEND_F before the forward that produces it");
        b.fwd.put(u, detail::take_optional(b.act_out[u]));
    }

    template <std::size_t S>
    static void do_send_b(runner& r, int u)
    {
        if constexpr (S == 0) {
            (void)r, (void)u;
            missing("SEND_B from the first stage");
        } else {
            auto& b = r.bnd<S - 1>();
            if (!b.grad_out[u]) missing("SEND_B before the backward that produces it");
            b.bwd.put(u, detail::take_optional(b.grad_out[u]));
        }
    }

    template <std::size_t S>
    void compile_step(const action& a, step& st)
    {
        auto refuse = [&](const char* why) { throw invalid_program("action '" + to_string(a) + "': " + why); };
        switch (a.kind) {
        case op::F: st.run = &do_forward<S>; break;
        case op::B: st.run = &do_backward<S, false>; break;
        case op::I: st.run = &do_backward<S, true>; break;
        case op::W: st.run = &do_weight<S>; break;
        case op::SEND_F:
            if (S + 1 == stages) refuse("the last stage has no next stage to send to");
            st.run = &do_send_f<S>;
            break;
        case op::SEND_B:
            if (S == 0) refuse("the first stage has no previous stage to send to");
            st.run = &do_send_b<S>;
            break;
        case op::RECV_F:
            if constexpr (S == 0) refuse("the first stage has no previous stage to receive from");
            else {
                st.chan = &bnd<S - 1>().fwd;
                st.slot = &bnd<S - 1>().fwd.header(st.u);
            }
            break;
        case op::RECV_B:
            if constexpr (S + 1 == stages) refuse("the last stage has no next stage to receive from");
            else {
                st.chan = &bnd<S>().bwd;
                st.slot = &bnd<S>().bwd.header(st.u);
            }
            break;
        default: refuse("this kind is PyTorch's (for reading, writing and simulating); the runtime does not run it");
        }
    }

    template <std::size_t... I>
    void compile_step(const action& a, step& st, std::index_sequence<I...>)
    {
        ((a.stage == static_cast<int>(I) ? (compile_step<I>(a, st), 0) : 0), ...);
    }

    void compile()
    {
        steps_.assign(static_cast<std::size_t>(R_), {});
        for (int r = 0; r < R_; ++r)
            for (const action& a : prog_.actions[r]) {
                if (a.stage < 0 || a.stage >= static_cast<int>(stages))
                    throw invalid_program("action '" + to_string(a) + "' on rank " + std::to_string(r) +
                                          " names a stage outside [0, " + std::to_string(stages) + ")");
                if (prog_.stage_rank[a.stage] != r)
                    throw invalid_program("action '" + to_string(a) + "' runs on rank " + std::to_string(r) +
                                          " but stage " + std::to_string(a.stage) + " is placed on rank " +
                                          std::to_string(prog_.stage_rank[a.stage]));
                if (!prog_.units.contains(a.microbatch, a.slice))
                    throw invalid_program("action '" + to_string(a) + "' names a unit that is not in the scheme");
                step st;
                st.kind = a.kind;
                st.u = prog_.units.index(a.microbatch, a.slice);
                compile_step(a, st, std::make_index_sequence<stages>{});
                steps_[r].push_back(st);
            }
    }

    // ---- the rank coroutine -------------------------------------------------------------------
    //! Seconds since the start of the iteration.
    double seconds(std::uint64_t tick) const noexcept
    {
        // Signed: TSCs of different cores may differ by a few ticks.
        return static_cast<double>(static_cast<std::int64_t>(tick - t0_)) * spt_;
    }
    double clock() const noexcept { return seconds(detail::tick_clock::now()); }

    task<void> rank_main(int r)
    {
        const auto& steps = steps_[r];
        auto& ev = events_[r];
        auto& prog = progress_[r];
        const int dev = device_[r];
        loop& home = eng_.loop_of(dev);
        const bool trace = opts_.trace;
        // Ranks that share a loop take turns: a rank that has computed since it last suspended
        // lets the other ready ranks of its loop run before its next compute, so that a rank
        // that never waits cannot hold its neighbours (and the ranks downstream of them) back.
        const bool shared = shares_loop_[static_cast<std::size_t>(r)];
        bool owes_turn = false;
        std::int64_t busy = 0;  // ticks; signed, as TSCs of different cores may differ by a few
        std::size_t done = 0;
        std::int64_t transfers = 0;
        int live = 0, peak = 0;
        for (std::size_t i = 0; i < steps.size(); ++i) {
            if (cancel_.load(std::memory_order_relaxed)) break;
            const step& st = steps[i];
            prog.at.store(i + 1, std::memory_order_relaxed);
            try {
                const bool compute = is_compute(st.kind);
                if (compute && owes_turn && home.has_ready()) co_await home.yield();
                const std::uint64_t start = trace || compute ? detail::tick_clock::now() : 0;
                switch (st.kind) {
                case op::RECV_F:
                case op::RECV_B: {
                    detail::slot_wait arrival(*st.chan, *st.slot);
                    const bool waits = !arrival.await_ready();
                    co_await arrival;
                    owes_turn = owes_turn && !waits;
                    --transfers;
                    break;
                }
                case op::SEND_F:
                case op::SEND_B:
                    st.run(*this, st.u);
                    ++transfers;
                    break;
                default: co_await eng_.compute(dev, [this, &st] { st.run(*this, st.u); });
                }
                if (trace || compute) {
                    const std::uint64_t end = detail::tick_clock::now();
                    if (trace) ev.push_back(timed_action{r, prog_.actions[r][i], seconds(start), seconds(end)});
                    if (compute) {
                        busy += static_cast<std::int64_t>(end - start);
                        if (st.kind == op::F) peak = std::max(peak, ++live);
                        else if (st.kind != op::I) --live;
                        owes_turn = shared;
                    }
                }
                ++done;
            } catch (const operation_cancelled&) {
                break;
            } catch (...) {
                fail(r, i, std::current_exception());
                break;
            }
        }
        busy_[r] = static_cast<double>(busy) * spt_;
        peak_[r] = peak;
        done_[r] = done;
        transfers_[r] = transfers;
        prog.finished.store(true, std::memory_order_relaxed);
        home.release();
    }

    // ---- failure, completion, watchdog --------------------------------------------------------
    void cancel_all() noexcept
    {
        cancel_.store(true, std::memory_order_seq_cst);
        std::apply([](auto&... b) { (b.cancel(), ...); }, bounds_);
    }

    void set_error(std::exception_ptr e)
    {
        {
            std::lock_guard<std::mutex> g(error_m_);
            if (!error_) error_ = std::move(e);
        }
        cancel_all();
    }

    void fail(int r, std::size_t i, std::exception_ptr cause)
    {
        const action& a = prog_.actions[r][i];
        const unit& un = units_[steps_[r][i].u];
        std::string m = "rank " + std::to_string(r) + " (device " + std::to_string(device_[r]) + "), stage " +
                        std::to_string(a.stage) + ", action " + detail::describe(a, un) +
                        " failed: " + detail::what_of(cause);
        set_error(std::make_exception_ptr(execution_error(std::move(m), r, device_[r], a, un, cause)));
    }

    static void root_done(void* p) noexcept
    {
        auto* self = static_cast<runner*>(p);
        const double t = self->clock();
        std::lock_guard<std::mutex> g(self->done_m_);
        self->end_ = std::max(self->end_, t);
        if (--self->remaining_ == 0) self->done_cv_.notify_all();
    }

    std::string stuck_report(double seconds) const
    {
        std::string m = "watchdog: no rank started a new action for " + std::to_string(seconds) + " s;";
        for (int r = 0; r < R_; ++r) {
            m += " rank " + std::to_string(r) + " (device " + std::to_string(device_[r]) + ") ";
            const std::size_t at = progress_[r].at.load(std::memory_order_relaxed);
            if (progress_[r].finished.load(std::memory_order_relaxed) || at == 0) {
                m += progress_[r].finished.load(std::memory_order_relaxed) ? "finished;" : "has not started;";
                continue;
            }
            const action& a = prog_.actions[r][at - 1];
            const std::string here = "at action #" + std::to_string(at - 1) + " '" + to_string(a) + "'";
            if (a.kind == op::RECV_F || a.kind == op::RECV_B) {
                const bool fwd = a.kind == op::RECV_F;
                const action partner{a.stage + (fwd ? -1 : 1), fwd ? op::SEND_F : op::SEND_B, a.microbatch, a.slice};
                const int peer = prog_.stage_rank[partner.stage];
                m += "waits " + here + " for '" + to_string(partner) + "' from rank " + std::to_string(peer);
                const auto& row = prog_.actions[peer];
                const std::size_t peer_at = progress_[peer].at.load(std::memory_order_relaxed);
                bool ahead = false;
                for (std::size_t k = peer_at == 0 ? 0 : peer_at - 1; k < row.size(); ++k) ahead |= row[k] == partner;
                m += ahead ? " (not reached yet);" : " (which never sends it);";
            } else {
                m += "is running " + here + " (the stage function has not returned);";
            }
        }
        m.pop_back();
        return m;
    }

    void wait()
    {
        // No spinning here: the calling thread would take a core from a loop thread.
        std::unique_lock<std::mutex> lk(done_m_);
        const auto period = opts_.watchdog;
        if (period.count() <= 0) {
            done_cv_.wait(lk, [&] { return remaining_ == 0; });
            return;
        }
        const auto tick = std::clamp(period / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100));
        std::size_t seen = ~std::size_t{0};
        auto changed = std::chrono::steady_clock::now();
        bool fired = false;
        while (remaining_ > 0) {
            done_cv_.wait_for(lk, tick, [&] { return remaining_ == 0; });
            if (remaining_ == 0 || fired) continue;
            std::size_t sum = 0;
            for (int r = 0; r < R_; ++r) sum += progress_[r].at.load(std::memory_order_relaxed);
            const auto now = std::chrono::steady_clock::now();
            if (sum != seen) {
                seen = sum;
                changed = now;
            } else if (now - changed >= period) {
                fired = true;
                lk.unlock();
                set_error(std::make_exception_ptr(
                    watchdog_error(stuck_report(std::chrono::duration<double>(period).count()))));
                lk.lock();
            }
        }
    }

    Pipe& pipe_;
    E& eng_;
    run_options opts_;
    program prog_;
    int R_ = 0, U_ = 0;
    std::vector<unit> units_;
    std::vector<int> device_;
    std::vector<bool> shares_loop_;  //!< per rank: another rank runs on the same loop
    typename detail::boundaries_of<Pipe, std::make_index_sequence<stages>>::type bounds_;
    std::vector<std::vector<step>> steps_;
    std::vector<std::vector<timed_action>> events_;
    std::unique_ptr<detail::rank_progress[]> progress_;
    std::vector<double> busy_;
    std::vector<std::size_t> done_;        //!< per rank, actions executed
    std::vector<std::int64_t> transfers_;  //!< per rank, sends minus receives executed
    std::vector<int> peak_;
    const io_type* io_ = nullptr;
    std::size_t iterations_ = 0;
    bool left_payloads_ = false;  //!< the last iteration may have left payloads in storage or channels
    std::uint64_t t0_ = 0;   //!< tick_clock at the start of the iteration
    double spt_ = 0;         //!< seconds per tick
    std::atomic<bool> cancel_{false};
    std::mutex error_m_;
    std::exception_ptr error_;
    std::mutex done_m_;
    std::condition_variable done_cv_;
    int remaining_ = 0;
    double end_ = 0;
};

//! Runs one iteration of `pipe` following `prog` (lowered here if compute-only) on `eng`.
template <pipeline_graph Pipe, engine E>
run_stats run(Pipe& pipe, const program& prog, E& eng, const io_for<Pipe>& io, run_options opts = {})
{
    runner<Pipe, E> r(pipe, prog, eng, std::move(opts));
    return r.run(io);
}

//! Runs one iteration with the program that `sched` makes for `units` on `topo`.
template <pipeline_graph Pipe, schedule S, engine E>
run_stats run(Pipe& pipe, const S& sched, const scheme& units, topology topo, E& eng, const io_for<Pipe>& io,
              run_options opts = {})
{
    return run(pipe, sched.program(topo, units), eng, io, std::move(opts));
}

} // namespace tpipe
