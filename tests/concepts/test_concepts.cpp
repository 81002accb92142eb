// Every concept of include/tpipe (but the CUDA/NCCL/MPI trees', tested in their suites), both
// ways: models that must satisfy it (the shipped ones among them) and near misses that must not.
// The optional capabilities' runtime defaults, and the runner's refusal of a boundary that its
// transport cannot carry, are checked at run time below; a model that declares a capability
// with a wrong member does not compile (tests/diagnostics/*, run by ctest).
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <stop_token>
#include <thread>
#include <vector>

#include "../exec/copying_transport.hpp"
#include "tpipe/comm/averaging_communicator.hpp"
#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/elastic/driver_loop.hpp"
#include "tpipe/elastic/elastic_latency.hpp"
#include "tpipe/elastic/freeze.hpp"
#include "tpipe/elastic/thread_driver.hpp"
#include "tpipe/exec/cancellable_engine.hpp"
#include "tpipe/transport/composed_transport.hpp"
#include "tpipe/exec/data_parallel.hpp"
#include "tpipe/exec/gradients.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/transport/recyclable_payload.hpp"
#include "tpipe/exec/reporting_engine.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/plan/latency_costs.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/profiler.hpp"
#include "tpipe/plan/table_latency.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/dualpipe_v.hpp"
#include "tpipe/schedule/gpipe.hpp"
#include "tpipe/schedule/interleaved.hpp"
#include "tpipe/schedule/interleaved_zb.hpp"
#include "tpipe/schedule/looped_bfs.hpp"
#include "tpipe/schedule/one_f_one_b.hpp"
#include "tpipe/schedule/terapipe_1f1b.hpp"
#include "tpipe/schedule/zb_h1.hpp"
#include "tpipe/schedule/zb_v.hpp"
#include "tpipe/sim/costs.hpp"
#include "tpipe/slice/slicers.hpp"
#include "tpipe/state/dtype.hpp"
#include "tpipe/state/shard_update.hpp"

#include "../elastic/chain_model.hpp"

