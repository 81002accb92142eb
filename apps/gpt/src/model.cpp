#include "gpt/model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace gpt {

// ---- config / layout / parameters ----------------------------------------------------------
void config::validate() const
{
    auto bad = [](const std::string& what) { throw std::invalid_argument("gpt::config: " + what); };
    if (vocab < 2) bad("vocab must be >= 2, got " + std::to_string(vocab));
    if (d_model < 1) bad("d_model must be >= 1, got " + std::to_string(d_model));
    if (heads < 1 || d_model % heads != 0)
        bad("heads must be >= 1 and divide d_model (" + std::to_string(d_model) + "), got " + std::to_string(heads));
    if (layers < 0) bad("layers must be >= 0, got " + std::to_string(layers));
    if (seq_len < 1) bad("seq_len must be >= 1, got " + std::to_string(seq_len));
    if (mlp_ratio < 1) bad("mlp_ratio must be >= 1, got " + std::to_string(mlp_ratio));
    if (!(ln_eps > 0)) bad("ln_eps must be > 0");
}

layout::layout(const config& c) : layout(c, holding{}) {}

layout::layout(const config& c, const holding& h) : held(h)
{
    c.validate();
    if (held.layer_end < 0) held.layer_end = c.layers;
    if (held.layer_begin < 0 || held.layer_begin > held.layer_end || held.layer_end > c.layers)
        throw std::invalid_argument("gpt::layout: layers [" + std::to_string(held.layer_begin) + ", " +
                                    std::to_string(held.layer_end) + ") are not inside the model's " +
                                    std::to_string(c.layers));
    const tensor_split tp = held.tensor;
    if (tp.ranks < 1 || tp.rank < 0 || tp.rank >= tp.ranks)
        throw std::invalid_argument("gpt::layout: tensor rank " + std::to_string(tp.rank) + " of " +
                                    std::to_string(tp.ranks) + " (needs 0 <= rank < ranks)");
    if (c.heads % tp.ranks != 0 || c.d_ff() % tp.ranks != 0 || c.vocab % tp.ranks != 0)
        throw std::invalid_argument("gpt::layout: " + std::to_string(tp.ranks) + " tensor ranks must divide the " +
                                    std::to_string(c.heads) + " heads, the MLP width " + std::to_string(c.d_ff()) +
                                    " and the vocabulary " + std::to_string(c.vocab) +
                                    " (each rank holds whole heads and an equal share of the MLP and the vocabulary)");
    const std::int64_t d = c.d_model, V = c.vocab, L = c.seq_len, F = c.d_ff(), t = tp.ranks;
    using split = tensor_info::split;
    std::int64_t global = 0;
    // Every tensor in the whole model's order; the held ones get storage here. `shape` is this
    // tensor rank's share (the whole for split::whole); `global` counts whole tensors.
    auto add = [&](std::string name, std::vector<std::int64_t> shape, bool decay, bool keep, split cut = split::whole,
                   int blocks = 1) {
        tensor_info ti{std::move(name), keep ? total : -1, std::move(shape), decay, global, false};
        ti.cut = cut;
        ti.blocks = blocks;
        ti.replica_copy = cut == split::whole && tp.rank > 0;
        global += ti.whole_size(tp);
        if (!keep) return std::int64_t{-1};
        total += ti.size();
        tensors.push_back(ti);
        return ti.offset;
    };
    const bool copy = c.tied && held.last && !held.first;  // the tied head's copy of the embedding
    wte = add("wte", {V / t, d}, true, held.first || copy, split::rows);  // vocabulary-parallel
    if (copy) tensors.back().tied_copy = true;
    wpe = add("wpe", {L, d}, true, held.first);
    for (int l = 0; l < c.layers; ++l) {
        const std::string p = "h." + std::to_string(l) + ".";
        const bool keep = l >= held.layer_begin && l < held.layer_end;
        block b{};
        b.begin = keep ? total : -1;
        b.ln1_g = add(p + "ln1.g", {d}, false, keep);
        b.ln1_b = add(p + "ln1.b", {d}, false, keep);
        b.w_qkv = add(p + "attn.w_qkv", {d, 3 * d / t}, true, keep, split::columns, 3);
        b.b_qkv = add(p + "attn.b_qkv", {3 * d / t}, false, keep, split::columns, 3);
        b.w_o = add(p + "attn.w_o", {d / t, d}, true, keep, split::rows);
        b.b_o = add(p + "attn.b_o", {d}, false, keep);
        b.ln2_g = add(p + "ln2.g", {d}, false, keep);
        b.ln2_b = add(p + "ln2.b", {d}, false, keep);
        b.w_fc = add(p + "mlp.w_fc", {d, F / t}, true, keep, split::columns);
        b.b_fc = add(p + "mlp.b_fc", {F / t}, false, keep, split::columns);
        b.w_proj = add(p + "mlp.w_proj", {F / t, d}, true, keep, split::rows);
        b.b_proj = add(p + "mlp.b_proj", {d}, false, keep);
        b.end = keep ? total : -1;
        blocks.push_back(b);
    }
    lnf_g = add("lnf.g", {d}, false, held.last);
    lnf_b = add("lnf.b", {d}, false, held.last);
    head = c.tied ? wte : add("head", {V / t, d}, true, held.last, split::rows);
    if (!held.last) head = -1;
    tied = c.tied;
}

std::int64_t tensor_info::whole_index(std::int64_t i, const tensor_split& tp) const
{
    if (cut == split::whole) return i;
    const std::int64_t cols = shape.back();
    const std::int64_t row = i / cols, col = i % cols;
    if (cut == split::rows) return (tp.rank * shape.front() + row) * cols + col;
    // Columns: block b of the whole (width cols * ranks / blocks) holds rank k's piece at k * w.
    const std::int64_t w = cols / blocks, whole_cols = cols * tp.ranks;
    return row * whole_cols + (col / w) * w * tp.ranks + tp.rank * w + col % w;
}

std::int64_t layout::frozen_end(int frozen) const
{
    if (frozen < 0 || frozen > static_cast<int>(blocks.size()))
        throw std::invalid_argument("gpt: cannot freeze " + std::to_string(frozen) + " layers of " +
                                    std::to_string(blocks.size()));
    if (frozen == 0) return 0;
    if (!whole()) throw std::invalid_argument("gpt: freezing works on the whole model's layout, not a stage's");
    // A tied LM head is the embedding: it freezes with layer 0, and the head reads it frozen.
    return blocks[static_cast<std::size_t>(frozen - 1)].end;
}

template <class T>
parameters<T>::parameters(const config& c) : parameters(c, holding{})
{
}

template <class T>
parameters<T>::parameters(const config& c, const holding& h)
    : cfg(c), lay(c, h), value(static_cast<std::size_t>(lay.total)), grad(static_cast<std::size_t>(lay.total))
{
}

