#include "gpt/frozen.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gpt {

template <class T>
frozen_prefix<T>::frozen_prefix(parameters<T>& params, int threads, cache_type* cache)
    : params_(&params), threads_(threads), cache_(cache)
{
}
template <class T>
frozen_prefix<T>::~frozen_prefix() = default;
template <class T>
frozen_prefix<T>::frozen_prefix(frozen_prefix&&) noexcept = default;
template <class T>
frozen_prefix<T>& frozen_prefix<T>::operator=(frozen_prefix&&) noexcept = default;

template <class T>
activation<T> frozen_prefix<T>::run(const batch& one, activation<T> x, int from, int to)
{
    auto& p = parts_[{from, to}];
    if (!p) p = std::make_unique<part<T>>(*params_, from, to, from == 0, false, threads_);
    p->begin(&one);
    activation<T> y = p->forward(tpipe::unit{0, 0, 0, 1, 0, one.seq_len}, std::move(x));
    p->begin(&one);  // drops what the forward saved for a backward that never comes
    return y;
}

template <class T>
activation<T> frozen_prefix<T>::forward(const batch& b, std::span<const std::int64_t> ids, int frozen)
{
    params_->lay.frozen_end(frozen);  // refuses what cannot be frozen
    if (frozen < 1) throw std::invalid_argument("frozen_prefix::forward: no layer is frozen");
    if (static_cast<std::int64_t>(ids.size()) != b.rows)
        throw std::invalid_argument("frozen_prefix::forward: " + std::to_string(ids.size()) + " sample ids for " +
                                    std::to_string(b.rows) + " rows");
    const std::int64_t L = b.seq_len, d = params_->cfg.d_model, row = L * d;
    auto one_row = [&](std::size_t r) {
        batch one{1, L, std::vector<std::int32_t>(b.inputs.begin() + static_cast<std::ptrdiff_t>(r) * L,
                                                   b.inputs.begin() + static_cast<std::ptrdiff_t>(r + 1) * L),
                  std::vector<std::int32_t>(b.targets.begin() + static_cast<std::ptrdiff_t>(r) * L,
                                            b.targets.begin() + static_cast<std::ptrdiff_t>(r + 1) * L)};
        return one;
    };
    const auto rows = tpipe::elastic::frozen_outputs<activation<T>>(
        ids, frozen, cache_,
        [&](std::size_t r, std::optional<activation<T>> from, int lo, int hi) {
            activation<T> start;  // (assigned, not a ?: of two temporaries: GCC 12 at -O1 warned)
            if (from) start = std::move(*from);
            return run(one_row(r), std::move(start), lo, hi);
        },
        count_);
    activation<T> out{b.rows, L, std::vector<T>(static_cast<std::size_t>(b.rows * row))};
    for (std::size_t r = 0; r < rows.size(); ++r)
        std::copy(rows[r].data.begin(), rows[r].data.end(), out.data.begin() + static_cast<std::ptrdiff_t>(r) * row);
    return out;
}

template <class T>
activation<T> unit_slice(const activation<T>& all, const tpipe::unit& u, std::int64_t d)
{
    const std::int64_t s = u.tokens();
    activation<T> x{u.rows(), s, std::vector<T>(static_cast<std::size_t>(u.rows() * s * d))};
    for (std::int64_t r = 0; r < u.rows(); ++r)
        std::copy_n(all.data.begin() + ((u.row_begin + r) * all.tokens + u.token_begin) * d, s * d,
                    x.data.begin() + r * s * d);
    return x;
}

template class frozen_prefix<float>;
template class frozen_prefix<double>;
template activation<float> unit_slice(const activation<float>&, const tpipe::unit&, std::int64_t);
template activation<double> unit_slice(const activation<double>&, const tpipe::unit&, std::int64_t);

} // namespace gpt
