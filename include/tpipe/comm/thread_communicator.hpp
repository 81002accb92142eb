#pragma once
// tpipe::thread_group / tpipe::thread_communicator: the in-process model of
// tpipe::communicator (tpipe/comm/communicator.hpp). The members are threads of one process,
// each awaiting its own handle from its own loop; for tests and single-machine data parallelism.
//
//   tpipe::thread_group group(4);                 // shared state of 4 members
//   tpipe::thread_communicator c = group.member(2);
//   co_await c.all_reduce_sum(std::span<float>(grad));
//
// How it works
// - Collectives rendezvous per sequence number (the i-th collective of every member meets the
//   i-th of the others). The last member to arrive computes: all_reduce_sum folds into member
//   0's span in rank order (x0 += x1, then += x2, ...), then copies it to the other members'
//   spans; broadcast copies the root's span. It then posts every waiter onto the loop that was
//   current when it suspended, and continues itself without suspending. No allocation per
//   operation in the steady state (rendezvous slots and message buffers are reused).
// - Members that call different collectives, or with different sizes or roots, at the same
//   sequence number all get a tpipe::error naming both calls.
// - Point-to-point is eager: send copies the bytes into the receiver's mailbox (or straight
//   into a receive already waiting for them) and completes at once; receives match by
//   (source, tag) in FIFO order.
// - Awaited on a thread that drives no tpipe::loop, an operation blocks that thread instead.
// - cancel() cancels one member, thread_group::cancel() every member (what a runner does when
//   an iteration fails). reset() drops the member's undelivered messages; call it on every
//   member between iterations, before any member starts the next one.
// - One mutex per group guards the bookkeeping; the reduction and copies run outside it.
#include <algorithm>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/group_cancelling_communicator.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/exec/loop.hpp"

namespace tpipe {

class thread_communicator;
class thread_group;

namespace detail::tc {

enum class kind : unsigned char { all_reduce, broadcast, barrier };
enum class elem : unsigned char { none, f32, f64, i32, i64 };

template <class T>
constexpr elem elem_of = std::is_same_v<T, float>          ? elem::f32
                         : std::is_same_v<T, double>       ? elem::f64
                         : std::is_same_v<T, std::int32_t> ? elem::i32
                         : std::is_same_v<T, std::int64_t> ? elem::i64
                                                           : elem::none;

inline const char* elem_name(elem e) noexcept
{
    switch (e) {
    case elem::f32: return "float";
    case elem::f64: return "double";
    case elem::i32: return "int32";
    case elem::i64: return "int64";
    default: return "byte";
    }
}

//! A suspended operation of one member; lives in its awaiter.
struct waiter {
    wake_node node{};
    loop* where = nullptr;  //!< nullptr: a plain thread blocked on the group's condition
    bool done = false;      //!< for a blocked plain thread
    std::exception_ptr error{};
};

struct collective_op : waiter {
    kind what = kind::barrier;
    elem type = elem::none;
    std::byte* data = nullptr;
    std::size_t count = 0;  //!< elements (bytes for broadcast)
    int root = 0;
};

struct recv_op : waiter {
    recv_op* next = nullptr;
    int source = 0, tag = 0;
    std::span<std::byte> bytes{};
};

struct message {
    message* next = nullptr;
    int source = 0, tag = 0;
    std::vector<std::byte> data;
};

struct slot {
    bool used = false, completing = false;
    bool cancelled = false;  //!< a member that had arrived was cancelled: the collective cannot complete
    std::uint64_t seq = 0;
    int arrived = 0;
    collective_op first{};  //!< the signature of the first arrival (for mismatch messages)
    int first_member = 0;
    std::string error;
    std::vector<collective_op*> ops;  //!< by member; sized once
};

struct member_state {
    std::uint64_t seq = 0;  //!< next collective sequence number
    bool cancelled = false;
    recv_op* recv_head = nullptr;
    recv_op* recv_tail = nullptr;
    message* msg_head = nullptr;
    message* msg_tail = nullptr;
};

inline std::string describe(const collective_op& op)
{
    switch (op.what) {
    case kind::all_reduce:
        return "all_reduce_sum of " + std::to_string(op.count) + " " + elem_name(op.type);
    case kind::broadcast:
        return "broadcast of " + std::to_string(op.count) + " bytes from root " + std::to_string(op.root);
    default: return "barrier";
    }
}

template <class T>
void fold(const std::vector<collective_op*>& ops, std::size_t n)
{
    T* out = reinterpret_cast<T*>(ops[0]->data);
    for (std::size_t r = 1; r < ops.size(); ++r) {
        const T* in = reinterpret_cast<const T*>(ops[r]->data);
        for (std::size_t k = 0; k < n; ++k) out[k] += in[k];
    }
}

class group_state {
public:
    explicit group_state(int n) : n_(n), members_(static_cast<std::size_t>(n)) {}
    group_state(const group_state&) = delete;
    group_state& operator=(const group_state&) = delete;
    ~group_state()
    {
        for (auto& m : members_) free_list(m.msg_head);
        free_list(free_);
    }

