#pragma once
// tpipe::nccl::fake: an in-process NCCL over threads, for the CPU tests of tpipe's NCCL code.
// Its kernels run on the streams of the CUDA engine's test double (tests/cuda/fake_driver.hpp),
// which the world owns with its device thread: the api's streams, markers, buffers and copies are
// tpipe::nccl::device_calls over that double, as the real api's are over the CUDA runtime. It
// models what NCCL guarantees and what it requires, so that code that passes here issues a valid
// NCCL program:
// - A launch is one NCCL call, or every call of one group (calls between group_start and
//   group_end are issued at group_end, together), one per (communicator, stream). It starts when
//   its stream reaches it and every earlier launch of its communicator has completed (NCCL
//   serialises a communicator's kernels, even across streams), and the stream waits for it.
// - Point-to-point: the k-th send from a to b matches the k-th receive on b from a (posting
//   order, no tags); they move data only once both launches run. Different sizes are the
//   mismatch real NCCL would hang on (or corrupt): both communicators get an asynchronous
//   error naming both sides.
// - Collectives: the k-th collective of every member meets the others' k-th, with the same
//   kind, count, type and root, or all members get an error naming both calls. all_reduce
//   sums in reverse rank order ((x[n-1] + x[n-2]) + ...) + x[0], the same bits on every member
//   but, like NCCL's rings and trees, not the rank-order fold.
// - A launch that its stream reached but that cannot complete while nothing moves for
//   stall_timeout is a deadlock: its communicator gets an asynchronous error listing every
//   blocked launch.
// - abort() drops a communicator's pending launches (their streams go on); calls on an aborted
//   communicator fail.
// "Device" memory is host memory. The world's state is behind one mutex, taken before the
// driver's (the driver polls a launch without its own).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../cuda/fake_driver.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/device_calls.hpp"

namespace tpipe::nccl::fake {

enum result : int { success = 0, internal_error = 3, invalid_argument = 4, invalid_usage = 5, remote_error = 6 };

struct comm_obj;
struct launch;
class world;
using stream_obj = ::fake::stream_state;

enum class kind { send, recv, all_reduce, broadcast };

struct op {
    kind what = kind::send;
    const void* in = nullptr;
    void* out = nullptr;
    std::size_t count = 0;  //!< elements (bytes for p2p and broadcast)
    dtype type = dtype::bytes;
    int peer = 0;           //!< p2p peer, broadcast root, or for all_reduce 1 = average
    comm_obj* comm = nullptr;
    launch* in_launch = nullptr;
    bool done = false;
    std::size_t seq = 0;    //!< k-th send to / receive from that peer, or k-th collective
};

//! A kernel of the fake NCCL on a stream of the driver double.
struct launch final : ::fake::external_work {
    world* owner = nullptr;
    std::vector<op*> ops;
    stream_obj* stream = nullptr;
    comm_obj* comm = nullptr;
    bool at_front = false;  //!< its stream reached it
    bool started = false;   //!< and its communicator's earlier launches completed: its kernels run
    bool finished = false;

    bool poll() override;  //!< the driver's device asks (below, after world)
};

struct group_obj {  //!< the members of one NCCL communicator
    int size = 0;
    std::vector<comm_obj*> members;
    std::map<std::pair<int, int>, std::pair<std::deque<op*>, std::deque<op*>>> p2p;  //!< (from, to): sends, recvs
    std::deque<std::vector<op*>> collectives;  //!< by sequence number (front = oldest unfinished)
    std::size_t first_collective = 0;
};

struct comm_obj {
    group_obj* group = nullptr;
    int rank = 0;
    int gpu = 0;  //!< the GPU current on the thread that made it (NCCL binds a communicator to it)
    bool aborted = false, destroyed = false;
    int async_error = 0;
    std::string last_error;
    std::deque<launch*> queue;  //!< launches in issue order
    std::map<int, std::size_t> sends_to, recvs_from;
    std::size_t collectives = 0;
    std::size_t splits = 0;  //!< split rounds this member joined
};

inline std::string ordinal(std::size_t k)
{
    const std::size_t n = k + 1;
    const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th" : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
    return std::to_string(n) + suffix;
}

inline std::string describe_op(const op& o)
{
    const std::string r = "rank " + std::to_string(o.comm->rank);
    switch (o.what) {
    case kind::send:
        return r + " sends " + std::to_string(o.count) + " bytes to rank " + std::to_string(o.peer) + " (its " + ordinal(o.seq) +
               " send to it)";
    case kind::recv:
        return r + " receives " + std::to_string(o.count) + " bytes from rank " + std::to_string(o.peer) + " (its " + ordinal(o.seq) +
               " receive from it)";
    case kind::all_reduce:
        return r + (o.peer == 1 ? " averages " : " all-reduces ") + std::to_string(o.count) + " " + dtype_name(o.type) + " (its " + ordinal(o.seq) + " collective)";
    case kind::broadcast:
        return r + " broadcasts " + std::to_string(o.count) + " bytes from root " + std::to_string(o.peer) + " (its " + ordinal(o.seq) +
               " collective)";
    }
    return {};
}

class world {
public:
    std::chrono::milliseconds stall_timeout{1500};