namespace {

using tpipe::unit;

// ---- payload, stage, pipeline -----------------------------------------------------------------
struct immovable {
    immovable() = default;
    immovable(immovable&&) = delete;
};
static_assert(tpipe::payload<int> && tpipe::payload<std::vector<float>> && tpipe::payload<std::unique_ptr<int>>);
static_assert(!tpipe::payload<int&> && !tpipe::payload<immovable> && !tpipe::payload<void>);

struct ok_stage {
    using input = int;
    using output = double;
    double forward(const unit&, int x) { return x; }
    int backward(const unit&, double g) { return static_cast<int>(g); }
};
struct split_stage : ok_stage {
    int backward_input(const unit&, double g) { return static_cast<int>(g); }
    void backward_weight(const unit&) {}
};
struct no_types {
    double forward(const unit&, int x) { return x; }
    int backward(const unit&, double g) { return static_cast<int>(g); }
};
struct wrong_forward {  // returns the input type
    using input = int;
    using output = double;
    int forward(const unit&, int x) { return x; }
    int backward(const unit&, double g) { return static_cast<int>(g); }
};
struct wrong_backward {  // takes something else than the output gradient
    using input = int;
    using output = double;
    double forward(const unit&, int x) { return x; }
    int backward(const unit&, std::vector<double> g) { return static_cast<int>(g.size()); }
};
struct half_split : ok_stage {  // backward_input without backward_weight
    int backward_input(const unit&, double g) { return static_cast<int>(g); }
};
struct back_stage {
    using input = double;
    using output = int;
    int forward(const unit&, double x) { return static_cast<int>(x); }
    double backward(const unit&, int g) { return g; }
};
struct same_stage {
    using input = int;
    using output = int;
    int forward(const unit&, int x) { return x; }
    int backward(const unit&, int g) { return g; }
};
static_assert(tpipe::declares_input_and_output_types<ok_stage> && !tpipe::declares_input_and_output_types<no_types>);
static_assert(tpipe::has_forward_from_input_to_output<ok_stage> && !tpipe::has_forward_from_input_to_output<wrong_forward>);
static_assert(tpipe::has_backward_from_output_grad_to_input_grad<ok_stage> &&
              !tpipe::has_backward_from_output_grad_to_input_grad<wrong_backward>);
static_assert(tpipe::stage<ok_stage> && tpipe::stage<std::reference_wrapper<ok_stage>>);
static_assert(!tpipe::stage<no_types> && !tpipe::stage<wrong_forward> && !tpipe::stage<wrong_backward>);
static_assert(tpipe::split_backward_stage<split_stage> && !tpipe::split_backward_stage<ok_stage> &&
              !tpipe::split_backward_stage<half_split>);
// Both or neither: a stage that names one half (or both with a wrong signature) means to split,
// and tpipe::detail::check_split_backward refuses it in a pipeline (tests/diagnostics/half_split_backward.cpp).
struct weight_only : ok_stage {  // backward_weight without backward_input
    void backward_weight(const unit&) {}
};
struct split_wrong_input : ok_stage {  // both, but backward_input returns the output type
    double backward_input(const unit&, double g) { return g; }
    void backward_weight(const unit&) {}
};
static_assert(tpipe::names_backward_input<half_split> && !tpipe::names_backward_weight<half_split>);
static_assert(!tpipe::names_backward_input<weight_only> && tpipe::names_backward_weight<weight_only>);
static_assert(tpipe::names_backward_input<split_wrong_input> && tpipe::names_backward_weight<split_wrong_input> &&
              !tpipe::split_backward_stage<split_wrong_input>);
static_assert(!tpipe::names_backward_input<ok_stage> && !tpipe::names_backward_weight<ok_stage>);
static_assert(tpipe::detail::check_split_backward<ok_stage>() && tpipe::detail::check_split_backward<split_stage>());
static_assert(tpipe::every_argument_is_a_stage<ok_stage, back_stage> && !tpipe::every_argument_is_a_stage<ok_stage, no_types>);
static_assert(tpipe::each_stage_output_type_is_the_next_stage_input_type<ok_stage, back_stage>);
static_assert(!tpipe::each_stage_output_type_is_the_next_stage_input_type<ok_stage, ok_stage>);
static_assert(tpipe::uniform_stage<same_stage> && !tpipe::uniform_stage<ok_stage>);

struct no_visit_graph {  // no visit_stages
    using input = int;
    using output = int;
    std::size_t size() const { return 1; }
};
struct unmovable_io_graph {  // a visitor, but an output that is not a payload
    using input = int;
    using output = immovable;
    std::size_t size() const { return 1; }
    template <class F>
    void visit_stages(F&&)
    {
    }
};
static_assert(tpipe::pipeline_graph<tpipe::pipeline_t<ok_stage, back_stage>>);
static_assert(tpipe::pipeline_graph<tpipe::uniform_pipeline<same_stage>>);
static_assert(!tpipe::pipeline_graph<no_visit_graph> && !tpipe::pipeline_graph<unmovable_io_graph>);

// ---- gradients --------------------------------------------------------------------------------
struct grads_span : same_stage {
    std::span<float> gradients() { return {}; }
};
struct grads_list : same_stage {
    std::vector<std::span<double>> gradients() { return {}; }
};
struct grads_ints : same_stage {
    std::span<int> gradients() { return {}; }
};
struct grads_const_floats : same_stage {  // read-only spans: nothing to reduce into
    std::span<const float> gradients() { return {}; }
};
struct grads_data_member : same_stage {  // a member named gradients that is not a function
    std::vector<float> gradients;
};
static_assert(tpipe::exposes_gradients<grads_span> && tpipe::exposes_gradients<grads_list>);
static_assert(!tpipe::exposes_gradients<grads_ints> && !tpipe::exposes_gradients<same_stage>);
// A near miss names gradients without exposing them: data_parallel refuses it at compile time
// (tpipe::detail::check_gradients; tests/diagnostics/gradients_wrong_type.cpp), never skips it.
static_assert(tpipe::names_gradients<grads_ints> && tpipe::names_gradients<grads_const_floats> &&
              tpipe::names_gradients<grads_data_member> && !tpipe::names_gradients<same_stage>);
static_assert(!tpipe::exposes_gradients<grads_const_floats> && !tpipe::exposes_gradients<grads_data_member>);
static_assert(tpipe::detail::check_gradients<grads_span>() && tpipe::detail::check_gradients<same_stage>());
static_assert(tpipe::detail::gradient_span<std::span<float>> && !tpipe::detail::gradient_span<std::span<const float>>);

// ---- awaitables, channels, byte payloads ------------------------------------------------------
struct int_awaiter {
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
    int await_resume() const noexcept { return 1; }
};
struct has_co_await {
    int_awaiter operator co_await() const { return {}; }
};
struct no_resume {
    bool await_ready() const noexcept { return true; }
    void await_suspend(std::coroutine_handle<>) const noexcept {}
};
static_assert(tpipe::awaiter_of<int_awaiter, int> && !tpipe::awaiter_of<no_resume, void>);
static_assert(!tpipe::awaiter_of<int_awaiter, std::string>);
static_assert(tpipe::awaitable_of<has_co_await, int> && tpipe::awaitable_of<std::suspend_never, void>);
static_assert(!tpipe::awaitable_of<int, void> && !tpipe::awaitable_of<no_resume, void>);

//! A channel without drain(): one member short.
template <class T>
struct undrained_channel {
    using value_type = T;
    void send(int, T&&) {}
    void post(int) {}
    std::suspend_never arrival(int) { return {}; }
    bool ready(int) const { return false; }
    T take(int) { return T{}; }
    void reset(int, std::stop_token) {}
};
//! A channel of the seam before the stop token: it drains, but has cancel() and reset(tags)
//! (hiding reset(tags, stop)) instead of reset(tags, stop).
template <class T>
struct tokenless_channel : undrained_channel<T> {
    std::suspend_never drain() { return {}; }
    void cancel() noexcept {}
    void reset(int) {}
};
static_assert(tpipe::channel<tpipe::local_channel<int>> && tpipe::channel<tpipe::local_channel<std::unique_ptr<int>>>);
static_assert(tpipe::channel<tpipe::detail::no_channel<int>> && !tpipe::channel<undrained_channel<int>>);
static_assert(!tpipe::channel<tokenless_channel<int>>);

struct opaque {  // a payload without a byte form
    int v = 0;
};
static_assert(tpipe::byte_payload<std::vector<float>> && tpipe::byte_payload<std::vector<std::int64_t>>);
static_assert(!tpipe::byte_payload<opaque> && !tpipe::byte_payload<std::vector<std::string>>);
struct fixed_bytes {  // a byte payload that cannot be recycled (no payload_traits::recycle)
    std::array<std::byte, 8> b{};
};
} // namespace
template <>
struct tpipe::payload_traits<fixed_bytes> {
    struct header {};
    static header header_of(const fixed_bytes&) { return {}; }
    static fixed_bytes make(const header&) { return {}; }
    static std::span<const std::byte> bytes(const fixed_bytes& v) { return v.b; }
    static std::span<std::byte> bytes(fixed_bytes& v) { return v.b; }
};
namespace {
static_assert(tpipe::byte_payload<fixed_bytes> && !tpipe::recyclable_payload<fixed_bytes>);
static_assert(tpipe::recyclable_payload<std::vector<float>> && tpipe::enable_recyclable_payload<std::vector<float>>);
// Recycling is declared, not probed: a recycle() without the declaration is not the capability
// (and a transport refuses such traits with a sentence: tests/diagnostics/recycle_undeclared.cpp).
struct undeclared_recycle {
    std::array<std::byte, 8> b{};
};
struct declared_no_recycle {
    std::array<std::byte, 8> b{};
};
} // namespace
template <>
struct tpipe::payload_traits<undeclared_recycle> {
    struct header {};
    static header header_of(const undeclared_recycle&) { return {}; }
    static undeclared_recycle make(const header&) { return {}; }
    static std::span<const std::byte> bytes(const undeclared_recycle& v) { return v.b; }
    static std::span<std::byte> bytes(undeclared_recycle& v) { return v.b; }
    static void recycle(undeclared_recycle&&) {}
};
template <>
struct tpipe::payload_traits<declared_no_recycle> {
    static constexpr bool tpipe_recyclable_payload = true;
    struct header {};
    static header header_of(const declared_no_recycle&) { return {}; }
    static declared_no_recycle make(const header&) { return {}; }
    static std::span<const std::byte> bytes(const declared_no_recycle& v) { return v.b; }
    static std::span<std::byte> bytes(declared_no_recycle& v) { return v.b; }
    static void recycle(declared_no_recycle&) {}  // takes an lvalue: not recycle(T&&)
};
namespace {
static_assert(tpipe::byte_payload<undeclared_recycle> && !tpipe::recyclable_payload<undeclared_recycle> &&
              tpipe::detail::names_recycle<undeclared_recycle>);
static_assert(tpipe::enable_recyclable_payload<declared_no_recycle> && !tpipe::recyclable_payload<declared_no_recycle>);
static_assert(tpipe::detail::check_recyclable_payload<fixed_bytes>() &&
              tpipe::detail::check_recyclable_payload<std::vector<float>>());

// The header part every payload trait shares (host and device), both ways.
struct header_of_wrong_type {
    struct header {
        int n;
    };
    static int header_of(const fixed_bytes&) { return 0; }
};
struct header_not_trivially_copyable {
    struct header {
        std::string shape;
    };
    static header header_of(const fixed_bytes&) { return {}; }
};
static_assert(tpipe::payload_header_traits<tpipe::payload_traits<fixed_bytes>, fixed_bytes>);
static_assert(tpipe::payload_header_traits<tpipe::payload_traits<std::vector<float>>, std::vector<float>>);
static_assert(!tpipe::payload_header_traits<header_of_wrong_type, fixed_bytes>);
static_assert(!tpipe::payload_header_traits<header_not_trivially_copyable, fixed_bytes>);
static_assert(tpipe::recyclable_payload<std::vector<float>> && !tpipe::recyclable_payload<opaque>);

// ---- engines ----------------------------------------------------------------------------------
//! An engine whose computes run inline (cpu_engine's shape) with optional members added by Base.
template <class Base>
struct fake_engine : Base {
    tpipe::loop_thread lt;
    int devices() const { return 2; }
    tpipe::loop& loop_of(int) { return lt.get(); }
    template <class F>
    tpipe::cpu_engine::inline_compute<F> compute(int, F&& fn)
    {
        return {std::forward<F>(fn)};
    }
};
struct plain {};
struct with_cancel {  // declares and has reset(stop_token) / waiting_for; keeps every token it got
    static constexpr bool tpipe_cancellable_engine = true;
    static constexpr bool tpipe_reporting_engine = true;
    std::vector<std::stop_token> tokens;  // (reset runs on the thread in run())
    void reset(std::stop_token t) { tokens.push_back(std::move(t)); }
    std::string waiting_for(int d) const { return "device " + std::to_string(d) + " waits for the fake GPU"; }
};
struct undeclared_cancel {  // has the members, declares nothing: the defaults apply
    int resets = 0;
    void reset(std::stop_token) { ++resets; }
    std::string waiting_for(int) const { return "never asked"; }
};
struct old_cancel {  // declares, but has the members of the seam before the stop token
    static constexpr bool tpipe_cancellable_engine = true;
    void cancel() noexcept {}
    void reset_cancel() noexcept {}
};
struct int_report {  // declares, but waiting_for returns a number
    static constexpr bool tpipe_reporting_engine = true;
    int waiting_for(int) const { return 0; }
};
struct no_compute {
    tpipe::loop_thread lt;
    int devices() const { return 1; }
    tpipe::loop& loop_of(int) { return lt.get(); }
};
using plain_engine = fake_engine<plain>;
using gpu_like_engine = fake_engine<with_cancel>;
using silent_engine = fake_engine<undeclared_cancel>;
static_assert(tpipe::engine<tpipe::cpu_engine> && tpipe::engine<plain_engine> && !tpipe::engine<no_compute>);
static_assert(!tpipe::cancellable_engine<tpipe::cpu_engine> && !tpipe::reporting_engine<tpipe::cpu_engine>);
static_assert(tpipe::cancellable_engine<gpu_like_engine> && tpipe::reporting_engine<gpu_like_engine>);
static_assert(!tpipe::cancellable_engine<silent_engine> && !tpipe::reporting_engine<silent_engine>);  // not declared
static_assert(tpipe::enable_cancellable_engine<fake_engine<old_cancel>> &&
              !tpipe::cancellable_engine<fake_engine<old_cancel>>);
static_assert(tpipe::enable_reporting_engine<fake_engine<int_report>> && !tpipe::reporting_engine<fake_engine<int_report>>);
static_assert(!tpipe::cancellable_engine<with_cancel>);  // the members without an engine

// ---- transports -------------------------------------------------------------------------------
//! Rank 0 here, every other rank in another process; carries byte payloads only (a constrained
//! channel_type, as MPI's), each over a local channel (nothing arrives: construction only).
struct half_transport {
    template <tpipe::byte_payload T>
    using channel_type = tpipe::local_channel<T>;
    int connects = 0;
    std::string agreed;
    template <tpipe::byte_payload T>
    std::unique_ptr<tpipe::local_channel<T>> connect(const tpipe::endpoint& e)
    {
        ++connects;
        return std::make_unique<tpipe::local_channel<T>>(e.tags);
    }
    bool runs(int rank) const { return rank == 0; }
    void agree(const std::string& text) { agreed = text; }
    void fail(const std::string&) {}
    std::optional<std::string> failure() { return std::nullopt; }
    std::string where(int rank) const { return rank == 0 ? "" : "elsewhere"; }
};
struct no_failure : tpipe::local_transport {  // failure() of the wrong type
    int failure() const { return 0; }
};
static_assert(tpipe::transport<tpipe::local_transport> && tpipe::transport<half_transport>);
static_assert(!tpipe::transport<no_failure> && !tpipe::transport<plain_engine>);
static_assert(tpipe::transport_for<half_transport, std::vector<float>> && !tpipe::transport_for<half_transport, opaque>);
static_assert(!tpipe::transport_for<tpipe::local_transport, int>);
//! Every link transport is the runner's one transport type, composed ones included; it carries
//! the types with a byte or a device form.
static_assert(tpipe::transport_for<tpipe::composed_transport, std::vector<float>> && !tpipe::transport_for<tpipe::composed_transport, opaque>);
static_assert(std::is_same_v<tpipe::composed_transport::channel_type<std::vector<float>>, tpipe::linked_channel<std::vector<float>>>);

// ---- communicators ----------------------------------------------------------------------------
//! thread_communicator with an averaging all-reduce that counts its calls.
struct averaging_comm : tpipe::thread_communicator {
    static constexpr bool tpipe_averaging_communicator = true;
    std::shared_ptr<std::atomic<int>> averages = std::make_shared<std::atomic<int>>(0);
    explicit averaging_comm(tpipe::thread_communicator c) : tpipe::thread_communicator(std::move(c)) {}
    averaging_comm split(int color, int key) { return averaging_comm(tpipe::thread_communicator::split(color, key)); }
    template <class T>
    std::suspend_never all_reduce_average(std::span<T> v)
    {
        ++*averages;
        for (T& x : v) x = T(-1);  // not the host's sum-and-scale: visible in the result
        return {};
    }
};
struct float_only_average : tpipe::thread_communicator {  // declares, but no double overload
    static constexpr bool tpipe_averaging_communicator = true;
    std::suspend_never all_reduce_average(std::span<float>) { return {}; }
};
static_assert(tpipe::communicator<tpipe::thread_communicator> && tpipe::communicator<averaging_comm>);
static_assert(!tpipe::communicator<plain_engine> && !tpipe::communicator<tpipe::thread_group>);
static_assert(tpipe::averaging_communicator<averaging_comm> && !tpipe::averaging_communicator<tpipe::thread_communicator>);
static_assert(!tpipe::averaging_communicator<float_only_average>);  // and data_parallel<float_only_average> does not compile
static_assert(tpipe::reduce_scatter_communicator<tpipe::thread_communicator>);
struct no_gather : tpipe::thread_communicator {  // a communicator that reduce-scatters but cannot gather back
    explicit no_gather(tpipe::thread_communicator c) : tpipe::thread_communicator(std::move(c)) {}
    no_gather split(int color, int key) { return no_gather(tpipe::thread_communicator::split(color, key)); }
    template <class T>
    void all_gather(std::span<T>) = delete;
};
static_assert(tpipe::communicator<no_gather> && !tpipe::reduce_scatter_communicator<no_gather>);
// The element types every communicator reduces: one list (threads, MPI and NCCL map it to their tags).
static_assert(tpipe::reducible<float> && tpipe::reducible<double> && tpipe::reducible<std::int32_t> &&
              tpipe::reducible<std::int64_t>);
static_assert(!tpipe::reducible<std::uint64_t> && !tpipe::reducible<std::int16_t> && !tpipe::reducible<const float> &&
              !tpipe::reducible<std::byte>);

// ---- planning, simulation, slicing, schedules, elastic ---------------------------------------
struct seconds_model {
    double seconds(std::int64_t, std::int64_t, std::int64_t) const { return 1; }
};
struct monotone_model : seconds_model {
    bool monotone_in_tokens() const { return true; }
};
struct mutable_seconds {  // seconds() is not const
    double seconds(std::int64_t, std::int64_t, std::int64_t) { return 1; }
};
static_assert(tpipe::latency_model<seconds_model> && !tpipe::latency_model<mutable_seconds>);
static_assert(tpipe::latency_model<tpipe::any_latency> && tpipe::latency_model<tpipe::analytic_latency>);
static_assert(tpipe::latency_model<tpipe::table_latency> && tpipe::latency_model<tpipe::polynomial_latency>);
static_assert(tpipe::token_monotone_latency_model<monotone_model> && !tpipe::token_monotone_latency_model<seconds_model>);
using seconds_fn = decltype([](std::int64_t, std::int64_t, std::int64_t) { return 1.0; });
using text_fn = decltype([](std::int64_t, std::int64_t, std::int64_t) { return std::string(); });
static_assert(tpipe::latency_function<seconds_fn> && !tpipe::latency_function<text_fn>);
static_assert(tpipe::latency_model<tpipe::function_latency<seconds_fn>>);
static_assert(tpipe::unit_workload<seconds_fn> && !tpipe::unit_workload<int>);

struct op_costs {
    double compute(tpipe::op, int, const unit&) const { return 1; }
    double transfer(tpipe::op, int, int, const unit&) const { return 0; }
};
struct compute_only_costs {
    double compute(tpipe::op, int, const unit&) const { return 1; }
};
static_assert(tpipe::cost_model<op_costs> && !tpipe::cost_model<compute_only_costs>);
static_assert(tpipe::cost_model<tpipe::uniform_costs> && tpipe::cost_model<tpipe::latency_costs<tpipe::analytic_latency>>);
static_assert(tpipe::cost_model<tpipe::link_priced_costs>);

struct named_schedule {
    tpipe::program program(const tpipe::topology&, const tpipe::scheme&) const { return {}; }
    std::string name() const { return "named"; }
};
struct nameless_schedule {
    tpipe::program program(const tpipe::topology&, const tpipe::scheme&) const { return {}; }
};
static_assert(tpipe::schedule<named_schedule> && !tpipe::schedule<nameless_schedule>);
static_assert(tpipe::schedule<tpipe::gpipe> && tpipe::schedule<tpipe::one_f_one_b> && tpipe::schedule<tpipe::zb_h1>);
static_assert(tpipe::schedule<tpipe::interleaved_1f1b> && tpipe::schedule<tpipe::interleaved_zb>);
static_assert(tpipe::schedule<tpipe::looped_bfs> && tpipe::schedule<tpipe::terapipe_1f1b>);
static_assert(tpipe::schedule<tpipe::zb_v> && tpipe::schedule<tpipe::dualpipe_v> && tpipe::schedule<tpipe::any_schedule>);

struct vector_slicer {  // returns cuts, not a scheme
    std::vector<int> scheme(tpipe::batch_shape) const { return {}; }
};
static_assert(tpipe::slicer<tpipe::microbatch_slicer> && tpipe::slicer<tpipe::token_slicer>);
static_assert(tpipe::slicer<tpipe::grid_slicer> && tpipe::slicer<tpipe::uniform_grid_slicer>);
static_assert(!tpipe::slicer<vector_slicer>);

struct frozen_layers {
    int next_frozen(const tpipe::elastic::freeze_observation&) { return 0; }
};
struct frozen_text {
    std::string next_frozen(const tpipe::elastic::freeze_observation&) { return {}; }
};
static_assert(tpipe::elastic::freeze_policy<frozen_layers> && !tpipe::elastic::freeze_policy<frozen_text>);
static_assert(tpipe::elastic::freeze_policy<tpipe::elastic::progressive_freeze> &&
              tpipe::elastic::freeze_policy<tpipe::elastic::paper_freeze>);
struct stage_time_model {
    tpipe::elastic::stage_times stage_times(std::span<const int>, int) const { return {}; }
};
static_assert(tpipe::elastic::pipeline_latency<stage_time_model> &&
              tpipe::elastic::pipeline_latency<tpipe::elastic::elastic_latency>);
static_assert(!tpipe::elastic::pipeline_latency<seconds_model>);
struct backend {  // what run_intervals drives (elastic/driver_loop.hpp)
    bool reshape(const tpipe::elastic::interval_shape&) { return true; }
    double step(std::int64_t) { return 0; }
    bool replicas_identical() { return true; }
    tpipe::elastic::frozen_counters frozen_rows() { return {}; }
    tpipe::elastic::cache_stats cache_stats() const { return {}; }
};
struct backend_without_cache_stats {
    bool reshape(const tpipe::elastic::interval_shape&) { return true; }
    double step(std::int64_t) { return 0; }
    bool replicas_identical() { return true; }
    tpipe::elastic::frozen_counters frozen_rows() { return {}; }
};
static_assert(tpipe::elastic::elastic_backend<backend> && !tpipe::elastic::elastic_backend<backend_without_cache_stats>);
static_assert(tpipe::elastic::elastic_backend<tpipe::elastic::thread_driver<tpipe_test::chain>>);

// ---- state --------------------------------------------------------------------------------------
using update_fn = decltype([](std::span<float>, std::span<float>, std::size_t) {});
using update_doubles_fn = decltype([](std::span<double>, std::span<double>, std::size_t) {});
static_assert(tpipe::shard_update<update_fn, float> && !tpipe::shard_update<update_doubles_fn, float>);
static_assert(!tpipe::shard_update<int, float>);
static_assert(tpipe::state::stored_element<float> && tpipe::state::stored_element<double> && tpipe::state::stored_element<std::int64_t> &&
              tpipe::state::stored_element<std::uint64_t> && tpipe::state::stored_element<std::uint8_t>);
static_assert(!tpipe::state::stored_element<std::int32_t> && !tpipe::state::stored_element<char> && !tpipe::state::stored_element<long double>);

// ---- stages for the run-time checks -----------------------------------------------------------
struct vec_stage {
    using input = std::vector<float>;
    using output = std::vector<float>;
    std::vector<float> forward(const unit&, std::vector<float> x) { return x; }
    std::vector<float> backward(const unit&, std::vector<float> g) { return g; }
};
struct to_opaque {
    using input = std::vector<float>;
    using output = opaque;
    opaque forward(const unit&, std::vector<float> x) { return {static_cast<int>(x.size())}; }
    std::vector<float> backward(const unit&, opaque g) { return std::vector<float>(static_cast<std::size_t>(g.v)); }
};
struct opaque_stage {
    using input = opaque;
    using output = opaque;
    opaque forward(const unit&, opaque x) { return x; }
    opaque backward(const unit&, opaque g) { return g; }
};
struct int_stage {
    using input = int;
    using output = int;
    int forward(const unit&, int x) { return x + 1; }
    int backward(const unit&, int g) { return g + 1; }
};

//! An all-reduce and a barrier of one member, as tasks sync_wait runs.
tpipe::task<void> sum_of(tpipe::thread_communicator& c, std::vector<float>& x) { co_await c.all_reduce_sum(std::span<float>(x)); }
tpipe::task<void> barrier_of(tpipe::thread_communicator& c) { co_await c.barrier(); }

tpipe::program two_rank_program() { return tpipe::make_schedule("gpipe").program(tpipe::topology{2}, tpipe::microbatches(2)); }

} // namespace

