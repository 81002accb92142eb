#pragma once
// The CUDA GPT's model, written once over a backend B: gpt::part's semantics
// (apps/gpt/include/gpt/model.hpp) with parameters, gradients, activations and K/V caches in
// B's buffers, float32.
//
// The same parameter layout (gpt::layout, one flat vector), the same unit of work (a tpipe::unit:
// rows of a microbatch and a token slice of them), the same per-microbatch K/V cache (a slice
// attends to the cached keys of earlier tokens of its rows, causally), backward in reverse token
// order with K/V gradient accumulators, split backward (backward_input / backward_weight), tied or
// untied head, and the loss as a sum of per-unit partial sums divided by B*L. Matrix products
// through B's GEMMs, the rest through the kernels of gpt_cuda/kernels.hpp on B's executor.
//
// Backends: the device (gpt_cuda/model.hpp: pool buffers, CUDA kernels, cuBLAS, streams) and the
// host (gpt_cuda/host_backend.hpp: the same code on the CPU, for the tests). A backend provides
//   buffer (movable; bytes(), data(), data_as<T>(), explicit bool), stream_type, place,
//   B(place, stream), static current_stream() (the engine's stream for the calling stage),
//   set_stream, stream, alloc(bytes), zero, copy, upload,
//   download (waits), sync (waits for the stream), received(buffer&) (a buffer from another
//   stream), ex() (a kernel executor), gemms() (gemm, gemm_batched, add), `where`.
// No CUDA header here.
#include <cmath>
#include <cstdint>
#include <map>
#include <type_traits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tpipe/core/error.hpp>
#include <tpipe/core/unit.hpp>
#include <tpipe/slice/scheme.hpp>

#include "gpt/model.hpp"
#include "gpt_cuda/kernels.hpp"

namespace gpt::cuda {

//! A view of a buffer's elements from `offset` on as a tensor of shape `s`.
template <class T, class Buffer>
tensor<T> view_of(const Buffer& b, shape s, memory where, std::int64_t offset = 0)
{
    return {b.template data_as<T>() + offset, s, static_cast<std::int64_t>(b.bytes() / sizeof(T)) - offset, where};
}

//! The model's parameter values and gradients in B's memory, in the CPU model's flat layout.
template <class B>
class basic_parameters {
public:
    using backend = B;
    //! Copies `host`'s values; gradients start at zero.
    basic_parameters(const gpt::parameters<float>& host, typename B::place where, typename B::stream_type stream)
        : cfg(host.cfg), lay(host.lay), place(where), b_(where, stream), value_(b_.alloc(bytes())),
          grad_(b_.alloc(bytes()))
    {
        upload(host, stream);
        zero_grad(stream);
    }

    void upload(const gpt::parameters<float>& host, typename B::stream_type stream)
    {
        check(host, "upload");
        b_.set_stream(stream);
        b_.upload(value_, host.value.data(), bytes());
        changed();
    }
    //! Copies values and gradients into `host` (waits for `stream`).
    void download(gpt::parameters<float>& host, typename B::stream_type stream)
    {
        check(host, "download");
        b_.set_stream(stream);
        b_.download(host.value.data(), value_, bytes());
        b_.download(host.grad.data(), grad_, bytes());
    }
    void zero_grad(typename B::stream_type stream)
    {
        b_.set_stream(stream);
        b_.zero(grad_);
    }

    //! Tensor at `offset` of the flat vector (gpt::layout's offsets) with shape s.
    tensor<float> value(std::int64_t offset, shape s) const { return view_of<float>(value_, s, B::where, offset); }
    tensor<float> grad(std::int64_t offset, shape s) const { return view_of<float>(grad_, s, B::where, offset); }
    float* values() const { return value_.template data_as<float>(); }
    float* grads() const { return grad_.template data_as<float>(); }

    //! The values in the storage type S that the GEMMs read: the float values themselves, or for
    //! another S (bf16) a copy that refresh<S>() makes. A part refuses to run on a stale copy.
    template <class S>
    const S* values_as() const
    {
        if constexpr (std::is_same_v<S, float>) {
            return values();
        } else {
            if (copy_version_ != version_ || copy_element_ != sizeof(S))
                throw tpipe::invalid_argument("gpt::cuda::parameters: the values changed since the last refresh() "
                                              "of their storage-type copy (call refresh after upload or an optimizer step)");
            return copy_.template data_as<S>();
        }
    }
    //! Makes the storage-type copy current (nothing for float).
    template <class S>
    void refresh(typename B::stream_type stream)
    {
        if constexpr (!std::is_same_v<S, float>) {
            if (copy_version_ == version_ && copy_element_ == sizeof(S)) return;
            b_.set_stream(stream);
            if (!copy_ || copy_element_ != sizeof(S)) copy_ = b_.alloc(static_cast<std::size_t>(lay.total) * sizeof(S));
            convert(b_.ex(), value(0, {lay.total}), view_of<S>(copy_, {lay.total}, B::where));
            copy_version_ = version_;
            copy_element_ = sizeof(S);
        }
    }
    //! The values changed on the device (an optimizer step): the storage copy is stale.
    void changed() { ++version_; }