namespace {
std::uint64_t splitmix(std::uint64_t& s)
{
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
double uniform01(std::uint64_t& s) { return (static_cast<double>(splitmix(s) >> 11) + 0.5) * 0x1.0p-53; }
double normal(std::uint64_t& s)
{
    const double u1 = uniform01(s), u2 = uniform01(s);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
} // namespace

template <class T>
void parameters<T>::init(std::uint64_t seed)
{
    std::uint64_t s = seed * 0x2545F4914F6CDD1DULL + 1;
    const double proj_std = 0.02 / std::sqrt(2.0 * std::max(1, cfg.layers));
    // The whole model's draws in its order, so that every stage gets the whole model's values.
    const layout whole(cfg);
    const tensor_split tp = lay.held.tensor;
    std::vector<T> drawn;  // a split tensor's whole values, for this rank's share
    auto mine = lay.tensors.begin();
    for (const auto& t : whole.tensors) {
        const bool held = mine != lay.tensors.end() && mine->global_offset == t.global_offset;
        const tensor_info* here = held ? &*mine : nullptr;
        if (held) ++mine;
        const bool is_gain = t.name.size() >= 2 && t.name.substr(t.name.size() - 2) == ".g";
        const bool is_proj = t.name.find("w_o") != std::string::npos || t.name.find("w_proj") != std::string::npos;
        drawn.resize(static_cast<std::size_t>(t.size()));
        for (std::int64_t i = 0; i < t.size(); ++i)
            drawn[static_cast<std::size_t>(i)] = t.shape.size() == 2 ? static_cast<T>(normal(s) * (is_proj ? proj_std : 0.02))
                                                                     : is_gain ? T(1) : T(0);
        if (here)
            for (std::int64_t i = 0; i < here->size(); ++i)
                value[static_cast<std::size_t>(here->offset + i)] = drawn[static_cast<std::size_t>(here->whole_index(i, tp))];
    }
    zero_grad();
}

template <class T>
void parameters<T>::zero_grad()
{
    std::fill(grad.begin(), grad.end(), T(0));
}

namespace {

[[noreturn]] void refuse(const std::string& what) { throw std::logic_error("gpt::part: " + what); }

} // namespace

// ---- part ----------------------------------------------------------------------------------
template <class T>
struct part<T>::impl {
    struct mb_state {
        std::int64_t rows = 0, row_begin = 0;
        std::int64_t forwarded = 0;  //!< tokens [0, forwarded) went forward
        std::int64_t backward_at = -1;  //!< next backward must end here (-1: none started)
        std::vector<std::vector<T>> k, v, dk, dv;  // per local layer, [rows, seq, d]
    };
    struct layer_saved {
        std::vector<T> x, ln1, mean1, rstd1, qkv, probs, attn, xmid, ln2, mean2, rstd2, fc, act;
        std::vector<T> dout, dfc, dln2, dproj, dqkv, dln1;
    };
    struct unit_saved {
        std::vector<layer_saved> layers;
        std::vector<T> dx0;                                       // first: grad of embedding output
        std::vector<T> xh, xf, meanf, rstdf, dlogits, dxf;        // last: head
        std::vector<T> input;  // under recompute: the unit's input to the part (not the first)
        bool input_done = false;
    };

    const batch* data = nullptr;
    std::int64_t total = 1;
    std::map<int, mb_state> mbs;
    std::map<std::pair<int, int>, unit_saved> units;
    std::vector<T> head_grad;  // tied head on the last part: private accumulator
    bool head_frozen = false;  // a tied head frozen with the embedding: no weight gradient

    // Workspaces. Finished units and microbatches keep their map nodes (with every vector in
    // them), and the activation buffers that come back from a neighbouring stage are kept too;
    // the next ones reuse them, so that the steady state allocates nothing: vectors are resized
    // within their capacity instead of being freed and faulted in again every step.
    using mb_map = std::map<int, mb_state>;
    using unit_map = std::map<std::pair<int, int>, unit_saved>;
    std::vector<typename mb_map::node_type> spare_mbs;
    std::vector<typename unit_map::node_type> spare_units;
    std::vector<std::vector<T>> spare_buffers;  // activations and gradients that came back
    std::vector<T> dattn, attn_scratch;         // backward temporaries
    std::vector<T> partial;  // sequence parallelism: a row-parallel product before its reduce-scatter
    std::vector<std::vector<layer_saved>> spare_layers;  // under recompute: layers' saves not in use
    static constexpr std::size_t max_spare_buffers = 16;

    //! The map entry for `key`, a recycled node when there is one (its value keeps its buffers).
    template <class Map, class Spares>
    static typename Map::iterator reuse(Map& map, Spares& spares, const typename Map::key_type& key)
    {
        if (spares.empty()) return map.try_emplace(key).first;
        auto node = std::move(spares.back());
        spares.pop_back();
        node.key() = key;
        auto r = map.insert(std::move(node));
        if (!r.inserted) spares.push_back(std::move(r.node));  // the key was there: reuse that entry
        return r.position;
    }

    //! Fresh per-microbatch state: K/V caches (only positions already forwarded are ever read)
    //! and zeroed K/V gradient accumulators.
    typename mb_map::iterator new_microbatch(int microbatch, std::int64_t row_begin, std::int64_t row_end,
                                             std::int64_t d, int layers)
    {
        auto it = reuse(mbs, spare_mbs, microbatch);
        auto& st = it->second;
        st.rows = row_end - row_begin;
        st.row_begin = row_begin;
        st.forwarded = 0;
        st.backward_at = -1;
        const std::size_t cache = static_cast<std::size_t>(st.rows * data->seq_len * d);
        for (auto* c : {&st.k, &st.v, &st.dk, &st.dv}) c->resize(static_cast<std::size_t>(layers));
        for (int l = 0; l < layers; ++l) {
            st.k[l].resize(cache);
            st.v[l].resize(cache);
            st.dk[l].assign(cache, T(0));
            st.dv[l].assign(cache, T(0));
        }
        return it;
    }
    void retire(typename mb_map::iterator it) { spare_mbs.push_back(mbs.extract(it)); }
    //! The saved state of a new unit (buffers recycled from a finished one when there is one).
    unit_saved& new_unit(std::pair<int, int> key, int layers)
    {
        auto& us = reuse(units, spare_units, key)->second;
        us.input_done = false;
        take_layers(us, layers);
        return us;
    }
    void retire(typename unit_map::iterator it) { spare_units.push_back(units.extract(it)); }
    //! The unit's per-layer saves: its own, else a spare set (recompute hands them around).
    void take_layers(unit_saved& us, int layers)
    {
        if (us.layers.empty() && !spare_layers.empty()) {
            us.layers = std::move(spare_layers.back());
            spare_layers.pop_back();
        }
        us.layers.resize(static_cast<std::size_t>(layers));
    }
    void give_layers(unit_saved& us)
    {
        spare_layers.push_back(std::move(us.layers));
        us.layers.clear();
    }
    void retire_all()
    {
        while (!mbs.empty()) retire(mbs.begin());
        while (!units.empty()) retire(units.begin());
    }
    //! A buffer of `size` values (contents unspecified), from the spares when possible.
    std::vector<T> take_buffer(std::size_t size)
    {
        std::vector<T> b;
        if (!spare_buffers.empty()) {
            b = std::move(spare_buffers.back());
            spare_buffers.pop_back();
        }
        b.resize(size);
        return b;
    }
    void give_buffer(std::vector<T>&& b)
    {
        if (b.capacity() > 0 && spare_buffers.size() < max_spare_buffers) spare_buffers.push_back(std::move(b));
    }
};

template <class T>
part<T>::part(parameters<T>& params, int layer_begin, int layer_end, bool first, bool last, int threads)
    : impl_(std::make_unique<impl>()), params_(&params), l0_(layer_begin), l1_(layer_end), first_(first),
      last_(last), pool_(std::make_unique<thread_pool>(threads))
{
    if (layer_begin < 0 || layer_end < layer_begin || layer_end > params.cfg.layers)
        refuse("layer range [" + std::to_string(layer_begin) + ", " + std::to_string(layer_end) +
               ") is not inside [0, " + std::to_string(params.cfg.layers) + ")");
    const holding& h = params.lay.held;
    if ((layer_end > layer_begin && (layer_begin < h.layer_begin || layer_end > h.layer_end)) || (first && !h.first) ||
        (last && !h.last))
        refuse("the part (layers [" + std::to_string(layer_begin) + ", " + std::to_string(layer_end) + ")" +
               (first ? ", embeddings" : "") + (last ? ", head" : "") + ") needs parameters its state does not hold " +
               "(layers [" + std::to_string(h.layer_begin) + ", " + std::to_string(h.layer_end) + ")" +
               (h.first ? ", embeddings" : "") + (h.last ? ", head" : "") + ")");
    if (last && params.cfg.tied)
        impl_->head_grad.assign(static_cast<std::size_t>(vocab_share()) * params.cfg.d_model, T(0));
}

template <class T>
part<T>::~part() = default;
template <class T>
part<T>::part(part&&) noexcept = default;
template <class T>
part<T>& part<T>::operator=(part&&) noexcept = default;

template <class T>
void part<T>::begin(const batch* b, std::int64_t total_tokens)
{
    if (!b) refuse("begin() needs a batch");
    if (b->seq_len > params_->cfg.seq_len)
        refuse("batch sequence length " + std::to_string(b->seq_len) + " exceeds the model's " +
               std::to_string(params_->cfg.seq_len) + " positions");
    impl_->data = b;
    impl_->total = total_tokens > 0 ? total_tokens : b->rows * b->seq_len;
    impl_->retire_all();
    loss_ = 0;
}

template <class T>
void part<T>::assume_context(int microbatch, std::int64_t row_begin, std::int64_t row_end, std::int64_t context)
{
    if (!impl_->data) refuse("assume_context() before begin()");
    if (row_begin < 0 || row_end > impl_->data->rows || row_end <= row_begin || context < 0 ||
        context >= impl_->data->seq_len)
        refuse("assume_context: rows or context do not fit the batch");
    auto it = impl_->new_microbatch(microbatch, row_begin, row_end, attention_width(), l1_ - l0_);
    it->second.forwarded = context;
}

template <class T>
std::vector<tpipe::element_range> part<T>::gradient_ranges() const
{
    const layout& lay = params_->lay;
    const std::int64_t d = params_->cfg.d_model;
    std::vector<tpipe::element_range> out;
    auto range = [&](std::int64_t begin, std::int64_t end) {
        if (end > begin) out.push_back({static_cast<std::size_t>(begin), static_cast<std::size_t>(end - begin)});
    };
    if (first_) {
        range(lay.wte, lay.wte + vocab_share() * d);
        range(lay.wpe, lay.wpe + params_->cfg.seq_len * d);
    }
    if (l1_ > l0_) range(lay.blocks[l0_].begin, lay.blocks[l1_ - 1].end);
    if (last_) {
        range(lay.lnf_g, lay.lnf_b + d);
        if (!impl_->head_frozen) range(lay.head, lay.head + vocab_share() * d);
    }
    return out;
}

template <class T>
std::vector<std::span<T>> part<T>::gradients()
{
    std::vector<std::span<T>> out;
    for (const auto& r : gradient_ranges()) out.emplace_back(params_->grad.data() + r.begin, r.size);
    if (!impl_->head_grad.empty()) out.back() = std::span<T>(impl_->head_grad);  // the head: its accumulator
    return out;
}

template <class T>
void part<T>::freeze_head()
{
    if (!last_ || !params_->cfg.tied) refuse("only a tied LM head freezes (with the embedding), on the last part");
    impl_->head_frozen = true;
    impl_->head_grad = {};
}

template <class T>
void part<T>::flush_grad()
{
    if (!impl_->head_grad.empty()) {
        T* g = params_->grad.data() + params_->lay.head;
        for (std::size_t i = 0; i < impl_->head_grad.size(); ++i) g[i] += impl_->head_grad[i];
        std::fill(impl_->head_grad.begin(), impl_->head_grad.end(), T(0));
    }
    if (!sequence_parallel()) return;
    // Each rank's LayerNorm gradients cover its own positions: one sum of all of them, packed.
    const std::int64_t d = params_->cfg.d_model;
    std::vector<std::int64_t> at;
    for (int l = l0_; l < l1_; ++l)
        for (const auto& bl = params_->lay.blocks[static_cast<std::size_t>(l)]; auto o : {bl.ln1_g, bl.ln1_b, bl.ln2_g, bl.ln2_b})
            at.push_back(o);
    if (last_) at.insert(at.end(), {params_->lay.lnf_g, params_->lay.lnf_b});
    if (at.empty()) return;
    std::vector<T> packed(at.size() * static_cast<std::size_t>(d));
    T* G = params_->grad.data();
    for (std::size_t i = 0; i < at.size(); ++i) std::copy_n(G + at[i], d, packed.begin() + static_cast<std::ptrdiff_t>(i) * d);
    sum_over_tensor_group(packed);
    for (std::size_t i = 0; i < at.size(); ++i) std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(i) * d, d, G + at[i]);
}

template <class T>
sequence_share part<T>::positions(const tpipe::unit& u) const
{
    const tensor_split& tp = params_->lay.held.tensor;
    const std::int64_t n = u.rows() * u.tokens();
    return sequence_parallel() ? sequence_share::of(n, tp.ranks, tp.rank) : sequence_share{0, n, n};
}

template <class T>
std::vector<T>& part<T>::partial_for(std::vector<T>& out, std::int64_t size)
{
    std::vector<T>& p = sequence_parallel() ? impl_->partial : out;
    p.resize(static_cast<std::size_t>(size));
    return p;
}

template <class T>
void part<T>::reduce_positions(const tpipe::unit& u, std::vector<T>& partial, std::vector<T>& out)
{
    if (!sequence_parallel()) return sum_over_tensor_group(out);  // partial is out
    const std::int64_t d = params_->cfg.d_model;
    const sequence_share mine = positions(u);
    partial.resize(static_cast<std::size_t>(mine.per_rank * params_->lay.held.tensor.ranks * d));  // the padding: zeros
    reduce_scatter_(std::span<T>(partial));
    out.assign(partial.begin() + mine.begin * d, partial.begin() + (mine.begin + mine.count) * d);
}

template <class T>
void part<T>::gather_positions(const tpipe::unit& u, const T* mine, std::vector<T>& whole)
{
    const std::int64_t d = params_->cfg.d_model;
    const sequence_share sh = positions(u);
    if (!sequence_parallel()) return whole.assign(mine, mine + sh.count * d);  // every position is here
    whole.resize(static_cast<std::size_t>(sh.per_rank * params_->lay.held.tensor.ranks * d));
    std::copy_n(mine, sh.count * d, whole.begin() + sh.begin * d);
    all_gather_(std::span<T>(whole));
    whole.resize(static_cast<std::size_t>(u.rows() * u.tokens() * d));
}

template <class T>
void part<T>::norm_positions(const tpipe::unit& u, const T* x, std::int64_t g, std::int64_t b, std::vector<T>& whole,
                             std::vector<T>& mean, std::vector<T>& rstd)
{
    const std::int64_t d = params_->cfg.d_model, n = positions(u).count;
    const T* W = params_->value.data();
    mean.resize(static_cast<std::size_t>(n));
    rstd.resize(static_cast<std::size_t>(n));
    // Under sequence parallelism the rank's positions are normalised apart, then gathered.
    std::vector<T> mine = sequence_parallel() ? impl_->take_buffer(0) : std::vector<T>{};
    std::vector<T>& y = sequence_parallel() ? mine : whole;
    y.resize(static_cast<std::size_t>(n * d));
    layernorm_forward(*pool_, n, d, x, W + g, W + b, params_->cfg.ln_eps, y.data(), mean.data(), rstd.data());
    if (!sequence_parallel()) return;
    gather_positions(u, mine.data(), whole);
    impl_->give_buffer(std::move(mine));
}

template <class T>
std::vector<T> part<T>::embed(const tpipe::unit& u)
{
    impl& I = *impl_;
    const config& cfg = params_->cfg;
    const batch& B = *I.data;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, d = cfg.d_model, Lb = B.seq_len;
    const T* W = params_->value.data();
    std::vector<T> x = I.take_buffer(0);
    std::vector<T>& whole = partial_for(x, rows * s * d);
    const T* wte = W + params_->lay.wte;
    const T* wpe = W + params_->lay.wpe;
    const std::int64_t v0 = vocab_begin(), v1 = v0 + vocab_share();
    const bool split = params_->lay.held.tensor.ranks > 1;
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < s; ++i) {
            const std::int32_t tok = B.inputs[static_cast<std::size_t>((u.row_begin + r) * Lb + t0 + i)];
            if (tok < 0 || tok >= cfg.vocab) refuse("token id " + std::to_string(tok) + " outside the vocabulary");
            T* xi = whole.data() + (r * s + i) * d;
            const bool mine = tok >= v0 && tok < v1;
            for (std::int64_t c = 0; c < d; ++c)
                xi[c] = split ? (mine ? wte[(tok - v0) * d + c] : T(0)) : wte[tok * d + c] + wpe[(t0 + i) * d + c];
        }
    if (split) {  // vocabulary-parallel: one rank holds the token's row; the sum adds zeros to it, exactly
        reduce_positions(u, whole, x);
        const sequence_share mine = positions(u);  // row-major positions: (row, token) = divmod(p, s)
        for (std::int64_t p = mine.begin; p < mine.begin + mine.count; ++p)
            for (std::int64_t c = 0; c < d; ++c) x[static_cast<std::size_t>((p - mine.begin) * d + c)] += wpe[(t0 + p % s) * d + c];
    }
    return x;
}

