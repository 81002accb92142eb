#pragma once
// The libtorch GPT's training data (training.cpp, elastic.cpp).
#include <cstdint>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/torch.h>

#include <tpipe/core/file.hpp>
#include <tpipe/state/errors.hpp>

namespace libtorch_gpt {

//! The training text (bytes are tokens) as inputs and next-token targets, [rows, seq_len] int64
//! each: random windows (batch) or numbered ones (rows, for the elastic driver's sampler).
class corpus {
public:
    corpus(const std::string& path, std::uint64_t seed) : rng_(seed)
    {
        text_ = tpipe::read_file(path, "data file", std::uintmax_t{4} << 30);  // a regular file, bounded
    }
    std::pair<torch::Tensor, torch::Tensor> batch(int rows, std::int64_t seq_len)
    {
        if (static_cast<std::int64_t>(text_.size()) <= seq_len)
            throw std::runtime_error("the data file has " + std::to_string(text_.size()) + " bytes; --seq-len " +
                                     std::to_string(seq_len) + " needs more");
        auto window = torch::empty({rows, seq_len + 1}, torch::kLong);
        auto w = window.accessor<std::int64_t, 2>();
        std::uniform_int_distribution<std::size_t> start(0, text_.size() - static_cast<std::size_t>(seq_len) - 1);
        for (int r = 0; r < rows; ++r) {
            const std::size_t s = start(rng_);
            for (std::int64_t t = 0; t <= seq_len; ++t) w[r][t] = static_cast<unsigned char>(text_[s + t]);
        }
        return {window.slice(1, 0, seq_len).contiguous(), window.slice(1, 1, seq_len + 1).contiguous()};
    }

    //! Whole windows of seq_len + 1 bytes (sample k starts at byte k * seq_len), as many as fill
    //! whole batches of `batch`; refused when not even one batch fits.
    std::int64_t windows(std::int64_t seq_len, std::int64_t batch) const
    {
        const std::int64_t n = text_.empty() ? 0 : static_cast<std::int64_t>(text_.size() - 1) / seq_len / batch * batch;
        if (n < batch)
            throw std::runtime_error("the data file has " + std::to_string(text_.size()) + " bytes, fewer than one batch of " +
                                     std::to_string(batch) + " windows of " + std::to_string(seq_len) +
                                     " tokens; use a longer text or a smaller --batch / --seq-len");
        return n;
    }
    //! Windows `ids` (of windows()) as rows.
    std::pair<torch::Tensor, torch::Tensor> rows(std::span<const std::int64_t> ids, std::int64_t seq_len) const
    {
        auto window = torch::empty({static_cast<std::int64_t>(ids.size()), seq_len + 1}, torch::kLong);
        auto w = window.accessor<std::int64_t, 2>();
        for (std::size_t r = 0; r < ids.size(); ++r)
            for (std::int64_t t = 0; t <= seq_len; ++t)
                w[static_cast<std::int64_t>(r)][t] = static_cast<unsigned char>(text_.at(static_cast<std::size_t>(ids[r] * seq_len + t)));
        return {window.slice(1, 0, seq_len).contiguous(), window.slice(1, 1, seq_len + 1).contiguous()};
    }

    //! Where the sampler is (its generator's state as text), for a checkpoint; seek() returns there.
    std::string position() const
    {
        std::ostringstream o;
        o << rng_;
        return o.str();
    }
    void seek(const std::string& position)
    {
        std::istringstream i(position);
        i >> rng_;
        if (!i) throw tpipe::state::corrupt_checkpoint("the checkpoint's data sampler position is not a generator state");
    }

private:
    std::string text_;
    std::mt19937_64 rng_;
};

} // namespace libtorch_gpt