    //! A fake NCCL on a driver double of `gpus` GPUs, whose device thread runs from now on.
    explicit world(int gpus = 1) : device_(gpus) { device_.start_device(); }
    world(const world&) = delete;
    ~world()
    {
        device_.stop_device();  // nothing polls a launch from here on
        for (auto* l : launches_) {
            for (op* o : l->ops) delete o;
            delete l;
        }
    }

    //! The driver double the launches run on, and its event pool (the api's markers).
    ::fake::driver& device() noexcept { return device_; }
    tpipe::cuda::basic_event_pool<::fake::driver>& events() noexcept { return events_; }

    // ---- the api's calls (under m_) ---------------------------------------------------------
    int get_unique_id(unique_id& id)
    {
        std::lock_guard<std::mutex> g(m_);
        const std::uint64_t n = ++ids_;
        std::memcpy(id.bytes.data(), &n, sizeof n);
        return success;
    }

    //! Blocks until all `n` members of id called it (as ncclCommInitRank does).
    int init_rank(comm_obj*& out, int n, const unique_id& id, int rank)
    {
        std::unique_lock<std::mutex> g(m_);
        std::uint64_t key = 0;
        std::memcpy(&key, id.bytes.data(), sizeof key);
        pending_init& p = inits_[key];
        if (!p.group) {
            groups_.push_back(std::make_unique<group_obj>());
            p.group = groups_.back().get();
            p.group->size = n;
            p.group->members.assign(static_cast<std::size_t>(n), nullptr);
        }
        if (p.group->size != n || p.group->members[static_cast<std::size_t>(rank)]) return invalid_argument;
        out = new_comm(p.group, rank);
        (void)device_.get_device(&out->gpu);
        ++p.arrived;
        cv_.notify_all();
        cv_.wait(g, [&] { return p.arrived == n; });
        return success;
    }

    //! n communicators of one group at once (ncclCommInitAll).
    std::vector<comm_obj*> init_all(int n)
    {
        std::lock_guard<std::mutex> g(m_);
        groups_.push_back(std::make_unique<group_obj>());
        group_obj* grp = groups_.back().get();
        grp->size = n;
        grp->members.assign(static_cast<std::size_t>(n), nullptr);
        std::vector<comm_obj*> out;
        for (int r = 0; r < n; ++r) out.push_back(new_comm(grp, r));
        return out;
    }

    //! Blocks until every member of c's group called it (ncclCommSplit).
    int split(comm_obj* c, int color, int key, comm_obj*& out)
    {
        std::unique_lock<std::mutex> g(m_);
        if (!usable(c)) return invalid_usage;
        split_round& s = splits_[{c->group, c->splits++}];
        s.entries.push_back({color, key, c->rank});
        cv_.notify_all();
        cv_.wait(g, [&] { return static_cast<int>(s.entries.size()) == c->group->size; });
        if (!s.formed) {
            s.formed = true;
            std::map<int, std::vector<entry>> by_color;
            for (const entry& e : s.entries) by_color[e.color].push_back(e);
            for (auto& [col, es] : by_color) {
                std::sort(es.begin(), es.end(), [](const entry& a, const entry& b) { return std::pair(a.key, a.rank) < std::pair(b.key, b.rank); });
                groups_.push_back(std::make_unique<group_obj>());
                group_obj* grp = groups_.back().get();
                grp->size = static_cast<int>(es.size());
                grp->members.assign(es.size(), nullptr);
                for (std::size_t i = 0; i < es.size(); ++i) s.result[es[i].rank] = new_comm(grp, static_cast<int>(i));
            }
        }
        out = s.result[c->rank];
        (void)device_.get_device(&out->gpu);
        return success;
    }