template <class T>
void part<T>::forward_blocks(const tpipe::unit& u, std::vector<T>& x)
{
    impl& I = *impl_;
    const config& cfg = params_->cfg;
    const batch& B = *I.data;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    // This tensor rank's share (the whole at 1 rank): heads H, attention width dl, MLP width F.
    const std::int64_t tr = params_->lay.held.tensor.ranks;
    const std::int64_t d = cfg.d_model, Lb = B.seq_len, H = cfg.heads / tr, dh = cfg.d_head(), F = cfg.d_ff() / tr;
    const std::int64_t dl = H * dh, n = rows * s, nl = positions(u).count;  // nl: the LayerNorms' positions here
    auto& mb = I.mbs.at(u.microbatch);
    auto& us = I.units.at({u.microbatch, u.slice});
    const T* W = params_->value.data();
    thread_pool& pool = *pool_;
    const attention_shape shape{rows, H, dh, s, t0, Lb};
    for (int l = l0_; l < l1_; ++l) {
        const auto& bl = params_->lay.blocks[static_cast<std::size_t>(l)];
        auto& sv = us.layers[static_cast<std::size_t>(l - l0_)];
        auto& K = mb.k[static_cast<std::size_t>(l - l0_)];
        auto& Vc = mb.v[static_cast<std::size_t>(l - l0_)];
        norm_positions(u, x.data(), bl.ln1_g, bl.ln1_b, sv.ln1, sv.mean1, sv.rstd1);
        sv.qkv.resize(static_cast<std::size_t>(n * 3 * dl));
        gemm<T>(pool, n, 3 * dl, d, {sv.ln1.data(), d, 1}, {W + bl.w_qkv, 3 * dl, 1}, sv.qkv.data(), 3 * dl, false);
        add_bias(pool, n, 3 * dl, W + bl.b_qkv, sv.qkv.data());
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t i = 0; i < s; ++i) {
                const T* src = sv.qkv.data() + (r * s + i) * 3 * dl;
                std::copy(src + dl, src + 2 * dl, K.data() + (r * Lb + t0 + i) * dl);
                std::copy(src + 2 * dl, src + 3 * dl, Vc.data() + (r * Lb + t0 + i) * dl);
            }
        sv.probs.resize(static_cast<std::size_t>(rows * H * s * t1));
        sv.attn.resize(static_cast<std::size_t>(n * dl));
        attention_forward(pool, shape, sv.qkv.data(), 3 * dl, K.data(), Vc.data(), sv.probs.data(), sv.attn.data());
        std::swap(sv.x, x);  // keep the block input; x now holds a recycled buffer
        std::vector<T>& heads = partial_for(sv.xmid, n * d);
        gemm<T>(pool, n, d, dl, {sv.attn.data(), dl, 1}, {W + bl.w_o, d, 1}, heads.data(), d, false);
        reduce_positions(u, heads, sv.xmid);  // row-parallel: the heads' partial products
        add_bias_residual(pool, nl, d, W + bl.b_o, sv.x.data(), sv.xmid.data());
        norm_positions(u, sv.xmid.data(), bl.ln2_g, bl.ln2_b, sv.ln2, sv.mean2, sv.rstd2);
        sv.fc.resize(static_cast<std::size_t>(n * F));
        gemm<T>(pool, n, F, d, {sv.ln2.data(), d, 1}, {W + bl.w_fc, F, 1}, sv.fc.data(), F, false);
        sv.act.resize(sv.fc.size());
        bias_gelu_forward(pool, n, F, W + bl.b_fc, sv.fc.data(), sv.act.data());
        std::vector<T>& mlp = partial_for(x, n * d);
        gemm<T>(pool, n, d, F, {sv.act.data(), F, 1}, {W + bl.w_proj, d, 1}, mlp.data(), d, false);
        reduce_positions(u, mlp, x);
        add_bias_residual(pool, nl, d, W + bl.b_proj, sv.xmid.data(), x.data());
    }
}