TEST_CASE("optional engine capabilities: declared ones are used, undeclared members are not, defaults otherwise",
          "[concepts][engine]")
{
    std::stop_source stop;
    gpu_like_engine gpu;
    tpipe::reset_computes(gpu, stop.get_token());
    REQUIRE(gpu.tokens.size() == 1);
    CHECK(gpu.tokens[0] == stop.get_token());
    CHECK(tpipe::engine_waits(gpu, 1) == "device 1 waits for the fake GPU");

    silent_engine silent;  // has reset(stop_token) but did not declare it: the default (nothing) applies
    tpipe::reset_computes(silent, stop.get_token());
    CHECK(silent.resets == 0);
    CHECK(tpipe::engine_waits(silent, 0).empty());

    tpipe::cpu_engine cpu(1);
    tpipe::reset_computes(cpu, stop.get_token());
    CHECK(tpipe::engine_waits(cpu, 0).empty());
}

TEST_CASE("the runner hands a cancellable engine each iteration's stop token, stopped when the iteration fails, and "
          "no token after it",
          "[concepts][engine]")
{
    auto pipe = tpipe::pipeline(int_stage{}, int_stage{});
    gpu_like_engine eng;
    tpipe::run_io<int, int> io;
    io.source = [](const unit& u) { return u.microbatch; };
    tpipe::runner r(pipe, two_rank_program(), eng);
    r.run(io);
    REQUIRE(eng.tokens.size() == 2);
    CHECK(eng.tokens[0].stop_possible());
    CHECK_FALSE(eng.tokens[0].stop_requested());
    CHECK_FALSE(eng.tokens[1].stop_possible());  // after the iteration: a token that never stops
    io.source = [](const unit&) -> int { throw std::runtime_error("source broke"); };
    CHECK_THROWS_AS(r.run(io), tpipe::execution_error);
    REQUIRE(eng.tokens.size() == 4);
    CHECK(eng.tokens[2].stop_requested());
    CHECK(eng.tokens[2] != eng.tokens[0]);  // one stop source per iteration
    CHECK_FALSE(eng.tokens[0].stop_requested());
    CHECK_FALSE(eng.tokens[3].stop_possible());
}