    const gpt::config cfg;
    const gpt::layout lay;
    const typename B::place place;

private:
    std::size_t bytes() const { return static_cast<std::size_t>(lay.total) * sizeof(float); }
    void check(const gpt::parameters<float>& host, const char* what) const
    {
        if (host.size() != lay.total)
            throw tpipe::invalid_argument(std::string("gpt::cuda::parameters::") + what + ": a host model of " +
                                          std::to_string(host.size()) + " values for one of " + std::to_string(lay.total));
    }
    B b_;
    typename B::buffer value_, grad_, copy_;
    std::uint64_t version_ = 0, copy_version_ = ~std::uint64_t{0};
    std::size_t copy_element_ = 0;
};

//! Activations (or their gradients) between parts: [rows, tokens, d_model] values of the parts'
//! storage type in B's memory.
template <class B>
struct basic_activation {
    std::int64_t rows = 0;
    std::int64_t tokens = 0;
    typename B::buffer data;
};

//! A contiguous range of the model (see gpt::part, whose contract it follows, refusing units out
//! of causal order with tpipe::invalid_argument). Work goes to the part's stream (set_stream).
//! S is the storage type of activations, caches and the weights the GEMMs read (float, or bf16
//! with float master weights, gradients, LayerNorm statistics and K/V gradient accumulators);
//! every sum is taken in float.
template <class B, class S = float>
class basic_part {
public:
    using activation = basic_activation<B>;
    using buffer = typename B::buffer;

    basic_part(basic_parameters<B>& params, int layer_begin, int layer_end, bool first, bool last,
               typename B::stream_type stream)
        : params_(&params), l0_(layer_begin), l1_(layer_end), first_(first), last_(last), b_(params.place, stream)
    {
        if (layer_begin < 0 || layer_end < layer_begin || layer_end > params.cfg.layers)
            refuse("layer range [" + std::to_string(layer_begin) + ", " + std::to_string(layer_end) +
                   ") is not inside [0, " + std::to_string(params.cfg.layers) + ")");
        loss_sum_ = b_.alloc(sizeof(double));
        b_.zero(loss_sum_);
        if (last && params.cfg.tied) {
            head_grad_ = floats(std::int64_t(params.cfg.vocab) * params.cfg.d_model);
            b_.zero(head_grad_);
        }
    }

    //! Where the next calls enqueue their work.
    void set_stream(typename B::stream_type stream) { b_.set_stream(stream); }
    typename B::stream_type stream() const { return b_.stream(); }
    //! Waits for the work enqueued so far.
    void sync() { b_.sync(); }

    //! Starts an iteration on batch `b` (kept by pointer). Its tokens are copied to the part's
    //! memory and checked here: an id outside the vocabulary is refused (kernels cannot throw).
    void begin(const gpt::batch* b, std::int64_t total_tokens = 0)
    {
        const gpt::config& cfg = params_->cfg;
        if (!b) refuse("begin() needs a batch");
        if (b->seq_len > cfg.seq_len)
            refuse("batch sequence length " + std::to_string(b->seq_len) + " exceeds the model's " +
                   std::to_string(cfg.seq_len) + " positions");
        const std::int64_t count = b->rows * b->seq_len;
        if (count < 1 || static_cast<std::int64_t>(b->inputs.size()) != count ||
            static_cast<std::int64_t>(b->targets.size()) != count)
            refuse("the batch's inputs and targets must hold rows * seq_len = " + std::to_string(count) + " ids");
        for (const auto* ids : {&b->inputs, &b->targets})
            for (std::int32_t t : *ids)
                if (t < 0 || t >= cfg.vocab)
                    refuse("token id " + std::to_string(t) + " outside the vocabulary [0, " + std::to_string(cfg.vocab) + ")");
        data_ = b;
        total_ = total_tokens > 0 ? total_tokens : count;
        mbs_.clear();
        units_.clear();
        const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(std::int32_t);
        for (auto [dst, src] : {std::pair{&inputs_, &b->inputs}, std::pair{&targets_, &b->targets}}) {
            if (!*dst || dst->bytes() != bytes) *dst = b_.alloc(bytes);
            b_.upload(*dst, src->data(), bytes);
        }
        b_.zero(loss_sum_);
    }

