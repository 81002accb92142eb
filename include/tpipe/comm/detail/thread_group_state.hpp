#pragma once
// The shared state of a tpipe::thread_group (tpipe/comm/thread_communicator.hpp): the collective
// rendezvous, the mailboxes, cancellation and split. Not for direct use.
#include <algorithm>
#include <condition_variable>
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
#include <utility>
#include <vector>

#include "tpipe/comm/detail/thread_group_ops.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"

namespace tpipe {
namespace detail::tc {

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

    //! Cancels every member for the iteration `from` is in (every member's latest: from < 0).
    //! A member still in the iteration before, not yet reset, stays cancelled through its next
    //! reset: a replica that fails before the others have started the iteration must not have its
    //! cancellation cleared by their reset, or they would wait for it in the all-reduce.
    void cancel_all(int from = -1) noexcept
    {
        std::lock_guard lock(m_);
        std::uint64_t iteration = 0;
        if (from >= 0)
            iteration = members_[static_cast<std::size_t>(from)].iteration;
        else
            for (const member_state& ms : members_) iteration = std::max(iteration, ms.iteration);
        if (!group_cancelled_ || iteration > cancelled_iteration_) cancelled_iteration_ = iteration;
        group_cancelled_ = true;
        for (int i = 0; i < n_; ++i)
            if (members_[static_cast<std::size_t>(i)].iteration <= cancelled_iteration_) cancel_locked(i);
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
        ++ms.iteration;
        // A group cancellation of this iteration (see cancel_all) outlives the reset that starts it.
        ms.cancelled = group_cancelled_ && cancelled_iteration_ >= ms.iteration;
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
        return a.what == b.what && a.type == b.type && a.count == b.count && a.root == b.root && a.order == b.order;
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
        case kind::all_reduce:
        case kind::reduce_scatter: {
            switch (op.type) {
            case elem::f32: reduce<float>(ops, op); break;
            case elem::f64: reduce<double>(ops, op); break;
            case elem::i32: reduce<std::int32_t>(ops, op); break;
            case elem::i64: reduce<std::int64_t>(ops, op); break;
            default: break;
            }
            const std::size_t bytes = op.count * elem_size(op.type);
            if (op.what == kind::all_reduce)
                for (std::size_t r = 1; r < ops.size(); ++r)
                    if (bytes) std::memcpy(ops[r]->data, ops[0]->data, bytes);
            break;
        }
        case kind::all_gather: {
            const std::size_t size = elem_size(op.type);
            const int d = static_cast<int>(ops.size());
            for (int s = 0; s < d; ++s) {
                const element_range seg = ring_segment(op.count, d, s);
                if (seg.size == 0) continue;
                for (int r = 0; r < d; ++r)
                    if (r != s)
                        std::memcpy(ops[static_cast<std::size_t>(r)]->data + seg.begin * size,
                                    ops[static_cast<std::size_t>(s)]->data + seg.begin * size, seg.size * size);
            }
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
    bool group_cancelled_ = false;           //!< cancel_all was called ...
    std::uint64_t cancelled_iteration_ = 0;  //!< ... for this iteration (and the ones before)
    std::deque<slot> slots_;  // deque: a completing member keeps a reference across the unlock
    message* free_ = nullptr;
    std::vector<split_entry> split_;
    int split_arrived_ = 0;
    std::uint64_t split_gen_ = 0;
    std::string split_error_;
};

} // namespace detail::tc

} // namespace tpipe