//! Whether a barrier of `a` (on this thread) and `b` (on another) completes on both.
bool barrier_completes(tpipe::thread_communicator& a, tpipe::thread_communicator& b)
{
    std::atomic<int> failed{0};
    std::thread t([&] {
        try {
            tpipe::sync_wait(barrier_of(b));
        } catch (...) {
            ++failed;
        }
    });
    try {
        tpipe::sync_wait(barrier_of(a));
    } catch (...) {
        ++failed;
    }
    t.join();
    return failed == 0;
}

TEST_CASE("a thread_communicator member whose iteration is stopped cancels its group; cancel() only itself",
          "[concepts][comm]")
{
    std::vector<float> x(1, 1.0f);
    SECTION("the stop token of a member's iteration reaches every member, also through a moved handle")
    {
        tpipe::thread_group g(2);
        auto a = g.member(0), b = g.member(1);
        std::stop_source stop;
        a.reset(stop.get_token());
        b.reset();
        tpipe::thread_communicator moved = std::move(a);
        stop.request_stop();
        CHECK_THROWS_AS(tpipe::sync_wait(sum_of(b, x)), tpipe::operation_cancelled);
        moved.reset();
        b.reset();
        CHECK(barrier_completes(moved, b));  // the next iteration is not cancelled
    }
    SECTION("the last iteration's token no longer cancels")
    {
        tpipe::thread_group g(2);
        auto a = g.member(0), b = g.member(1);
        std::stop_source last, now;
        a.reset(last.get_token());
        a.reset(now.get_token());
        b.reset();
        last.request_stop();
        CHECK(barrier_completes(a, b));
    }
    SECTION("cancel() cancels the caller only")
    {
        tpipe::thread_group h(2);
        averaging_comm c(h.member(0)), d(h.member(1));
        c.cancel();
        CHECK_THROWS_AS(tpipe::sync_wait(sum_of(c, x)), tpipe::operation_cancelled);
        c.reset();
        CHECK(barrier_completes(c, d));  // d was never cancelled
    }
}