    activation forward(const tpipe::unit& u, activation in);
    activation backward_input(const tpipe::unit& u, activation grad_out);
    void backward_weight(const tpipe::unit& u);
    activation backward(const tpipe::unit& u, activation grad_out)
    {
        auto r = backward_input(u, std::move(grad_out));
        backward_weight(u);
        return r;
    }

    //! The summed loss contributions so far / (B*L); waits for the part's stream.
    double loss()
    {
        double sum = 0;
        b_.download(&sum, loss_sum_, sizeof sum);
        return sum / static_cast<double>(total_);
    }
    //! Adds the tied head's private gradient into the parameters' gradient (once per iteration).
    void flush_grad()
    {
        if (!head_grad_) return;
        const std::int64_t count = std::int64_t(params_->cfg.vocab) * params_->cfg.d_model;
        b_.gemms().add(count, head_grad_.template data_as<float>(), params_->grads() + params_->lay.head);
        b_.zero(head_grad_);
    }

    bool first() const { return first_; }
    bool last() const { return last_; }
    basic_parameters<B>& params() { return *params_; }

private:
    struct mb_state {
        std::int64_t rows = 0, row_begin = 0;
        std::int64_t forwarded = 0;
        std::int64_t backward_at = -1;
        std::vector<buffer> k, v, dk, dv;  // per local layer, [rows, Lb, d]
    };
    struct layer_saved {
        buffer x, ln1, mean1, rstd1, qkv, probs, attn, xmid, ln2, mean2, rstd2, fc, act;
        buffer dout, dfc, dln2, dproj, dqkv, dln1;
    };
    struct unit_saved {
        std::vector<layer_saved> layers;
        buffer dx0, xh, xf, meanf, rstdf, dlogits, dxf;
        bool input_done = false;
    };

    [[noreturn]] static void refuse(const std::string& what) { throw tpipe::invalid_argument("gpt::cuda::part: " + what); }
    static std::string unit_name(const tpipe::unit& u)
    {
        return "microbatch " + std::to_string(u.microbatch) + " tokens [" + std::to_string(u.token_begin) + "," +
               std::to_string(u.token_end) + ")";
    }
    buffer floats(std::int64_t count) { return b_.alloc(static_cast<std::size_t>(count) * sizeof(float)); }
    //! `count` values of the storage type.
    buffer store(std::int64_t count) { return b_.alloc(static_cast<std::size_t>(count) * sizeof(S)); }
    tensor<float> f(const buffer& b, shape s, std::int64_t offset = 0) const
    {
        return view_of<float>(b, s, B::where, offset);
    }
    tensor<S> st(const buffer& b, shape s, std::int64_t offset = 0) const { return view_of<S>(b, s, B::where, offset); }
    static S* at(const buffer& b) { return b.template data_as<S>(); }
    //! The GEMMs, storage-type operands, C of the storage type or float.
    template <class C>
    void mm(std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a, mat<S> b, C* c, std::int64_t ldc, bool acc)
    {
        b_.gemms().template gemm<S, C>(m, n, k, a, b, c, ldc, acc);
    }
    template <class C>
    void mm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a, std::int64_t sa,
                    mat<S> b, std::int64_t sb, C* c, std::int64_t ldc, std::int64_t sc, bool acc)
    {
        b_.gemms().template gemm_batched<S, C>(batch, m, n, k, a, sa, b, sb, c, ldc, sc, acc);
    }
    template <class T>
    tensor<T> t(const buffer& b, shape s, std::int64_t offset = 0) const
    {
        return view_of<T>(b, s, B::where, offset);
    }
    //! The activation a neighbouring part sent, checked against the unit.
    buffer take(activation&& a, const tpipe::unit& u, const char* what)
    {
        const std::int64_t d = params_->cfg.d_model, n = u.rows() * u.tokens();
        if (a.rows != u.rows() || a.tokens != u.tokens() || !a.data ||
            static_cast<std::int64_t>(a.data.bytes()) != n * d * std::int64_t(sizeof(S)))
            refuse(std::string(what) + " of " + unit_name(u) + " has shape [" + std::to_string(a.rows) + "," +
                   std::to_string(a.tokens) + "] and " + std::to_string(a.data.bytes()) + " bytes; the unit needs [" +
                   std::to_string(u.rows()) + "," + std::to_string(u.tokens()) + "," + std::to_string(d) + "] values of " +
                   std::to_string(sizeof(S)) + " bytes");
        b_.received(a.data);
        return std::move(a.data);
    }