    //! Starts (or inside a group, defers) one call of this thread.
    int issue(op* o, stream_obj* s)
    {
        std::lock_guard<std::mutex> g(m_);
        if (!usable(o->comm)) {
            delete o;
            return invalid_usage;
        }
        group_state& gs = group_of_thread();
        if (gs.depth > 0) {
            gs.deferred.emplace_back(o, s);
            return success;
        }
        enqueue({{o, s}});
        return success;
    }

    int group_start()
    {
        ++group_of_thread().depth;
        return success;
    }
    int group_end()
    {
        std::lock_guard<std::mutex> g(m_);
        group_state& gs = group_of_thread();
        if (gs.depth == 0) return invalid_usage;
        if (--gs.depth > 0) return success;
        auto ops = std::move(gs.deferred);
        gs.deferred.clear();
        if (!ops.empty()) enqueue(ops);
        return success;
    }

    int async_error(comm_obj* c)
    {
        std::lock_guard<std::mutex> g(m_);
        progress();
        return c->async_error;
    }

    std::string last_error(comm_obj* c)
    {
        std::lock_guard<std::mutex> g(m_);
        return c ? c->last_error : std::string();
    }

    void abort(comm_obj* c) noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        if (!c || c->aborted) return;
        c->aborted = true;
        ++aborts;
        for (launch* l : c->queue) {
            for (op* o : l->ops) o->done = true;  // the kernels are killed; their streams go on
        }
        progress();
    }
    void destroy(comm_obj* c) noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        if (c) c->destroyed = true;
    }

    //! The driver's device asks whether launch l, first on its stream, completed.
    bool poll(launch* l)
    {
        std::lock_guard<std::mutex> g(m_);
        if (!l->at_front) {
            l->at_front = true;
            fronts_.push_back(l);
        }
        if (progress()) last_progress_ = std::chrono::steady_clock::now();
        if (l->finished) return true;
        if (std::chrono::steady_clock::now() - last_progress_ > stall_timeout) report_deadlock();
        return false;
    }

    int aborts = 0;          //!< ncclCommAbort calls (tests check them)
    std::atomic<int> averages{0};  //!< all-reduces with ncclAvg
    int launches_issued = 0;