TEST_CASE("data_parallel averages through a declared averaging communicator, on the host otherwise", "[concepts][comm]")
{
    struct grad_stage : int_stage {
        std::vector<float> g = std::vector<float>(3, 2.0f);
        std::span<float> gradients() { return g; }
    };
    for (bool declared : {true, false}) {
        CAPTURE(declared);
        tpipe::thread_group pair(2);
        std::vector<std::vector<float>> out(2);
        std::vector<std::thread> ts;
        std::atomic<int> averages{0};
        for (int m = 0; m < 2; ++m)
            ts.emplace_back([&, m] {
                auto p = tpipe::pipeline(grad_stage{});
                if (declared) {
                    averaging_comm c(pair.member(m));
                    tpipe::data_parallel<averaging_comm> dp(p, {&c}, {.average = true});
                    tpipe::sync_wait(dp.reduce(0));
                    averages += *c.averages;
                } else {
                    auto c = pair.member(m);
                    tpipe::data_parallel<tpipe::thread_communicator> dp(p, {&c}, {.average = true});
                    tpipe::sync_wait(dp.reduce(0));
                }
                p.visit_stages([&](std::size_t, grad_stage& s) { out[static_cast<std::size_t>(m)] = s.g; });
            });
        for (auto& t : ts) t.join();
        const float expect = declared ? -1.0f : 2.0f;  // the fake's mark, or (2 + 2) / 2 on the host
        for (const auto& v : out) CHECK(v == std::vector<float>(3, expect));
        CHECK(averages == (declared ? 2 : 0));
    }
}