template <class T>
void part<T>::sum_over_tensor_group(std::vector<T>& v)
{
    if (params_->lay.held.tensor.ranks == 1) return;
    if (!tensor_sum_) refuse("a tensor-parallel part needs its tensor group's sum (set_tensor_sum)");
    tensor_sum_(std::span<T>(v));
}

template <class T>
double part<T>::vocab_parallel_cross_entropy(const tpipe::unit& u, T scale, std::vector<T>& logits)
{
    // Megatron's vocabulary-parallel cross-entropy: this rank holds the logits of tokens
    // [v0, v0 + V) of every position; the full logits are never gathered. Three sums over the
    // tensor group: every rank's row maxima (each rank writes its own block of t blocks, the
    // others add zeros: an exact gather), then each row's sum of exponentials and target logit.
    const batch& B = *impl_->data;
    const std::int64_t rows = u.rows(), s = u.tokens(), n = rows * s, V = vocab_share(), v0 = vocab_begin();
    const int t = params_->lay.held.tensor.ranks, k = params_->lay.held.tensor.rank;
    std::vector<std::int32_t> target(static_cast<std::size_t>(n));
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t i = 0; i < s; ++i) {
            const std::int32_t tgt = B.targets[static_cast<std::size_t>((u.row_begin + r) * B.seq_len + u.token_begin + i)];
            if (tgt < 0 || tgt >= params_->cfg.vocab)
                refuse("target id " + std::to_string(tgt) + " outside the vocabulary [0, " + std::to_string(params_->cfg.vocab) + ")");
            target[static_cast<std::size_t>(r * s + i)] = tgt;
        }
    std::vector<T> maxima(static_cast<std::size_t>(n * t), T(0));
    for (std::int64_t i = 0; i < n; ++i) {
        const T* z = logits.data() + i * V;
        maxima[static_cast<std::size_t>(k * n + i)] = *std::max_element(z, z + V);
    }
    sum_over_tensor_group(maxima);
    std::vector<T> sums(static_cast<std::size_t>(2 * n), T(0));  // [sum of exp(z - max) | target's z - max]
    for (std::int64_t i = 0; i < n; ++i) {
        T mx = maxima[static_cast<std::size_t>(i)];
        for (int j = 1; j < t; ++j) mx = std::max(mx, maxima[static_cast<std::size_t>(j * n + i)]);
        T* z = logits.data() + i * V;
        const std::int64_t tgt = target[static_cast<std::size_t>(i)] - v0;
        if (tgt >= 0 && tgt < V) sums[static_cast<std::size_t>(n + i)] = z[tgt] - mx;
        T sum = 0;
        for (std::int64_t c = 0; c < V; ++c) sum += (z[c] = std::exp(z[c] - mx));
        sums[static_cast<std::size_t>(i)] = sum;
    }
    sum_over_tensor_group(sums);
    double loss = 0;  // in row order, as softmax_cross_entropy adds
    for (std::int64_t i = 0; i < n; ++i) {
        const T sum = sums[static_cast<std::size_t>(i)];
        loss += static_cast<double>(std::log(sum) - sums[static_cast<std::size_t>(n + i)]);
        T* z = logits.data() + i * V;
        const T c = scale / sum;
        for (std::int64_t j = 0; j < V; ++j) z[j] *= c;
        const std::int64_t tgt = target[static_cast<std::size_t>(i)] - v0;
        if (tgt >= 0 && tgt < V) z[tgt] -= scale;
    }
    return loss;
}