private:
    struct group_state {
        int depth = 0;
        std::vector<std::pair<op*, stream_obj*>> deferred;
    };
    struct pending_init {
        group_obj* group = nullptr;
        int arrived = 0;
    };
    struct entry {
        int color, key, rank;
    };
    struct split_round {
        std::vector<entry> entries;
        bool formed = false;
        std::map<int, comm_obj*> result;
    };

    group_state& group_of_thread()
    {
        thread_local std::map<const world*, group_state> state;
        return state[this];
    }

    static bool usable(const comm_obj* c) noexcept { return !c->aborted && !c->destroyed; }

    comm_obj* new_comm(group_obj* g, int rank)
    {
        comms_.push_back(std::make_unique<comm_obj>());
        comm_obj* c = comms_.back().get();
        c->group = g;
        c->rank = rank;
        g->members[static_cast<std::size_t>(rank)] = c;
        return c;
    }

    //! One launch per (communicator, stream) among the ops (one call, or a whole group).
    void enqueue(const std::vector<std::pair<op*, stream_obj*>>& ops)
    {
        std::vector<launch*> made;
        for (auto [o, s] : ops) {
            auto it = std::find_if(made.begin(), made.end(), [&](launch* l) { return l->stream == s && l->comm == o->comm; });
            launch* l = it != made.end() ? *it : nullptr;
            if (!l) {
                l = new launch;
                l->owner = this;
                l->stream = s;
                l->comm = o->comm;
                launches_.push_back(l);
                made.push_back(l);
                ++launches_issued;
                o->comm->queue.push_back(l);
            }
            o->in_launch = l;
            l->ops.push_back(o);
            {  // posting order: sequence numbers at issue
                comm_obj* c = o->comm;
                group_obj* g = c->group;
                if (o->what == kind::send) {
                    o->seq = c->sends_to[o->peer]++;
                    g->p2p[{c->rank, o->peer}].first.push_back(o);
                } else if (o->what == kind::recv) {
                    o->seq = c->recvs_from[o->peer]++;
                    g->p2p[{o->peer, c->rank}].second.push_back(o);
                } else {
                    o->seq = c->collectives++;
                    const std::size_t at = o->seq - g->first_collective;
                    while (g->collectives.size() <= at) g->collectives.emplace_back(static_cast<std::size_t>(g->size), nullptr);
                    g->collectives[at][static_cast<std::size_t>(c->rank)] = o;
                }
            }
        }
        for (launch* l : made) device_.enqueue_external(l->stream, *l);  // the device polls it without its lock
        progress();
        last_progress_ = std::chrono::steady_clock::now();
    }

    static bool running(const op* o) noexcept { return o->in_launch->started; }

    void fail(comm_obj* c, const std::string& why, int code = invalid_usage)
    {
        if (c->async_error) return;
        c->async_error = code;
        c->last_error = why;
    }

    //! Runs everything that can run; true if anything changed.
    bool progress()
    {
        bool any = false;
        for (bool changed = true; changed;) {
            changed = false;
            for (launch* l : fronts_) {
                if (!l->started && l->comm->queue.front() == l) {
                    l->started = true;
                    changed = true;
                }
                if (l->started && std::all_of(l->ops.begin(), l->ops.end(), [](op* o) { return o->done; })) {
                    l->finished = true;
                    l->comm->queue.pop_front();
                    changed = true;
                }
            }
            std::erase_if(fronts_, [](launch* l) { return l->finished; });
            for (auto& g : groups_) changed |= match(*g);
            any |= changed;
        }
        return any;
    }

    bool match(group_obj& g)
    {
        bool changed = false;
        for (auto& [pair, q] : g.p2p) {
            auto& [sends, recvs] = q;
            while (!sends.empty() && !recvs.empty() && running(sends.front()) && running(recvs.front())) {
                op* s = sends.front();
                op* r = recvs.front();
                if (s->comm->aborted || r->comm->aborted) break;
                if (s->count != r->count) {
                    const std::string why = "point-to-point mismatch (NCCL would hang or corrupt here): " + describe_op(*s) + ", but " +
                                            describe_op(*r) + "; both sides must post the same sizes in the same order";
                    fail(s->comm, why);
                    fail(r->comm, why);
                    break;
                }
                std::memcpy(r->out, s->in, s->count);
                s->done = r->done = true;
                sends.pop_front();
                recvs.pop_front();
                changed = true;
            }
        }
        while (!g.collectives.empty()) {
            std::vector<op*>& ops = g.collectives.front();
            if (!std::all_of(ops.begin(), ops.end(), [](op* o) { return o && running(o) && !o->comm->aborted; })) break;
            const op& a = *ops[0];
            for (op* o : ops)
                if (o->what != a.what || o->count != a.count || o->type != a.type || o->peer != a.peer) {
                    const std::string why = "collective mismatch: " + describe_op(a) + ", but " + describe_op(*o) +
                                            "; every member must call the same collectives in the same order with the same sizes";
                    for (op* x : ops) fail(x->comm, why);
                    return changed;
                }
            run_collective(ops);
            for (op* o : ops) o->done = true;
            g.collectives.pop_front();
            ++g.first_collective;
            changed = true;
        }
        return changed;
    }

    template <class T>
    static void reduce(std::vector<op*>& ops)
    {
        const std::size_t n = ops[0]->count;
        std::vector<T> sum(n);
        std::memcpy(sum.data(), ops.back()->in, n * sizeof(T));
        for (std::size_t r = ops.size() - 1; r-- > 0;) {
            const T* x = static_cast<const T*>(ops[r]->in);
            for (std::size_t e = 0; e < n; ++e) {
                if constexpr (std::is_integral_v<T>)  // wraps as on the GPU (barrier() sums uninitialised scratch)
                    sum[e] = static_cast<T>(static_cast<std::make_unsigned_t<T>>(sum[e]) + static_cast<std::make_unsigned_t<T>>(x[e]));
                else
                    sum[e] = sum[e] + x[e];
            }
        }
        if (ops[0]->peer == 1)  // average
            for (T& x : sum) x = x / static_cast<T>(ops.size());
        for (op* o : ops) std::memcpy(o->out, sum.data(), n * sizeof(T));
    }

    static void run_collective(std::vector<op*>& ops)
    {
        if (ops[0]->what == kind::broadcast) {
            const op& root = *ops[static_cast<std::size_t>(ops[0]->peer)];
            std::vector<std::byte> data(static_cast<const std::byte*>(root.in), static_cast<const std::byte*>(root.in) + root.count);
            for (op* o : ops) std::memcpy(o->out, data.data(), data.size());
            return;
        }
        switch (ops[0]->type) {
        case dtype::f32: reduce<float>(ops); break;
        case dtype::f64: reduce<double>(ops); break;
        case dtype::i32: reduce<std::int32_t>(ops); break;
        case dtype::i64: reduce<std::int64_t>(ops); break;
        default: break;
        }
    }

    void report_deadlock()
    {
        std::string blocked;
        std::vector<comm_obj*> involved;
        for (const launch* l : fronts_) {
            for (const op* o : l->ops)
                if (!o->done && o->comm) {
                    blocked += (blocked.empty() ? "" : "; ") + describe_op(*o) + (l->started ? "" : " (not started: an earlier launch of its communicator waits)");
                    involved.push_back(o->comm);
                }
        }
        if (blocked.empty()) return;
        for (comm_obj* c : involved) fail(c, "deadlock: nothing moved for " + std::to_string(stall_timeout.count()) + " ms; blocked: " + blocked, internal_error);
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::uint64_t ids_ = 0;
    std::map<std::uint64_t, pending_init> inits_;
    std::map<std::pair<group_obj*, std::size_t>, split_round> splits_;
    std::vector<std::unique_ptr<group_obj>> groups_;
    std::vector<std::unique_ptr<comm_obj>> comms_;
    std::vector<launch*> launches_;
    std::vector<launch*> fronts_;  //!< reached by their streams, not finished
    std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
    ::fake::driver device_;  // ~world stops its device thread before the launches go
    tpipe::cuda::basic_event_pool<::fake::driver> events_{device_};
};

