#pragma once
// detail::polled_completion: an awaitable that completes once the work recorded on a stream
// (an api marker) has completed, polled from the current tpipe::loop alongside a health check.
// The fake api's after() is this; the real api's after() is tpipe::cuda::after, which does the
// same with the CUDA engine's pooled events.
#include <coroutine>
#include <optional>
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/async/polled_awaiter.hpp"

namespace tpipe::nccl::detail {

template <class Api, class Check>
class [[nodiscard]] polled_completion final : public polled_awaiter<polled_completion<Api, Check>> {
public:
    polled_completion(Api& a, typename Api::stream_t s, std::string what, Check check)
        : api_(&a), marker_(a.record(s)), what_(std::move(what)), check_(std::move(check))
    {
    }
    polled_completion(polled_completion&& o) noexcept
        : api_(o.api_), marker_(std::exchange(o.marker_, typename Api::marker_t{})), what_(std::move(o.what_)),
          check_(std::move(o.check_)), error_(std::move(o.error_)), settled_(o.settled_)
    {
        o.api_ = nullptr;
    }
    polled_completion(const polled_completion&) = delete;
    ~polled_completion()
    {
        if (api_) api_->release(marker_);
    }

    void await_resume()
    {
        if (error_) throw tpipe::error(what_ + ": " + *error_);
    }

private:
    friend class polled_awaiter<polled_completion>;

    //! True once the marker completed or failed, or the check reported an error.
    bool settle() noexcept
    {
        if (settled_) return true;
        try {
            const int rc = api_->query(marker_);
            if (rc == 0) return settled_ = true;
            if (rc != 1) error_ = api_->describe_stream(rc);
            else error_ = check_();
        } catch (...) {
            error_ = "the health check threw";
        }
        return settled_ = error_.has_value();
    }
    Api* api_;
    typename Api::marker_t marker_;
    std::string what_;
    Check check_;
    std::optional<std::string> error_;
    bool settled_ = false;
};

} // namespace tpipe::nccl::detail