template <class T>
activation<T> part<T>::forward(const tpipe::unit& u, activation<T> in)
{
    impl& I = *impl_;
    const config& cfg = params_->cfg;
    if (!I.data) refuse("forward() before begin()");
    const batch& B = *I.data;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    const std::int64_t d = cfg.d_model, Lb = B.seq_len;
    const std::int64_t n = rows * s, nl = positions(u).count;
    if (const std::string why = unit_outside(u, B); !why.empty()) refuse(why);
    // Per-microbatch state: created by the first slice, which must start at token 0.
    auto it = I.mbs.find(u.microbatch);
    if (t0 == 0) {
        if (it != I.mbs.end()) refuse("microbatch " + std::to_string(u.microbatch) + " forwarded twice");
        it = I.new_microbatch(u.microbatch, u.row_begin, u.row_end, attention_width(), l1_ - l0_);
    } else if (it == I.mbs.end() || it->second.forwarded != t0 || it->second.row_begin != u.row_begin ||
               it->second.rows != rows) {
        refuse("forward of microbatch " + std::to_string(u.microbatch) + " tokens [" + std::to_string(t0) + "," +
               std::to_string(t1) + ") out of causal order (its earlier tokens must go first, same rows)");
    }
    auto& mb = it->second;
    mb.forwarded = t1;
    auto& us = I.new_unit({u.microbatch, u.slice}, l1_ - l0_);

    const T* W = params_->value.data();
    thread_pool& pool = *pool_;
    std::vector<T> x;
    if (first_) {
        x = embed(u);
    } else {
        if (in.rows != rows || in.tokens != s || static_cast<std::int64_t>(in.data.size()) != nl * d)
            refuse("forward input has shape [" + std::to_string(in.rows) + "," + std::to_string(in.tokens) + "] x " +
                   std::to_string(in.data.size()) + " values; the unit needs [" + std::to_string(rows) + "," +
                   std::to_string(s) + "," + std::to_string(d) + "]" +
                   (nl != n ? ", of which this tensor rank's " + std::to_string(nl) + " positions (sequence parallelism)" : ""));
        x = std::move(in.data);
        if (recompute_) us.input.assign(x.begin(), x.end());  // all the unit keeps until its backward
    }
    forward_blocks(u, x);
    if (recompute_) I.give_layers(us);  // recomputed in the backward

    if (!last_) return activation<T>{rows, s, std::move(x)};

    // Final LayerNorm, head and softmax cross-entropy (partial sum / total tokens).
    const std::int64_t V = vocab_share();
    const T* Wh = W + params_->lay.head;
    norm_positions(u, x.data(), params_->lay.lnf_g, params_->lay.lnf_b, us.xf, us.meanf, us.rstdf);
    std::swap(us.xh, x);
    I.give_buffer(std::move(x));
    us.dlogits.resize(static_cast<std::size_t>(n * V));
    gemm<T>(pool, n, V, d, {us.xf.data(), d, 1}, {Wh, 1, d}, us.dlogits.data(), V, false);
    const T inv_total = T(1) / T(I.total);
    double loss = 0;
    if (params_->lay.held.tensor.ranks > 1) {
        loss = vocab_parallel_cross_entropy(u, inv_total, us.dlogits);
    } else {
        for (std::int64_t r = 0; r < rows; ++r)
            loss += softmax_cross_entropy(pool, s, V, B.targets.data() + (u.row_begin + r) * Lb + t0, inv_total,
                                          us.dlogits.data() + r * s * V);
    }
    loss_ += loss / static_cast<double>(I.total);
    return activation<T>{rows, s, {}};
}

