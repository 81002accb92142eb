#pragma once
// tpipe::nccl::basic_transport<Api, Control, Pool>: a tpipe::link_transport whose boundaries
// between processes move device payloads over NCCL links (tpipe/nccl/link.hpp), so its runner is
// the runner of threads and MPI, tpipe::runner<Pipe, E>. tpipe::nccl::transport
// (tpipe/nccl/transport.hpp) is it over the real NCCL with tpipe::mpi::transport as the control.
//
//   tpipe::mpi::environment env(argc, argv);
//   auto l = tpipe::layout::one_rank_per_process(P);             // one GPU per process
//   tpipe::mpi::transport control(l, 0);                        // placement, agree/fail/failure
//   auto id = tpipe::nccl::exchange_through_mpi(MPI_COMM_WORLD, make_id);
//   tpipe::nccl::transport x(control, pool, id);                 // collective: NCCL init
//   tpipe::runner r(pipe, prog, engine, x);                      // tpipe::runner<Pipe, E>
//
// The control plane is composed, not copied: which ranks run here, where(), agree(), fail(),
// stalled() and failure() are Control's (MPI's), since NCCL has no way to send a failure notice
// that does not block. failure() also reports an asynchronous NCCL error of the transport's communicators.
//
// Ordering (see detail/receive_lane.hpp and detail/transport_core.hpp): messages towards higher
// processes on one communicator, towards lower ones on another, each with a transfer stream of
// its own; a receive is posted only while a receiver waits, envelope then body, in the sender's
// order. Meant for one pipeline rank per process (one GPU each, as NCCL needs): ranks of one
// process share the communicators, and a receive one of them waits in holds back the sends of the
// others on the same communicator. Boundaries inside a process are not NCCL's: the runner gives
// them a local channel, or, with tpipe::composed_transport of this and a cuda::peer_transport
// (tpipe/transport/composed_transport.hpp), peer copies between the process's GPUs; then only the
// ranks at a process's edges use NCCL.
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/exec/layout.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/bounded_setup.hpp"
#include "tpipe/nccl/detail/transport_core.hpp"
#include "tpipe/nccl/link.hpp"
#include "tpipe/nccl/nccl_error.hpp"
#include "tpipe/transport/link_transport.hpp"

namespace tpipe::nccl {

//! What basic_transport needs from its control plane (tpipe::mpi::transport is one). A control
//! plane that also bounds_setup (tpipe/nccl/bounded_setup.hpp) bounds the transport's
//! blocking NCCL set-up calls.
template <class C>
concept transport_control = requires(C& c, const C& cc, int rank, const std::string& text) {
    { cc.runs(rank) } -> std::convertible_to<bool>;
    { cc.where(rank) } -> std::convertible_to<std::string>;
    { cc.process() } -> std::convertible_to<int>;
    { cc.replica() } -> std::convertible_to<int>;
    { cc.tensor_rank() } -> std::convertible_to<int>;
    { cc.layout() } -> std::convertible_to<const tpipe::layout&>;
    c.agree(text);
    c.fail(text);
    { c.failure() } -> std::same_as<std::optional<std::string>>;
};

//! Carries payloads with a device form whose traits name `Pool` (tpipe::device_payload_traits);
//! a channel of another type is refused when the runner makes it, naming what to specialise.
template <api Api, transport_control Control, cuda::payload_pool Pool>
class basic_transport final : public link_transport {
public:
    using comm_t = typename Api::comm_t;