    int size() const noexcept { return n_; }

    //! Arrival of member `me` at its next collective. Returns whether the caller must stay
    //! suspended (false: op is complete, with op.error set or not).
    bool arrive(int me, collective_op& op)
    {
        std::unique_lock lock(m_);
        member_state& ms = members_[static_cast<std::size_t>(me)];
        if (ms.cancelled) {
            op.error = std::make_exception_ptr(operation_cancelled());
            return false;
        }
        const std::uint64_t seq = ms.seq++;
        slot& s = find_slot(seq);
        if (s.arrived == 0) {
            s.first = op;
            s.first_member = me;
        } else if (s.error.empty() && !s.cancelled && !same_call(s.first, op)) {
            s.error = "thread_communicator: collective #" + std::to_string(seq) + " differs between members: member " +
                      std::to_string(s.first_member) + " called " + describe(s.first) + ", member " + std::to_string(me) +
                      " called " + describe(op) + "; every member must call the same collectives, in the same order, with the same sizes";
            for (auto*& w : s.ops)
                if (w) {
                    w->error = std::make_exception_ptr(error(s.error));
                    wake(*w);
                    w = nullptr;
                }
        }
        ++s.arrived;
        if (s.cancelled || !s.error.empty()) {
            op.error = s.cancelled ? std::make_exception_ptr(operation_cancelled()) : std::make_exception_ptr(error(s.error));
            if (s.arrived == n_) release(s);
            return false;
        }
        s.ops[static_cast<std::size_t>(me)] = &op;
        if (s.arrived < n_) {
            op.where = loop::current();
            if (op.where) return true;
            cv_.wait(lock, [&] { return op.done; });
            return false;
        }
        // Last to arrive: compute outside the lock (the slot stays reserved meanwhile).
        s.completing = true;
        lock.unlock();
        compute(s.ops, op);
        lock.lock();
        for (std::size_t r = 0; r < s.ops.size(); ++r)
            if (static_cast<int>(r) != me) wake(*s.ops[r]);
        release(s);
        return false;
    }

    //! Eager send from `me` to `peer`. Returns the error for the sender (only cancellation).
    std::exception_ptr send(int me, int peer, int tag, std::span<const std::byte> bytes)
    {
        std::lock_guard lock(m_);
        if (members_[static_cast<std::size_t>(me)].cancelled) return std::make_exception_ptr(operation_cancelled());
        member_state& dst = members_[static_cast<std::size_t>(peer)];
        recv_op* prev = nullptr;
        for (recv_op* r = dst.recv_head; r; prev = r, r = r->next) {
            if (r->source != me || r->tag != tag) continue;
            unlink_recv(dst, prev, r);
            deliver(*r, bytes.data(), bytes.size(), peer);
            wake(*r);
            return {};
        }
        message* msg = free_;
        if (msg) free_ = msg->next;
        else msg = new message;
        msg->next = nullptr;
        msg->source = me;
        msg->tag = tag;
        msg->data.assign(bytes.begin(), bytes.end());
        if (dst.msg_tail) dst.msg_tail->next = msg;
        else dst.msg_head = msg;
        dst.msg_tail = msg;
        return {};
    }