template <class T>
activation<T> part<T>::backward_input(const tpipe::unit& u, activation<T> grad_out)
{
    impl& I = *impl_;
    const config& cfg = params_->cfg;
    const batch& B = *I.data;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    const std::int64_t tr = params_->lay.held.tensor.ranks;  // this tensor rank's share, as in forward_blocks
    const std::int64_t d = cfg.d_model, Lb = B.seq_len, H = cfg.heads / tr, dh = cfg.d_head(), F = cfg.d_ff() / tr;
    const std::int64_t dl = H * dh, n = rows * s, nl = positions(u).count;  // nl: the LayerNorms' positions here
    auto uit = I.units.find({u.microbatch, u.slice});
    auto mit = I.mbs.find(u.microbatch);
    if (uit == I.units.end() || mit == I.mbs.end() || uit->second.input_done)
        refuse("backward of microbatch " + std::to_string(u.microbatch) + " slice " + std::to_string(u.slice) +
               " without a matching forward");
    auto& mb = mit->second;
    const std::int64_t expect_end = mb.backward_at < 0 ? mb.forwarded : mb.backward_at;
    if (t1 != expect_end)
        refuse("backward of microbatch " + std::to_string(u.microbatch) + " tokens [" + std::to_string(t0) + "," +
               std::to_string(t1) + ") out of reverse token order (expected a slice ending at " +
               std::to_string(expect_end) + ")");
    mb.backward_at = t0;
    auto& us = uit->second;
    us.input_done = true;
    const T* W = params_->value.data();
    thread_pool& pool = *pool_;
    if (recompute_) {
        // The part's forward again from the kept input: the same inputs, weights and kernels, so
        // bitwise the same saves (and the same K/V of the unit's tokens, written again).
        I.take_layers(us, l1_ - l0_);
        std::vector<T> x = first_ ? embed(u) : I.take_buffer(us.input.size());
        if (!first_) std::copy(us.input.begin(), us.input.end(), x.begin());
        forward_blocks(u, x);
        I.give_buffer(std::move(x));
    }

    std::vector<T> dx;
    if (last_) {
        const T* Wh = W + params_->lay.head;
        std::vector<T>& dxf = partial_for(us.dxf, n * d);
        gemm<T>(pool, n, d, vocab_share(), {us.dlogits.data(), vocab_share(), 1}, {Wh, d, 1}, dxf.data(), d, false);
        reduce_positions(u, dxf, us.dxf);  // vocabulary-parallel: every rank's share of the logits
        dx = I.take_buffer(static_cast<std::size_t>(nl * d));
        std::fill(dx.begin(), dx.end(), T(0));
        layernorm_backward(pool, nl, d, us.dxf.data(), us.xh.data(), us.meanf.data(), us.rstdf.data(),
                           W + params_->lay.lnf_g, dx.data());
    } else {
        if (grad_out.rows != rows || grad_out.tokens != s || static_cast<std::int64_t>(grad_out.data.size()) != nl * d)
            refuse("backward gradient has the wrong shape for the unit");
        dx = std::move(grad_out.data);
    }

    const attention_shape shape{rows, H, dh, s, t0, Lb};
    for (int l = l1_ - 1; l >= l0_; --l) {
        const auto& bl = params_->lay.blocks[static_cast<std::size_t>(l)];
        auto& sv = us.layers[static_cast<std::size_t>(l - l0_)];
        auto& K = mb.k[static_cast<std::size_t>(l - l0_)];
        auto& Vc = mb.v[static_cast<std::size_t>(l - l0_)];
        auto& dK = mb.dk[static_cast<std::size_t>(l - l0_)];
        auto& dV = mb.dv[static_cast<std::size_t>(l - l0_)];
        // MLP
        gather_positions(u, dx.data(), sv.dout);
        sv.dfc.resize(static_cast<std::size_t>(n * F));
        gemm<T>(pool, n, F, d, {sv.dout.data(), d, 1}, {W + bl.w_proj, 1, d}, sv.dfc.data(), F, false);
        gelu_backward(pool, n * F, sv.fc.data(), sv.dfc.data());
        std::vector<T>& dln2 = partial_for(sv.dln2, n * d);
        gemm<T>(pool, n, d, F, {sv.dfc.data(), F, 1}, {W + bl.w_fc, 1, F}, dln2.data(), d, false);
        reduce_positions(u, dln2, sv.dln2);  // column-parallel: the input's gradient from every rank's columns
        layernorm_backward(pool, nl, d, sv.dln2.data(), sv.xmid.data(), sv.mean2.data(), sv.rstd2.data(),
                           W + bl.ln2_g, dx.data());
        // Attention
        gather_positions(u, dx.data(), sv.dproj);
        I.dattn.resize(static_cast<std::size_t>(n * dl));
        gemm<T>(pool, n, dl, d, {sv.dproj.data(), d, 1}, {W + bl.w_o, 1, d}, I.dattn.data(), dl, false);
        sv.dqkv.resize(static_cast<std::size_t>(n * 3 * dl));
        attention_backward(pool, shape, sv.qkv.data(), 3 * dl, K.data(), Vc.data(), sv.probs.data(), I.dattn.data(),
                           sv.dqkv.data(), dK.data(), dV.data(), I.attn_scratch);
        // The slice's own K/V gradient is now complete: later slices (already done) plus itself.
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t i = 0; i < s; ++i) {
                T* dst = sv.dqkv.data() + (r * s + i) * 3 * dl;
                std::copy_n(dK.data() + (r * Lb + t0 + i) * dl, dl, dst + dl);
                std::copy_n(dV.data() + (r * Lb + t0 + i) * dl, dl, dst + 2 * dl);
            }
        std::vector<T>& dln1 = partial_for(sv.dln1, n * d);
        gemm<T>(pool, n, d, 3 * dl, {sv.dqkv.data(), 3 * dl, 1}, {W + bl.w_qkv, 1, 3 * dl}, dln1.data(), d, false);
        reduce_positions(u, dln1, sv.dln1);
        layernorm_backward(pool, nl, d, sv.dln1.data(), sv.x.data(), sv.mean1.data(), sv.rstd1.data(), W + bl.ln1_g,
                           dx.data());
    }
    if (t0 == 0) I.retire(mit);  // every slice of the microbatch is through: its caches are done

    if (first_) {  // the embedding's gradient: every position, for the vocabulary-parallel rows
        if (sequence_parallel()) gather_positions(u, dx.data(), us.dx0);
        else std::swap(us.dx0, dx);
        I.give_buffer(std::move(dx));
        return activation<T>{rows, s, {}};
    }
    return activation<T>{rows, s, std::move(dx)};
}

