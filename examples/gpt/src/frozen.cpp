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
    activation<T> out{b.rows, L, std::vector<T>(static_cast<std::size_t>(b.rows * row))};
    batch one{1, L, std::vector<std::int32_t>(static_cast<std::size_t>(L)), std::vector<std::int32_t>(static_cast<std::size_t>(L))};
    for (std::int64_t r = 0; r < b.rows; ++r) {
        std::copy_n(b.inputs.begin() + r * L, L, one.inputs.begin());
        std::copy_n(b.targets.begin() + r * L, L, one.targets.begin());
        activation<T> y;
        auto hit = cache_ ? cache_->get(ids[static_cast<std::size_t>(r)]) : std::nullopt;
        if (hit && hit->level == frozen) {
            y = std::move(hit->value);
            ++count_.cached;
        } else if (hit && hit->level < frozen) {
            y = run(one, std::move(hit->value), hit->level, frozen);
            ++count_.extended;
        } else {  // nothing cached, or cached deeper than asked (a caller going back: recompute)
            y = run(one, {}, 0, frozen);
            ++count_.full;
        }
        if (cache_ && !(hit && hit->level >= frozen)) cache_->put(ids[static_cast<std::size_t>(r)], frozen, y);
        std::copy(y.data.begin(), y.data.end(), out.data.begin() + r * row);
    }
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