    basic_parameters<B>* params_;
    int l0_, l1_;
    bool first_, last_;
    B b_;
    const gpt::batch* data_ = nullptr;
    std::int64_t total_ = 1;
    buffer inputs_, targets_;  // the batch's tokens [rows, Lb]
    buffer loss_sum_;          // one double: the units' cross-entropies so far
    buffer head_grad_;         // tied head on the last part: private accumulator [V, d]
    std::map<int, mb_state> mbs_;
    std::map<std::pair<int, int>, unit_saved> units_;
};

template <class B, class S>
auto basic_part<B, S>::forward(const tpipe::unit& u, activation in) -> activation
{
    const gpt::config& cfg = params_->cfg;
    if (!data_) refuse("forward() before begin()");
    const gpt::batch& bt = *data_;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    const std::int64_t d = cfg.d_model, Lb = bt.seq_len, H = cfg.heads, dh = cfg.d_head(), F = cfg.d_ff();
    const std::int64_t n = rows * s;
    if (const std::string why = gpt::unit_outside(u, bt); !why.empty()) refuse(why);
    auto it = mbs_.find(u.microbatch);
    if (t0 == 0) {
        if (it != mbs_.end()) refuse("microbatch " + std::to_string(u.microbatch) + " forwarded twice");
    } else if (it == mbs_.end() || it->second.forwarded != t0 || it->second.row_begin != u.row_begin ||
               it->second.rows != rows) {
        refuse("forward of " + unit_name(u) + " out of causal order (its earlier tokens must go first, same rows)");
    }
    if (units_.count({u.microbatch, u.slice})) refuse("forward of " + unit_name(u) + " twice");
    const basic_parameters<B>& P = *params_;
    const S* W = P.template values_as<S>();  // refuses a stale storage copy before any state changes
    buffer x = first_ ? store(n * d) : take(std::move(in), u, "forward input");
    if (t0 == 0) {  // the microbatch's K/V caches and zeroed K/V gradient accumulators
        it = mbs_.try_emplace(u.microbatch).first;
        auto& fresh = it->second;
        fresh.rows = rows;
        fresh.row_begin = u.row_begin;
        for (int l = l0_; l < l1_; ++l) {
            fresh.k.push_back(store(rows * Lb * d));
            fresh.v.push_back(store(rows * Lb * d));
            fresh.dk.push_back(floats(rows * Lb * d));
            fresh.dv.push_back(floats(rows * Lb * d));
            b_.zero(fresh.dk.back());
            b_.zero(fresh.dv.back());
        }
    }
    auto& mb = it->second;
    mb.forwarded = t1;
    auto& us = units_[{u.microbatch, u.slice}];
    us.layers.resize(static_cast<std::size_t>(l1_ - l0_));

    auto& ex = b_.ex();
    if (first_)
        embedding_forward(ex, unit_extent{u.row_begin, rows, t0, s}, t<const std::int32_t>(inputs_, {bt.rows, Lb}),
                          P.value(P.lay.wte, {cfg.vocab, d}), P.value(P.lay.wpe, {cfg.seq_len, d}), st(x, {n, d}));

    const float scale = 1.0f / std::sqrt(float(dh));
    for (int l = l0_; l < l1_; ++l) {
        const auto& bl = P.lay.blocks[static_cast<std::size_t>(l)];
        const std::size_t li = static_cast<std::size_t>(l - l0_);
        auto& sv = us.layers[li];
        const S* K = at(mb.k[li]);
        const S* Vc = at(mb.v[li]);
        sv.x = std::move(x);
        sv.ln1 = store(n * d);
        sv.mean1 = floats(n);
        sv.rstd1 = floats(n);
        layernorm_forward(ex, st(sv.x, {n, d}), P.value(bl.ln1_g, {d}), P.value(bl.ln1_b, {d}), cfg.ln_eps,
                          st(sv.ln1, {n, d}), f(sv.mean1, {n}), f(sv.rstd1, {n}));
        sv.qkv = store(n * 3 * d);
        const S* qkv = at(sv.qkv);
        mm(n, 3 * d, d, {at(sv.ln1), d, 1}, {W + bl.w_qkv, 3 * d, 1}, at(sv.qkv), 3 * d, false);
        add_bias_residual(ex, P.value(bl.b_qkv, {3 * d}), {}, st(sv.qkv, {n, 3 * d}));
        kv_cache_copy(ex, t0, true, st(sv.qkv, {n, 3 * d}), st(mb.k[li], {rows, Lb, d}), st(mb.v[li], {rows, Lb, d}));
        // Attention per row, batched over heads: S = Q K^T over keys [0, t1), causal softmax, O = P V.
        sv.probs = store(rows * H * s * t1);
        sv.attn = store(n * d);
        S* probs = at(sv.probs);
        for (std::int64_t r = 0; r < rows; ++r)
            mm_batched(H, s, t1, dh, {qkv + r * s * 3 * d, 3 * d, 1}, dh, {K + r * Lb * d, 1, d}, dh,
                       probs + r * H * s * t1, t1, s * t1, false);
        causal_softmax_forward(ex, t0, scale, st(sv.probs, {rows * H, s, t1}));
        for (std::int64_t r = 0; r < rows; ++r)
            mm_batched(H, s, dh, t1, {probs + r * H * s * t1, t1, 1}, s * t1, {Vc + r * Lb * d, d, 1}, dh,
                       at(sv.attn) + r * s * d, d, dh, false);
        sv.xmid = store(n * d);
        mm(n, d, d, {at(sv.attn), d, 1}, {W + bl.w_o, d, 1}, at(sv.xmid), d, false);
        add_bias_residual(ex, P.value(bl.b_o, {d}), st(sv.x, {n, d}), st(sv.xmid, {n, d}));
        sv.ln2 = store(n * d);
        sv.mean2 = floats(n);
        sv.rstd2 = floats(n);
        layernorm_forward(ex, st(sv.xmid, {n, d}), P.value(bl.ln2_g, {d}), P.value(bl.ln2_b, {d}), cfg.ln_eps,
                          st(sv.ln2, {n, d}), f(sv.mean2, {n}), f(sv.rstd2, {n}));
        sv.fc = store(n * F);
        mm(n, F, d, {at(sv.ln2), d, 1}, {W + bl.w_fc, F, 1}, at(sv.fc), F, false);
        sv.act = store(n * F);
        bias_gelu_forward(ex, P.value(bl.b_fc, {F}), st(sv.fc, {n, F}), st(sv.act, {n, F}));
        x = store(n * d);
        mm(n, d, F, {at(sv.act), F, 1}, {W + bl.w_proj, d, 1}, at(x), d, false);
        add_bias_residual(ex, P.value(bl.b_proj, {d}), st(sv.xmid, {n, d}), st(x, {n, d}));
    }

    if (!last_) return activation{rows, s, std::move(x)};

    // Final LayerNorm, head, softmax cross-entropy (row losses summed into loss_sum_).
    const std::int64_t V = cfg.vocab;
    us.xh = std::move(x);
    us.xf = store(n * d);
    us.meanf = floats(n);
    us.rstdf = floats(n);
    layernorm_forward(ex, st(us.xh, {n, d}), P.value(P.lay.lnf_g, {d}), P.value(P.lay.lnf_b, {d}), cfg.ln_eps,
                      st(us.xf, {n, d}), f(us.meanf, {n}), f(us.rstdf, {n}));
    us.dlogits = store(n * V);
    mm(n, V, d, {at(us.xf), d, 1}, {W + P.lay.head, 1, d}, at(us.dlogits), V, false);
    buffer row_loss = b_.alloc(static_cast<std::size_t>(n) * sizeof(double));
    const float inv_total = 1.0f / float(total_);
    for (std::int64_t r = 0; r < rows; ++r)  // a row's targets are contiguous, the unit's rows are not
        softmax_cross_entropy(ex, t<const std::int32_t>(targets_, {s}, (u.row_begin + r) * Lb + t0), inv_total,
                              st(us.dlogits, {s, V}, r * s * V), t<double>(row_loss, {s}, r * s));
    sum_doubles(ex, t<const double>(row_loss, {n}), t<double>(loss_sum_, {1}));
    return activation{rows, s, {}};
}