template <class T>
void part<T>::backward_weight(const tpipe::unit& u)
{
    impl& I = *impl_;
    const config& cfg = params_->cfg;
    auto uit = I.units.find({u.microbatch, u.slice});
    if (uit == I.units.end() || !uit->second.input_done)
        refuse("backward_weight of microbatch " + std::to_string(u.microbatch) + " slice " +
               std::to_string(u.slice) + " before its backward_input");
    auto& us = uit->second;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin;
    const std::int64_t d = cfg.d_model, F = cfg.d_ff() / params_->lay.held.tensor.ranks, dl = attention_width(), n = rows * s;
    const std::int64_t nl = positions(u).count;  // the LayerNorms' positions here
    T* G = params_->grad.data();
    thread_pool& pool = *pool_;

    if (last_) {
        const std::int64_t V = vocab_share();
        T* gh = impl_->head_grad.empty() ? G + params_->lay.head : impl_->head_grad.data();
        if (!impl_->head_frozen) gemm<T>(pool, V, d, n, {us.dlogits.data(), 1, V}, {us.xf.data(), d, 1}, gh, d, true);
        layernorm_param_grad(nl, d, us.dxf.data(), us.xh.data(), us.meanf.data(), us.rstdf.data(),
                             G + params_->lay.lnf_g, G + params_->lay.lnf_b);
    }
    for (int l = l1_ - 1; l >= l0_; --l) {
        const auto& bl = params_->lay.blocks[static_cast<std::size_t>(l)];
        auto& sv = us.layers[static_cast<std::size_t>(l - l0_)];
        gemm<T>(pool, F, d, n, {sv.act.data(), 1, F}, {sv.dout.data(), d, 1}, G + bl.w_proj, d, true);
        col_sum(n, d, sv.dout.data(), G + bl.b_proj);
        gemm<T>(pool, d, F, n, {sv.ln2.data(), 1, d}, {sv.dfc.data(), F, 1}, G + bl.w_fc, F, true);
        col_sum(n, F, sv.dfc.data(), G + bl.b_fc);
        layernorm_param_grad(nl, d, sv.dln2.data(), sv.xmid.data(), sv.mean2.data(), sv.rstd2.data(), G + bl.ln2_g,
                             G + bl.ln2_b);
        gemm<T>(pool, dl, d, n, {sv.attn.data(), 1, dl}, {sv.dproj.data(), d, 1}, G + bl.w_o, d, true);
        col_sum(n, d, sv.dproj.data(), G + bl.b_o);
        gemm<T>(pool, d, 3 * dl, n, {sv.ln1.data(), 1, d}, {sv.dqkv.data(), 3 * dl, 1}, G + bl.w_qkv, 3 * dl, true);
        col_sum(n, 3 * dl, sv.dqkv.data(), G + bl.b_qkv);
        layernorm_param_grad(nl, d, sv.dln1.data(), sv.x.data(), sv.mean1.data(), sv.rstd1.data(), G + bl.ln1_g,
                             G + bl.ln1_b);
    }
    if (first_) {
        const batch& B = *I.data;
        const std::int64_t Lb = B.seq_len;
        T* gte = G + params_->lay.wte;
        T* gpe = G + params_->lay.wpe;
        const std::int64_t v0 = vocab_begin(), v1 = v0 + vocab_share();  // the embedding rows held here
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t i = 0; i < s; ++i) {
                const std::int32_t tok = B.inputs[static_cast<std::size_t>((u.row_begin + r) * Lb + t0 + i)];
                const T* g = us.dx0.data() + (r * s + i) * d;
                const bool mine = tok >= v0 && tok < v1;
                for (std::int64_t c = 0; c < d; ++c) {
                    if (mine) gte[(tok - v0) * d + c] += g[c];
                    gpe[(t0 + i) * d + c] += g[c];
                }
            }
    }
    if (recompute_) I.give_layers(us);
    I.retire(uit);
}

template <class T>
activation<T> part<T>::backward(const tpipe::unit& u, activation<T> grad_out)
{
    auto r = backward_input(u, std::move(grad_out));
    backward_weight(u);
    return r;
}

template <class T>
double full_step(parameters<T>& params, const batch& b, int threads)
{
    part<T> p(params, 0, params.cfg.layers, true, true, threads);
    params.zero_grad();
    p.begin(&b);
    const tpipe::unit u{0, 0, 0, b.rows, 0, b.seq_len};
    p.forward(u, {});
    p.backward(u, {});
    p.flush_grad();
    return p.loss();
}

template <class T>
double run_in_order(const std::vector<part<T>*>& parts, const tpipe::scheme& units, const batch& b)
{
    if (parts.empty()) throw std::invalid_argument("run_in_order: no parts");
    parts.front()->params().zero_grad();
    for (auto* p : parts) p->begin(&b);
    for (int i = 0; i < units.units(); ++i) {
        const auto u = units.at(i);
        activation<T> x;
        for (auto* p : parts) x = p->forward(u, std::move(x));
    }
    for (int i = units.units() - 1; i >= 0; --i) {
        const auto u = units.at(i);
        activation<T> g;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) g = (*it)->backward(u, std::move(g));
    }
    for (auto* p : parts) p->flush_grad();
    return parts.back()->loss();
}

// ---- AdamW ---------------------------------------------------------------------------------
template <class T>
adamw<T>::adamw(const parameters<T>& p, adamw_options o)
    : o_(o), size_(p.size()), owned_{{0, static_cast<std::size_t>(p.size())}}
{
    for (const auto& t : p.lay.tensors)
        if (t.decay) decayed_.push_back({static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size())});
}