    //! Receive into op.bytes; returns whether the caller must stay suspended.
    bool receive(int me, recv_op& op)
    {
        std::unique_lock lock(m_);
        member_state& ms = members_[static_cast<std::size_t>(me)];
        if (ms.cancelled) {
            op.error = std::make_exception_ptr(operation_cancelled());
            return false;
        }
        message* prev = nullptr;
        for (message* msg = ms.msg_head; msg; prev = msg, msg = msg->next) {
            if (msg->source != op.source || msg->tag != op.tag) continue;
            if (prev) prev->next = msg->next;
            else ms.msg_head = msg->next;
            if (ms.msg_tail == msg) ms.msg_tail = prev;
            deliver(op, msg->data.data(), msg->data.size(), me);
            msg->next = free_;
            free_ = msg;
            return false;
        }
        op.next = nullptr;
        if (ms.recv_tail) ms.recv_tail->next = &op;
        else ms.recv_head = &op;
        ms.recv_tail = &op;
        op.where = loop::current();
        if (op.where) return true;
        cv_.wait(lock, [&] { return op.done; });
        return false;
    }

    void cancel(int me) noexcept
    {
        std::lock_guard lock(m_);
        cancel_locked(me);
        cv_.notify_all();
    }

    void cancel_all() noexcept
    {
        std::lock_guard lock(m_);
        for (int i = 0; i < n_; ++i) cancel_locked(i);
        cv_.notify_all();
    }

    void reset(int me)
    {
        std::lock_guard lock(m_);
        member_state& ms = members_[static_cast<std::size_t>(me)];
        if (ms.recv_head)
            throw error("thread_communicator::reset: member " + std::to_string(me) +
                        " still has a receive pending; reset only between iterations, when no operation is pending");
        for (slot& s : slots_)
            if (s.used && s.ops[static_cast<std::size_t>(me)])
                throw error("thread_communicator::reset: member " + std::to_string(me) +
                            " still waits in a collective; reset only between iterations, when no operation is pending");
        ms.cancelled = false;
        ms.seq = 0;
        while (message* msg = ms.msg_head) {  // undelivered messages of the failed iteration
            ms.msg_head = msg->next;
            msg->next = free_;
            free_ = msg;
        }
        ms.msg_tail = nullptr;
        // Slots left by members that arrived and were cancelled before the others came.
        for (slot& s : slots_)
            if (s.used && !s.completing && std::none_of(s.ops.begin(), s.ops.end(), [](auto* w) { return w != nullptr; }))
                release(s);
    }

    //! Blocking split (see thread_communicator::split). Returns (group, rank).
    std::pair<std::shared_ptr<group_state>, int> split(int me, int color, int key)
    {
        std::unique_lock lock(m_);
        if (members_[static_cast<std::size_t>(me)].cancelled) throw operation_cancelled();
        if (split_.empty()) split_.resize(static_cast<std::size_t>(n_));
        split_[static_cast<std::size_t>(me)] = {color, key, nullptr, -1};
        const std::uint64_t gen = split_gen_;
        if (++split_arrived_ == n_) {
            split_error_.clear();
            for (int i = 0; i < n_ && split_error_.empty(); ++i)
                if (split_[static_cast<std::size_t>(i)].color < 0)
                    split_error_ = "thread_communicator::split: member " + std::to_string(i) + " passed color " +
                                   std::to_string(split_[static_cast<std::size_t>(i)].color) + "; colors must be >= 0";
            if (split_error_.empty()) assign_split_groups();
            split_arrived_ = 0;
            ++split_gen_;
            cv_.notify_all();
        } else {
            cv_.wait(lock, [&] { return split_gen_ != gen || members_[static_cast<std::size_t>(me)].cancelled; });
            if (split_gen_ == gen) {
                --split_arrived_;
                throw operation_cancelled();
            }
        }
        if (!split_error_.empty()) throw invalid_argument(split_error_);
        auto& e = split_[static_cast<std::size_t>(me)];
        return {std::move(e.result), e.new_rank};
    }

private:
    struct split_entry {
        int color = 0, key = 0;
        std::shared_ptr<group_state> result;
        int new_rank = -1;
    };