template <class B, class S>
auto basic_part<B, S>::backward_input(const tpipe::unit& u, activation grad_out) -> activation
{
    const gpt::config& cfg = params_->cfg;
    if (!data_) refuse("backward() before begin()");
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    const std::int64_t d = cfg.d_model, Lb = data_->seq_len, H = cfg.heads, dh = cfg.d_head(), F = cfg.d_ff();
    const std::int64_t n = rows * s;
    auto uit = units_.find({u.microbatch, u.slice});
    auto mit = mbs_.find(u.microbatch);
    if (uit == units_.end() || mit == mbs_.end() || uit->second.input_done)
        refuse("backward of microbatch " + std::to_string(u.microbatch) + " slice " + std::to_string(u.slice) +
               " without a matching forward");
    auto& mb = mit->second;
    const std::int64_t expect_end = mb.backward_at < 0 ? mb.forwarded : mb.backward_at;
    if (t1 != expect_end)
        refuse("backward of " + unit_name(u) + " out of reverse token order (expected a slice ending at " +
               std::to_string(expect_end) + ")");
    const basic_parameters<B>& P = *params_;
    const S* W = P.template values_as<S>();
    buffer dx = last_ ? store(n * d) : take(std::move(grad_out), u, "backward gradient");
    mb.backward_at = t0;
    auto& us = uit->second;
    us.input_done = true;
    auto& ex = b_.ex();

    if (last_) {
        us.dxf = store(n * d);
        mm(n, d, cfg.vocab, {at(us.dlogits), cfg.vocab, 1}, {W + P.lay.head, d, 1}, at(us.dxf), d, false);
        b_.zero(dx);
        layernorm_backward(ex, st(us.dxf, {n, d}), st(us.xh, {n, d}), f(us.meanf, {n}), f(us.rstdf, {n}),
                           P.value(P.lay.lnf_g, {d}), st(dx, {n, d}));
    }

    const float scale = 1.0f / std::sqrt(float(dh));
    buffer dattn = store(n * d), dp = store(rows * H * s * t1);
    S* dpp = at(dp);
    const S* dO = at(dattn);
    for (int l = l1_ - 1; l >= l0_; --l) {
        const auto& bl = P.lay.blocks[static_cast<std::size_t>(l)];
        const std::size_t li = static_cast<std::size_t>(l - l0_);
        auto& sv = us.layers[li];
        const S* K = at(mb.k[li]);
        const S* Vc = at(mb.v[li]);
        float* dK = mb.dk[li].template data_as<float>();
        float* dV = mb.dv[li].template data_as<float>();
        // MLP
        sv.dout = store(n * d);
        b_.copy(dx, sv.dout);
        sv.dfc = store(n * F);
        mm(n, F, d, {at(sv.dout), d, 1}, {W + bl.w_proj, 1, d}, at(sv.dfc), F, false);
        gelu_backward(ex, st(sv.fc, {n, F}), st(sv.dfc, {n, F}));
        sv.dln2 = store(n * d);
        mm(n, d, F, {at(sv.dfc), F, 1}, {W + bl.w_fc, 1, F}, at(sv.dln2), d, false);
        layernorm_backward(ex, st(sv.dln2, {n, d}), st(sv.xmid, {n, d}), f(sv.mean2, {n}), f(sv.rstd2, {n}),
                           P.value(bl.ln2_g, {d}), st(dx, {n, d}));
        // Attention
        sv.dproj = store(n * d);
        b_.copy(dx, sv.dproj);
        mm(n, d, d, {at(sv.dproj), d, 1}, {W + bl.w_o, 1, d}, at(dattn), d, false);
        sv.dqkv = store(n * 3 * d);
        const S* probs = at(sv.probs);
        const S* qkv = at(sv.qkv);
        S* dqkv = at(sv.dqkv);
        for (std::int64_t r = 0; r < rows; ++r) {  // dP = dO V^T; dV += P^T dO (into the float accumulator)
            mm_batched(H, s, t1, dh, {dO + r * s * d, d, 1}, dh, {Vc + r * Lb * d, 1, d}, dh, dpp + r * H * s * t1, t1,
                       s * t1, false);
            mm_batched(H, t1, dh, s, {probs + r * H * s * t1, 1, t1}, s * t1, {dO + r * s * d, d, 1}, dh,
                       dV + r * Lb * d, d, dh, true);
        }
        causal_softmax_backward(ex, t0, scale, st(sv.probs, {rows * H, s, t1}), st(dp, {rows * H, s, t1}));
        for (std::int64_t r = 0; r < rows; ++r) {  // dQ = dS K (dqkv's query columns); dK += dS^T Q
            mm_batched(H, s, dh, t1, {dpp + r * H * s * t1, t1, 1}, s * t1, {K + r * Lb * d, d, 1}, dh,
                       dqkv + r * s * 3 * d, 3 * d, dh, false);
            mm_batched(H, t1, dh, s, {dpp + r * H * s * t1, 1, t1}, s * t1, {qkv + r * s * 3 * d, 3 * d, 1}, dh,
                       dK + r * Lb * d, d, dh, true);
        }
        // The slice's own K/V gradient is complete now (later slices already ran): into dqkv.
        kv_cache_copy(ex, t0, false, st(sv.dqkv, {n, 3 * d}), f(mb.dk[li], {rows, Lb, d}), f(mb.dv[li], {rows, Lb, d}));
        sv.dln1 = store(n * d);
        mm(n, d, 3 * d, {dqkv, 3 * d, 1}, {W + bl.w_qkv, 1, 3 * d}, at(sv.dln1), d, false);
        layernorm_backward(ex, st(sv.dln1, {n, d}), st(sv.x, {n, d}), f(sv.mean1, {n}), f(sv.rstd1, {n}),
                           P.value(bl.ln1_g, {d}), st(dx, {n, d}));
    }
    if (t0 == 0) mbs_.erase(mit);  // every slice of the microbatch is through: its caches go back

    if (first_) {
        us.dx0 = std::move(dx);
        return activation{rows, s, {}};
    }
    return activation{rows, s, std::move(dx)};
}

