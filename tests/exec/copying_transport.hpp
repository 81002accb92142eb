#pragma once
// Stands for tpipe::cuda::peer_transport on the CPU: a transport with every rank here whose
// open_within joins two ranks of this process by a link that copies the body (as a device copy
// does) instead of letting the payload move, and counts what it opened and copied. The copy is
// made at send, into the payload the channel places; arrival and release come from the next poll,
// as a device copy's completion marker would.
#include <atomic>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/link_transport.hpp"

namespace tpipe_test {

class copying_link final : public tpipe::link {
public:
    copying_link(std::atomic<int>& copies, std::string name) : copies_(copies), name_(std::move(name)) {}

    void send(int tag, std::span<const std::byte> header, std::span<const std::byte> body) override
    {
        if (!events_) throw tpipe::error("copying_link: send before a channel attached");
        const std::span<std::byte> to = events_->place(tag, header);
        if (to.size() != body.size()) throw tpipe::error("copying_link: the receiving payload has another size");
        if (!body.empty()) std::memcpy(to.data(), body.data(), body.size());
        copied_.push_back(tag);
        ++copies_;
    }
    void post(int, std::span<std::byte>) override {}
    void poll(tpipe::link_events& events, bool) override
    {
        for (int tag : copied_) {
            events.arrived(tag);
            events.sent(tag);
        }
        copied_.clear();
    }
    void reset(int) override { copied_.clear(); }
    std::string peer() const override { return name_; }
    void attach(tpipe::link_events* events) override { events_ = events; }

private:
    std::atomic<int>& copies_;
    std::string name_;
    tpipe::link_events* events_ = nullptr;
    std::vector<int> copied_;  //!< copied, not yet reported
};

class copying_transport final : public tpipe::all_here {
public:
    std::unique_ptr<tpipe::link> open_within(const tpipe::endpoint& e) override
    {
        ++opened;
        return std::make_unique<copying_link>(copies, "copy from rank " + std::to_string(e.from_rank) + " to rank " + std::to_string(e.to_rank));
    }

    int opened = 0;  //!< links (at runner construction, on one thread)
    std::atomic<int> copies{0};  //!< bodies copied, from any loop
};

} // namespace tpipe_test