    //! Takes ownership of `world`, an NCCL communicator whose rank i is process i of `control`'s
    //! layout, and makes its second one (ncclCommSplit: collective over every process, like
    //! this constructor) and a transfer stream for each. Receivers' payloads come from `pool`.
    basic_transport(Api api, comm_t world, Control& control, Pool& pool) : control_(control), pool_(pool)
    {
        core_.api = std::move(api);
        core_.up.comm = world;
        core_.me = control.process();
        core_.processes = control.layout().processes();
        Api& a = core_.api;
        const int rank = a.rank_of(world), size = a.size_of(world);
        if (rank != core_.me || size != core_.processes) {
            a.destroy(world);
            throw invalid_argument("nccl::transport: the NCCL communicator has this process as rank " + std::to_string(rank) + " of " +
                                   std::to_string(size) + ", but the layout makes it process " + std::to_string(core_.me) + " of " +
                                   std::to_string(core_.processes) + "; initialise it with rank = process index and size = processes");
        }
        const auto [rc, down] = detail::bounded_call(a, control, "tpipe::nccl::transport: ncclCommSplit (the second communicator)",
                                                     [world, rank](Api& on) {
                                                         comm_t out{};
                                                         const int r = on.split(world, 0, rank, out);
                                                         return std::pair{r, out};
                                                     });
        core_.down.comm = down;
        if (rc != 0) {
            a.destroy(world);
            throw nccl_error("nccl::transport: ncclCommSplit (the second communicator) failed: " + std::string(a.describe(rc, world)), rc);
        }
        core_.up.stream = a.stream_create();
        core_.down.stream = a.stream_create();
    }
    //! Initialises the NCCL communicator itself (ncclCommInitRank with `id`, on the current GPU).
    basic_transport(Api api, const unique_id& id, Control& control, Pool& pool)
        : basic_transport(api, init(api, id, control), control, pool)
    {
    }
    basic_transport(const basic_transport&) = delete;
    basic_transport& operator=(const basic_transport&) = delete;
    ~basic_transport() override
    {
        std::lock_guard<std::mutex> g(core_.m);
        bool busy = core_.poisoned;
        for (auto& [key, lane] : core_.lanes) busy |= lane->busy();
        if (busy) core_.abort();  // an NCCL receive left posted never completes
        core_.quiesce();          // the lanes' buffers go next
        if (!core_.aborted) {
            core_.api.destroy(core_.down.comm);
            core_.api.destroy(core_.up.comm);
        }
        core_.lanes.clear();
        core_.api.stream_destroy(core_.up.stream);
        core_.api.stream_destroy(core_.down.stream);
    }

    bool runs(int rank) const override { return control_.runs(rank); }
    std::string where(int rank) const override { return control_.where(rank); }
    const tpipe::layout& layout() const { return control_.layout(); }

    void agree(const std::string& text) override { control_.agree(text); }
    void fail(const std::string& message) override { control_.fail(message); }
    //! The runner's watchdog fired: the control plane hears it (tpipe::mpi::transport reports it
    //! and has the environment end the job, since another process may be stopped).
    void stalled(const std::string& report) noexcept override
    {
        if constexpr (requires { control_.stalled(report); }) {
            try {
                control_.stalled(report);
            } catch (...) {  // a report that cannot be written must not end the one that fired
            }
        }
    }

    //! A failure notice from another process, or an asynchronous NCCL error here.
    std::optional<std::string> failure() override
    {
        if (auto f = control_.failure()) return f;
        std::unique_lock<std::mutex> g(core_.m, std::try_to_lock);
        if (!g.owns_lock()) return std::nullopt;
        core_.check_health();
        if (!core_.failure) return std::nullopt;
        try {
            std::rethrow_exception(core_.failure);
        } catch (const std::exception& ex) {
            return std::string(ex.what());
        }
    }

    //! Launches issued on the transport's communicators (for tests): the up and down comms.
    comm_t up_comm() const noexcept { return core_.up.comm; }
    comm_t down_comm() const noexcept { return core_.down.comm; }

protected:
    std::unique_ptr<tpipe::link> open(const endpoint& e) override
    {
        const tpipe::layout& l = control_.layout();
        const int peer = l.process_of(control_.replica(), e.sending ? e.to_rank : e.from_rank, control_.tensor_rank());
        const int key = 2 * e.boundary + (e.forward ? 0 : 1);
        std::lock_guard<std::mutex> g(core_.m);
        return std::make_unique<basic_link<Api>>(core_, device_pool_ref(pool_), peer, key, e.sending);
    }

private:
    static comm_t init(Api& api, const unique_id& id, Control& control)
    {
        const int n = control.layout().processes(), me = control.process();
        const auto [rc, c] = detail::bounded_init_rank(api, control, "tpipe::nccl::transport: ncclCommInitRank", n, id, me);
        if (rc != 0)
            throw nccl_error("nccl::transport: ncclCommInitRank (process " + std::to_string(me) + " of " + std::to_string(n) +
                                 ") failed: " + std::string(api.describe(rc, c)),
                             rc);
        return c;
    }

    Control& control_;
    Pool& pool_;
    detail::transport_core<Api> core_;
};

} // namespace tpipe::nccl