    static bool same_call(const collective_op& a, const collective_op& b) noexcept
    {
        return a.what == b.what && a.type == b.type && a.count == b.count && a.root == b.root;
    }

    static void free_list(message* m) noexcept
    {
        while (m) delete std::exchange(m, m->next);
    }

    slot& find_slot(std::uint64_t seq)
    {
        slot* unused = nullptr;
        for (slot& s : slots_) {
            if (s.used && s.seq == seq) return s;
            if (!s.used && !unused) unused = &s;
        }
        if (!unused) {
            unused = &slots_.emplace_back();
            unused->ops.assign(static_cast<std::size_t>(n_), nullptr);
        }
        unused->used = true;
        unused->seq = seq;
        return *unused;
    }

    static void release(slot& s) noexcept
    {
        s.used = s.completing = s.cancelled = false;
        s.arrived = 0;
        s.error.clear();
        std::fill(s.ops.begin(), s.ops.end(), nullptr);
    }

    //! Resumes a waiter: posts it onto its loop, or wakes its blocked thread. Lock held.
    void wake(waiter& w) noexcept
    {
        if (w.where) w.where->post(&w.node);
        else {
            w.done = true;
            cv_.notify_all();
        }
    }

    static void unlink_recv(member_state& ms, recv_op* prev, recv_op* r) noexcept
    {
        if (prev) prev->next = r->next;
        else ms.recv_head = r->next;
        if (ms.recv_tail == r) ms.recv_tail = prev;
    }

    static void deliver(recv_op& r, const std::byte* data, std::size_t size, int me)
    {
        if (size != r.bytes.size()) {
            r.error = std::make_exception_ptr(
                error("thread_communicator: member " + std::to_string(me) + " receives " + std::to_string(r.bytes.size()) +
                      " bytes from member " + std::to_string(r.source) + " with tag " + std::to_string(r.tag) +
                      ", but the message has " + std::to_string(size) + " bytes; both sides must agree on the size"));
            return;
        }
        if (size) std::memcpy(r.bytes.data(), data, size);
    }

    static void compute(const std::vector<collective_op*>& ops, const collective_op& op)
    {
        switch (op.what) {
        case kind::all_reduce: {
            switch (op.type) {
            case elem::f32: fold<float>(ops, op.count); break;
            case elem::f64: fold<double>(ops, op.count); break;
            case elem::i32: fold<std::int32_t>(ops, op.count); break;
            case elem::i64: fold<std::int64_t>(ops, op.count); break;
            default: break;
            }
            std::size_t bytes = op.count;
            switch (op.type) {
            case elem::f32: case elem::i32: bytes *= 4; break;
            default: bytes *= 8; break;
            }
            for (std::size_t r = 1; r < ops.size(); ++r)
                if (bytes) std::memcpy(ops[r]->data, ops[0]->data, bytes);
            break;
        }
        case kind::broadcast:
            for (std::size_t r = 0; r < ops.size(); ++r)
                if (static_cast<int>(r) != op.root && op.count)
                    std::memcpy(ops[r]->data, ops[static_cast<std::size_t>(op.root)]->data, op.count);
            break;
        case kind::barrier: break;
        }
    }

    void cancel_locked(int me) noexcept
    {
        member_state& ms = members_[static_cast<std::size_t>(me)];
        ms.cancelled = true;
        for (slot& s : slots_) {
            if (!s.used || s.completing) continue;
            if (!s.ops[static_cast<std::size_t>(me)]) continue;
            // This member's contribution is gone: the collective cannot complete for anyone.
            // The slot keeps its arrival count, so the members still to come fail at once.
            s.cancelled = true;
            for (auto*& w : s.ops)
                if (w) {
                    w->error = std::make_exception_ptr(operation_cancelled());
                    wake(*w);
                    w = nullptr;
                }
        }
        while (recv_op* r = ms.recv_head) {
            ms.recv_head = r->next;
            r->error = std::make_exception_ptr(operation_cancelled());
            wake(*r);
        }
        ms.recv_tail = nullptr;
    }