template <class B, class S>
void basic_part<B, S>::backward_weight(const tpipe::unit& u)
{
    const gpt::config& cfg = params_->cfg;
    auto uit = units_.find({u.microbatch, u.slice});
    if (uit == units_.end() || !uit->second.input_done)
        refuse("backward_weight of microbatch " + std::to_string(u.microbatch) + " slice " +
               std::to_string(u.slice) + " before its backward_input");
    auto& us = uit->second;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin;
    const std::int64_t d = cfg.d_model, F = cfg.d_ff(), n = rows * s;
    const basic_parameters<B>& P = *params_;
    float* G = P.grads();
    auto& ex = b_.ex();
    auto c = [this](const buffer& b, shape sh) { return t<const S>(b, sh); };
    auto cf = [this](const buffer& b, shape sh) { return t<const float>(b, sh); };

    if (last_) {
        const std::int64_t V = cfg.vocab;
        float* gh = head_grad_ ? head_grad_.template data_as<float>() : G + P.lay.head;
        mm(V, d, n, {at(us.dlogits), 1, V}, {at(us.xf), d, 1}, gh, d, true);
        layernorm_param_grad(ex, c(us.dxf, {n, d}), c(us.xh, {n, d}), cf(us.meanf, {n}), cf(us.rstdf, {n}),
                             P.grad(P.lay.lnf_g, {d}), P.grad(P.lay.lnf_b, {d}));
    }
    for (int l = l1_ - 1; l >= l0_; --l) {
        const auto& bl = P.lay.blocks[static_cast<std::size_t>(l)];
        auto& sv = us.layers[static_cast<std::size_t>(l - l0_)];
        mm(F, d, n, {at(sv.act), 1, F}, {at(sv.dout), d, 1}, G + bl.w_proj, d, true);
        column_sum(ex, c(sv.dout, {n, d}), P.grad(bl.b_proj, {d}));
        mm(d, F, n, {at(sv.ln2), 1, d}, {at(sv.dfc), F, 1}, G + bl.w_fc, F, true);
        column_sum(ex, c(sv.dfc, {n, F}), P.grad(bl.b_fc, {F}));
        layernorm_param_grad(ex, c(sv.dln2, {n, d}), c(sv.xmid, {n, d}), cf(sv.mean2, {n}), cf(sv.rstd2, {n}),
                             P.grad(bl.ln2_g, {d}), P.grad(bl.ln2_b, {d}));
        mm(d, d, n, {at(sv.attn), 1, d}, {at(sv.dproj), d, 1}, G + bl.w_o, d, true);
        column_sum(ex, c(sv.dproj, {n, d}), P.grad(bl.b_o, {d}));
        mm(d, 3 * d, n, {at(sv.ln1), 1, d}, {at(sv.dqkv), 3 * d, 1}, G + bl.w_qkv, 3 * d, true);
        column_sum(ex, c(sv.dqkv, {n, 3 * d}), P.grad(bl.b_qkv, {3 * d}));
        layernorm_param_grad(ex, c(sv.dln1, {n, d}), c(sv.x, {n, d}), cf(sv.mean1, {n}), cf(sv.rstd1, {n}),
                             P.grad(bl.ln1_g, {d}), P.grad(bl.ln1_b, {d}));
    }
    if (first_)
        embedding_backward(ex, unit_extent{u.row_begin, rows, t0, s},
                           t<const std::int32_t>(inputs_, {data_->rows, data_->seq_len}), c(us.dx0, {n, d}),
                           P.grad(P.lay.wte, {cfg.vocab, d}), P.grad(P.lay.wpe, {cfg.seq_len, d}));
    units_.erase(uit);
}