inline bool launch::poll() { return owner->poll(this); }

//! The api over a fake world (copyable: pointers to it); its streams, markers and buffers are
//! the world's driver double's.
struct api : device_calls<::fake::driver> {
    using comm_t = comm_obj*;

    world* w = nullptr;

    api() = default;
    explicit api(world* wd) : device_calls(wd->device(), wd->events()), w(wd) {}

    int get_unique_id(unique_id& id) { return w->get_unique_id(id); }
    int init_rank(comm_t& out, int n, const unique_id& id, int rank) { return w->init_rank(out, n, id, rank); }
    int split(comm_t c, int color, int key, comm_t& out) { return w->split(c, color, key, out); }
    int rank_of(comm_t c) { return c->rank; }
    int size_of(comm_t c) { return c->group->size; }
    int group_start() { return w->group_start(); }
    int group_end() { return w->group_end(); }
    int send(const void* in, std::size_t bytes, int peer, comm_t c, stream_t s) { return call(kind::send, in, nullptr, bytes, dtype::bytes, peer, c, s); }
    int recv(void* out, std::size_t bytes, int peer, comm_t c, stream_t s) { return call(kind::recv, nullptr, out, bytes, dtype::bytes, peer, c, s); }
    int all_reduce(const void* in, void* out, std::size_t n, dtype t, redop op, comm_t c, stream_t s)
    {
        if (op == redop::average) w->averages.fetch_add(1);
        return call(kind::all_reduce, in, out, n, t, op == redop::average ? 1 : 0, c, s);
    }
    int broadcast(const void* in, void* out, std::size_t bytes, int root, comm_t c, stream_t s) { return call(kind::broadcast, in, out, bytes, dtype::bytes, root, c, s); }
    int async_error(comm_t c) { return w->async_error(c); }
    void abort(comm_t c) noexcept { w->abort(c); }
    void destroy(comm_t c) noexcept { w->destroy(c); }
    std::string describe(int rc, comm_t c)
    {
        const char* name = rc == internal_error ? "internal error" : rc == invalid_argument ? "invalid argument" : rc == invalid_usage ? "invalid usage" : rc == remote_error ? "remote error" : "error";
        const std::string last = w->last_error(c);
        return std::string("fake NCCL ") + name + (last.empty() ? "" : ": " + last);
    }

private:
    int call(kind k, const void* in, void* out, std::size_t n, dtype t, int peer, comm_t c, stream_t s)
    {
        auto* o = new op;
        o->what = k;
        o->in = in;
        o->out = out;
        o->count = n;
        o->type = t;
        o->peer = peer;
        o->comm = c;
        return w->issue(o, s);
    }
};
static_assert(tpipe::nccl::api<api>);

} // namespace tpipe::nccl::fake