    void assign_split_groups()
    {
        std::vector<int> order(static_cast<std::size_t>(n_));
        for (int i = 0; i < n_; ++i) order[static_cast<std::size_t>(i)] = i;
        auto entry = [&](int i) -> split_entry& { return split_[static_cast<std::size_t>(i)]; };
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            if (entry(a).color != entry(b).color) return entry(a).color < entry(b).color;
            return entry(a).key < entry(b).key;  // stable: ties keep the old rank order
        });
        for (std::size_t i = 0; i < order.size();) {
            std::size_t j = i;
            while (j < order.size() && entry(order[j]).color == entry(order[i]).color) ++j;
            auto g = std::make_shared<group_state>(static_cast<int>(j - i));
            for (std::size_t k = i; k < j; ++k) {
                entry(order[k]).result = g;
                entry(order[k]).new_rank = static_cast<int>(k - i);
            }
            i = j;
        }
    }

    std::mutex m_;
    std::condition_variable cv_;
    int n_;
    std::vector<member_state> members_;
    std::deque<slot> slots_;  // deque: a completing member keeps a reference across the unlock
    message* free_ = nullptr;
    std::vector<split_entry> split_;
    int split_arrived_ = 0;
    std::uint64_t split_gen_ = 0;
    std::string split_error_;
};

} // namespace detail::tc

//! One member's handle on a thread_group (see the file comment). Cheap to move; the group's
//! state lives as long as any handle.
class thread_communicator {
public:
    //! Awaiter of a collective.
    class [[nodiscard]] collective_awaiter {
    public:
        bool await_ready() const noexcept { return false; }
        bool await_suspend(std::coroutine_handle<> h)
        {
            op_.node.handle = h;
            return g_->arrive(rank_, op_);
        }
        void await_resume() const
        {
            if (op_.error) std::rethrow_exception(op_.error);
        }

    private:
        friend class thread_communicator;
        collective_awaiter(detail::tc::group_state* g, int rank, detail::tc::collective_op op) : g_(g), rank_(rank), op_(op) {}
        detail::tc::group_state* g_;
        int rank_;
        detail::tc::collective_op op_;
    };

    //! Awaiter of a receive.
    class [[nodiscard]] recv_awaiter {
    public:
        bool await_ready() const noexcept { return false; }
        bool await_suspend(std::coroutine_handle<> h)
        {
            op_.node.handle = h;
            return g_->receive(rank_, op_);
        }
        void await_resume() const
        {
            if (op_.error) std::rethrow_exception(op_.error);
        }

    private:
        friend class thread_communicator;
        recv_awaiter(detail::tc::group_state* g, int rank, int peer, int tag, std::span<std::byte> bytes) : g_(g), rank_(rank)
        {
            op_.source = peer;
            op_.tag = tag;
            op_.bytes = bytes;
        }
        detail::tc::group_state* g_;
        int rank_;
        detail::tc::recv_op op_;
    };

    //! Awaiter of an operation that has already completed (send is eager).
    class [[nodiscard]] ready_awaiter {
    public:
        bool await_ready() const noexcept { return true; }
        void await_suspend(std::coroutine_handle<>) const noexcept {}
        void await_resume() const
        {
            if (error_) std::rethrow_exception(error_);
        }