TEST_CASE("the last stage needs no channel: its output need not be a type the transport carries", "[concepts][transport]")
{
    auto pipe = tpipe::pipeline(vec_stage{}, to_opaque{});
    tpipe::cpu_engine eng(2);
    half_transport x;
    tpipe::runner r(pipe, two_rank_program(), eng, x);
    CHECK(x.connects == 2);  // boundary 0, both directions; none for the last stage
    CHECK(r.local_ranks() == std::vector<int>{0});
}

TEST_CASE("a boundary that needs a channel of a type the transport does not carry is refused with a sentence",
          "[concepts][transport]")
{
    auto pipe = tpipe::pipeline(to_opaque{}, opaque_stage{});
    tpipe::cpu_engine eng(2);
    half_transport x;
    CHECK_THROWS_WITH((tpipe::runner(pipe, two_rank_program(), eng, x)),
                      Catch::Contains("the output of stage 0 (class of 4 bytes (alignment 4)) crosses a boundary between "
                                      "ranks 0 and 1, which run in different processes, but the transport has no channel "
                                      "for that type"));
}

TEST_CASE("a link transport joins two ranks of this process by its link, for the types it can carry",
          "[concepts][transport]")
{
    auto pipe = tpipe::pipeline(vec_stage{}, vec_stage{});
    tpipe::cpu_engine eng(2);
    tpipe_test::copying_transport x;
    tpipe::runner r(pipe, two_rank_program(), eng, x);
    static_assert(std::is_same_v<decltype(r), tpipe::runner<decltype(pipe), tpipe::cpu_engine>>);
    CHECK(x.opened == 2);  // boundary 0, both directions
    tpipe::run_io<std::vector<float>, std::vector<float>> io;
    io.source = [](const unit& u) { return std::vector<float>(3, static_cast<float>(u.microbatch)); };
    std::vector<std::vector<float>> out(2), dx(2);
    io.output_grad = [&](const unit& u, std::vector<float> y) {
        out[static_cast<std::size_t>(u.microbatch)] = y;
        return std::vector<float>(2, 1.0f + static_cast<float>(u.microbatch));
    };
    io.input_grad = [&](const unit& u, std::vector<float> g) { dx[static_cast<std::size_t>(u.microbatch)] = std::move(g); };
    r.run(io);
    r.run(io);
    CHECK(out == std::vector<std::vector<float>>{std::vector<float>(3, 0.0f), std::vector<float>(3, 1.0f)});
    CHECK(dx == std::vector<std::vector<float>>{std::vector<float>(2, 1.0f), std::vector<float>(2, 2.0f)});
    CHECK(x.copies == 2 * 2 * 2);  // 2 units, both directions, 2 iterations

    auto opaque_pipe = tpipe::pipeline(to_opaque{}, opaque_stage{});  // opaque has no byte form
    CHECK_THROWS_WITH((tpipe::runner(opaque_pipe, two_rank_program(), eng, x)),
                      Catch::Contains("crosses a boundary between ranks 0 and 1 of this process, which the transport joins by "
                                      "a link, but the transport has no channel for that type"));
}

TEST_CASE("the fingerprint names payload types alike on every compiler", "[concepts][transport]")
{
    auto pipe = tpipe::pipeline(vec_stage{}, to_opaque{});
    tpipe::cpu_engine eng(2);
    half_transport x;
    tpipe::runner r(pipe, two_rank_program(), eng, x);
    CHECK_THAT(x.agreed, Catch::EndsWith("payload types=vector<float32>;class of 4 bytes (alignment 4);\n"));
    CHECK(tpipe::detail::portable_type_name<std::int64_t>() == "int64");
    CHECK(tpipe::detail::portable_type_name<const std::vector<unsigned char>>() == "vector<uint8>");
    CHECK(tpipe::detail::portable_type_name<double>() == "float64");
    CHECK(tpipe::detail::portable_type_name<bool>() == "bool");
}