//! One whole iteration on one part holding the whole model, as one unit (the reference), with
//! storage type S (refreshes the parameters' storage copy first).
template <class S = float, class B>
double full_step(basic_parameters<B>& params, const gpt::batch& b, typename B::stream_type stream)
{
    params.template refresh<S>(stream);
    basic_part<B, S> p(params, 0, params.cfg.layers, true, true, stream);
    params.zero_grad(stream);
    p.begin(&b);
    const tpipe::unit u{0, 0, 0, b.rows, 0, b.seq_len};
    p.forward(u, {});
    p.backward(u, {});
    p.flush_grad();
    return p.loss();
}

//! Enqueues one iteration's work on the parts (begun already): every unit of `units` forward
//! through the parts (microbatch-major, slices ascending), then backward in the reverse order,
//! then the tied head's flush. hand_over(part) runs after each call: a part on its own stream
//! waits for it there (what the engine's completion event does in a pipeline); parts sharing one
//! stream need nothing (that is how the sequential run is captured into a CUDA graph).
template <class B, class S, class HandOver>
void enqueue_in_order(const std::vector<basic_part<B, S>*>& parts, const tpipe::scheme& units, HandOver hand_over)
{
    for (int i = 0; i < units.units(); ++i) {
        const auto u = units.at(i);
        typename basic_part<B, S>::activation x;
        for (auto* p : parts) {
            x = p->forward(u, std::move(x));
            hand_over(*p);
        }
    }
    for (int i = units.units() - 1; i >= 0; --i) {
        const auto u = units.at(i);
        typename basic_part<B, S>::activation g;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            g = (*it)->backward(u, std::move(g));
            hand_over(**it);
        }
    }
    for (auto* p : parts) {
        p->flush_grad();
        hand_over(*p);
    }
}