template <class T>
void adamw<T>::allocate()
{
    // At first use, for the owned elements only: a sharded optimizer never holds (nor touches)
    // the whole stage's moments, not even before shard().
    if (allocated_) return;
    std::size_t n = 0;
    for (const auto& r : owned_) n += r.size;
    m_.assign(n, T(0));
    v_.assign(n, T(0));
    decay_.assign(n, 0);
    std::size_t at = 0;
    for (const auto& r : owned_) {
        for (const auto& d : decayed_) {
            const std::size_t b = std::max(r.begin, d.begin), e = std::min(r.begin + r.size, d.begin + d.size);
            if (e > b) std::fill_n(decay_.begin() + static_cast<std::ptrdiff_t>(at + b - r.begin), e - b, 1);
        }
        at += r.size;
    }
    allocated_ = true;
}

template <class T>
void adamw<T>::freeze(std::int64_t end)
{
    if (owned_.size() != 1 || owned_.front().begin != static_cast<std::size_t>(frozen_))
        throw std::logic_error("adamw::freeze: a sharded optimizer does not freeze");
    if (end < frozen_ || end > size_)
        throw std::invalid_argument("adamw::freeze(" + std::to_string(end) + "): the frozen range [0, " +
                                    std::to_string(frozen_) + ") only grows, up to the " + std::to_string(size_) +
                                    " parameters");
    if (allocated_) {
        const auto drop = static_cast<std::ptrdiff_t>(end - frozen_);
        m_.erase(m_.begin(), m_.begin() + drop);
        v_.erase(v_.begin(), v_.begin() + drop);
        decay_.erase(decay_.begin(), decay_.begin() + drop);
        m_.shrink_to_fit();
        v_.shrink_to_fit();
        decay_.shrink_to_fit();
    }
    frozen_ = end;
    owned_ = {{static_cast<std::size_t>(end), static_cast<std::size_t>(size_ - end)}};
}

template <class T>
void adamw<T>::shard(std::vector<tpipe::element_range> owned)
{
    if (t_ != 0 || frozen_ != 0)
        throw std::logic_error("adamw::shard: shard a fresh optimizer (it has stepped or frozen)");
    std::sort(owned.begin(), owned.end(), [](auto a, auto b) { return a.begin < b.begin; });
    std::vector<tpipe::element_range> merged;
    for (const auto& r : owned) {
        if (r.begin + r.size > static_cast<std::size_t>(size_))
            throw std::invalid_argument("adamw::shard: elements [" + std::to_string(r.begin) + ", " +
                                        std::to_string(r.begin + r.size) + ") lie outside the " +
                                        std::to_string(size_) + " parameters");
        if (r.size == 0) continue;
        if (!merged.empty() && r.begin <= merged.back().begin + merged.back().size) {
            auto& m = merged.back();
            m.size = std::max(m.begin + m.size, r.begin + r.size) - m.begin;
        } else {
            merged.push_back(r);
        }
    }
    owned_ = std::move(merged);
    allocated_ = false;  // fresh: the moments are zeros, allocated for the shard at first use
    m_ = {};
    v_ = {};
    decay_ = {};
}

template <class T>
typename adamw<T>::square_sum adamw<T>::squares(const parameters<T>& p) const
{
    square_sum out;
    squares_into(p, out);
    return out;
}

template <class T>
void adamw<T>::squares_into(const parameters<T>& p, square_sum& out) const
{
    // Only the active parameters [frozen_, size): frozen gradients are zero (never written), so
    // leaving them out changes nothing. A tied copy is counted once, by the embedding's holder; a
    // tensor every tensor rank holds whole, once, by tensor rank 0 (the split ones by each rank).
    out.clear();
    each_piece(p, [&](const tensor_info& t, std::int64_t first, std::size_t count, std::size_t) {
        if (!t.tied_copy && !t.replica_copy) out.add(std::span<const T>(p.grad.data() + t.offset + first, count));
    });
}

template <class T>
void adamw<T>::step(parameters<T>& p)
{
    squares_into(p, scratch_);  // a member: the steady state allocates nothing
    step(p, scratch_);
}

template <class T>
void adamw<T>::step(parameters<T>& p, const square_sum& all_squares)
{
    update(p, std::sqrt(all_squares.value()));
}

template <class T>
void adamw<T>::update(parameters<T>& p, double norm)
{
    ++t_;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    norm_ = norm;
    allocate();
    const double clip = o_.max_grad_norm > 0 && norm_ > o_.max_grad_norm ? o_.max_grad_norm / norm_ : 1.0;
    const adamw_coefficients c{o_.lr, o_.beta1, o_.beta2, o_.eps, o_.weight_decay, clip, o_.lr / bc1,
                               1.0 / std::sqrt(bc2)};
    std::size_t at = 0;  // the owned pieces' moments, one after another
    for (const auto& r : owned_) {
        adamw_update(static_cast<std::int64_t>(r.size), c, p.grad.data() + r.begin, decay_.data() + at,
                     p.value.data() + r.begin, m_.data() + at, v_.data() + at);
        at += r.size;
    }
}

// ---- data ----------------------------------------------------------------------------------
batch sample_batch(const std::string& text, std::int64_t rows, std::int64_t seq_len, std::uint64_t& rng_state)
{
    if (static_cast<std::int64_t>(text.size()) < seq_len + 1)
        throw std::invalid_argument("the text has " + std::to_string(text.size()) + " bytes; need at least seq_len+1 = " +
                                    std::to_string(seq_len + 1));
    batch b;
    b.rows = rows;
    b.seq_len = seq_len;
    b.inputs.resize(static_cast<std::size_t>(rows * seq_len));
    b.targets.resize(b.inputs.size());
    const std::uint64_t span = text.size() - static_cast<std::uint64_t>(seq_len);
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::uint64_t start = splitmix(rng_state) % span;
        for (std::int64_t t = 0; t < seq_len; ++t) {
            b.inputs[static_cast<std::size_t>(r * seq_len + t)] = static_cast<unsigned char>(text[start + t]);
            b.targets[static_cast<std::size_t>(r * seq_len + t)] = static_cast<unsigned char>(text[start + t + 1]);
        }
    }
    return b;
}

template struct parameters<float>;
template struct parameters<double>;
template class part<float>;
template class part<double>;
template double full_step<float>(parameters<float>&, const batch&, int);
template double full_step<double>(parameters<double>&, const batch&, int);
template double run_in_order<float>(const std::vector<part<float>*>&, const tpipe::scheme&, const batch&);
template double run_in_order<double>(const std::vector<part<double>*>&, const tpipe::scheme&, const batch&);
template class adamw<float>;
template class adamw<double>;

} // namespace gpt