    private:
        friend class thread_communicator;
        explicit ready_awaiter(std::exception_ptr e) : error_(std::move(e)) {}
        std::exception_ptr error_;
    };

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return g_->size(); }

    //! In-place sum over all members, in rank order; bitwise identical on every member.
    template <class T>
        requires(detail::tc::elem_of<T> != detail::tc::elem::none)
    collective_awaiter all_reduce_sum(std::span<T> values)
    {
        detail::tc::collective_op op;
        op.what = detail::tc::kind::all_reduce;
        op.type = detail::tc::elem_of<T>;
        op.data = reinterpret_cast<std::byte*>(values.data());
        op.count = values.size();
        return {g_.get(), rank_, op};
    }

    //! Copies root's bytes into every member's span (same size everywhere).
    collective_awaiter broadcast(std::span<std::byte> bytes, int root)
    {
        check_member(root, "broadcast root");
        detail::tc::collective_op op;
        op.what = detail::tc::kind::broadcast;
        op.data = bytes.data();
        op.count = bytes.size();
        op.root = root;
        return {g_.get(), rank_, op};
    }

    //! Completes once every member has arrived.
    collective_awaiter barrier() { return {g_.get(), rank_, detail::tc::collective_op{}}; }

    //! Eager: copies the bytes for `peer` and completes at once.
    ready_awaiter send(int peer, int tag, std::span<const std::byte> bytes)
    {
        check_member(peer, "send peer");
        check_tag(tag);
        return ready_awaiter{g_->send(rank_, peer, tag, bytes)};
    }

    //! Completes once the next message from `peer` with `tag` has been copied into `bytes`
    //! (it must have exactly that size).
    recv_awaiter recv(int peer, int tag, std::span<std::byte> bytes)
    {
        check_member(peer, "recv peer");
        check_tag(tag);
        return {g_.get(), rank_, peer, tag, bytes};
    }

    //! Blocking collective for setup: every member calls it (from its own thread); the
    //! members with the same color (>= 0) form a new group, ranked by (key, old rank).
    thread_communicator split(int color, int key)
    {
        auto [g, r] = g_->split(rank_, color, key);
        return thread_communicator(std::move(g), r);
    }

    void cancel() noexcept { g_->cancel(rank_); }
    //! Cancels every member of the group (any thread): what a failed replica does, since no
    //! transport tells the replicas of one process about each other's failures.
    void cancel_group() noexcept { g_->cancel_all(); }
    static constexpr bool tpipe_group_cancelling_communicator = true;
    void reset() { g_->reset(rank_); }

private:
    friend class thread_group;
    thread_communicator(std::shared_ptr<detail::tc::group_state> g, int rank) : g_(std::move(g)), rank_(rank) {}

    void check_member(int r, const char* what) const
    {
        if (r < 0 || r >= size())
            throw invalid_argument(std::string("thread_communicator: ") + what + " " + std::to_string(r) +
                                   " is not a member; members are 0.." + std::to_string(size() - 1));
    }
    static void check_tag(int tag)
    {
        if (tag < 0) throw invalid_argument("thread_communicator: tag " + std::to_string(tag) + " is negative; tags are >= 0");
    }

    std::shared_ptr<detail::tc::group_state> g_;
    int rank_;
};

//! The shared state of n in-process members; hands out one handle per member.
class thread_group {
public:
    explicit thread_group(int n) : g_(make(n)) {}
    int size() const noexcept { return g_->size(); }
    //! The handle of member i (0 <= i < size()); take one per member.
    thread_communicator member(int i) const
    {
        if (i < 0 || i >= size())
            throw invalid_argument("thread_group::member(" + std::to_string(i) + "): members are 0.." + std::to_string(size() - 1));
        return thread_communicator(g_, i);
    }
    //! Cancels every member (what a runner does when one replica fails).
    void cancel() noexcept { g_->cancel_all(); }

private:
    static std::shared_ptr<detail::tc::group_state> make(int n)
    {
        if (n < 1) throw invalid_argument("thread_group(" + std::to_string(n) + "): a group has at least 1 member");
        return std::make_shared<detail::tc::group_state>(n);
    }
    std::shared_ptr<detail::tc::group_state> g_;
};

static_assert(communicator<thread_communicator>);
static_assert(group_cancelling_communicator<thread_communicator>);

} // namespace tpipe