//! One iteration through the parts without a pipeline runtime, each part on its own stream:
//! refreshes the storage copy, zeroes the gradients, begins every part, enqueue_in_order handing
//! over by waiting; the mean loss.
template <class B, class S>
double run_in_order(const std::vector<basic_part<B, S>*>& parts, const tpipe::scheme& units, const gpt::batch& b)
{
    if (parts.empty()) throw tpipe::invalid_argument("gpt::cuda::run_in_order: no parts");
    parts.front()->params().template refresh<S>(parts.front()->stream());
    parts.front()->params().zero_grad(parts.front()->stream());
    parts.front()->sync();
    for (auto* p : parts) p->begin(&b);
    enqueue_in_order(parts, units, [](basic_part<B, S>& p) { p.sync(); });
    return parts.back()->loss();
}

//! gpt::adamw's update in B's memory (bias correction, decay on matrices and embeddings,
//! gradients clipped to a global norm), the clip factor computed where the gradients are.
template <class B>
class basic_adamw {
public:
    basic_adamw(basic_parameters<B>& p, gpt::adamw_options o, typename B::stream_type stream)
        : p_(&p), o_(o), b_(p.place, stream)
    {
        const std::int64_t count = p.lay.total;
        m_ = b_.alloc(static_cast<std::size_t>(count) * sizeof(float));
        v_ = b_.alloc(static_cast<std::size_t>(count) * sizeof(float));
        b_.zero(m_);
        b_.zero(v_);
        std::vector<unsigned char> decay(static_cast<std::size_t>(count), 0);
        for (const auto& t : p.lay.tensors)
            if (t.decay) std::fill_n(decay.begin() + t.offset, t.size(), 1);
        decay_ = b_.alloc(decay.size());
        b_.upload(decay_, decay.data(), decay.size());
        sum_sq_ = b_.alloc(sizeof(double));
    }

    void step(typename B::stream_type stream)
    {
        b_.set_stream(stream);
        ++t_;
        const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
        const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
        const std::int64_t count = p_->lay.total;
        auto& ex = b_.ex();
        b_.zero(sum_sq_);
        sum_of_squares(ex, p_->grad(0, {count}), view_of<double>(sum_sq_, {1}, B::where));
        const body::adamw_coefficients k{float(o_.beta1),
                                         float(o_.beta2),
                                         float(o_.eps),
                                         float(o_.lr * o_.weight_decay),
                                         float(o_.lr / bc1),
                                         float(1.0 / std::sqrt(bc2)),
                                         o_.max_grad_norm};
        adamw_update(ex, k, view_of<const double>(sum_sq_, {1}, B::where), p_->grad(0, {count}),
                     view_of<const unsigned char>(decay_, {count}, B::where), p_->value(0, {count}),
                     view_of<float>(m_, {count}, B::where), view_of<float>(v_, {count}, B::where));
        p_->changed();
    }
    std::int64_t steps() const { return t_; }
    //! The global gradient norm the last step saw (waits for the optimizer's stream).
    double last_grad_norm()
    {
        double s = 0;
        b_.download(&s, sum_sq_, sizeof s);
        return std::sqrt(s);
    }

private:
    basic_parameters<B>* p_;
    gpt::adamw_options o_;
    B b_;
    typename B::buffer m_, v_, decay_, sum_sq_;
    std::int64_t t_ = 0;
};

} // namespace gpt::cuda
