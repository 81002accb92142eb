#include "gpt_cuda/model.hpp"

#include <cmath>
#include <string>

#include <tpipe/core/error.hpp>
#include <tpipe/cuda/error.hpp>

namespace gpt::cuda {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw tpipe::invalid_argument("gpt::cuda::part: " + what); }

device_buffer floats(memory_pool& pool, int gpu, cudaStream_t s, std::int64_t count)
{
    return pool.allocate(static_cast<std::size_t>(count) * sizeof(float), gpu, s);
}

void copy(const device_buffer& from, device_buffer& to, cudaStream_t s)
{
    TPIPE_CUDA_TRY(cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToDevice, s));
}

void zero(device_buffer& b, cudaStream_t s) { TPIPE_CUDA_TRY(cudaMemsetAsync(b.data(), 0, b.bytes(), s)); }

std::string unit_name(const tpipe::unit& u)
{
    return "microbatch " + std::to_string(u.microbatch) + " tokens [" + std::to_string(u.token_begin) + "," +
           std::to_string(u.token_end) + ")";
}

} // namespace

// ---- parameters ----------------------------------------------------------------------------
parameters::parameters(const gpt::parameters<float>& host, memory_pool& p, int g, cudaStream_t stream)
    : cfg(host.cfg), lay(host.lay), gpu(g), pool(p), value_(floats(p, g, stream, host.size())),
      grad_(floats(p, g, stream, host.size()))
{
    upload(host, stream);
    zero_grad(stream);
}

void parameters::upload(const gpt::parameters<float>& host, cudaStream_t stream)
{
    if (host.size() != lay.total)
        throw tpipe::invalid_argument("gpt::cuda::parameters::upload: " + std::to_string(host.size()) +
                                      " values for a model of " + std::to_string(lay.total));
    TPIPE_CUDA_TRY(cudaMemcpyAsync(value_.data(), host.value.data(), value_.bytes(), cudaMemcpyHostToDevice, stream));
    TPIPE_CUDA_TRY(cudaStreamSynchronize(stream));  // `host` may change as soon as this returns
}

void parameters::download(gpt::parameters<float>& host, cudaStream_t stream) const
{
    if (host.size() != lay.total)
        throw tpipe::invalid_argument("gpt::cuda::parameters::download: a host model of " +
                                      std::to_string(host.size()) + " values for " + std::to_string(lay.total));
    TPIPE_CUDA_TRY(cudaMemcpyAsync(host.value.data(), value_.data(), value_.bytes(), cudaMemcpyDeviceToHost, stream));
    TPIPE_CUDA_TRY(cudaMemcpyAsync(host.grad.data(), grad_.data(), grad_.bytes(), cudaMemcpyDeviceToHost, stream));
    TPIPE_CUDA_TRY(cudaStreamSynchronize(stream));
}

void parameters::zero_grad(cudaStream_t stream) { zero(grad_, stream); }

// ---- part ----------------------------------------------------------------------------------
struct part::impl {
    struct mb_state {
        std::int64_t rows = 0, row_begin = 0;
        std::int64_t forwarded = 0;
        std::int64_t backward_at = -1;
        std::vector<device_buffer> k, v, dk, dv;  // per local layer, [rows, Lb, d]
    };
    struct layer_saved {
        device_buffer x, ln1, mean1, rstd1, qkv, probs, attn, xmid, ln2, mean2, rstd2, fc, act;
        device_buffer dout, dfc, dln2, dproj, dqkv, dln1;
    };
    struct unit_saved {
        std::vector<layer_saved> layers;
        device_buffer dx0, xh, xf, meanf, rstdf, dlogits, dxf;
        bool input_done = false;
    };

    device_executor ex;
    gpt::cuda::blas blas;
    const gpt::batch* data = nullptr;
    std::int64_t total = 1;
    device_buffer inputs, targets;  // the batch's tokens [B, Lb] on the GPU
    device_buffer loss_sum;         // one double: the units' cross-entropies so far
    device_buffer head_grad;        // tied head on the last part: private accumulator [V, d]
    std::map<int, mb_state> mbs;
    std::map<std::pair<int, int>, unit_saved> units;
};

part::part(parameters& params, int layer_begin, int layer_end, bool first, bool last, cudaStream_t stream)
    : impl_(std::make_unique<impl>()), params_(&params), l0_(layer_begin), l1_(layer_end), first_(first), last_(last)
{
    if (layer_begin < 0 || layer_end < layer_begin || layer_end > params.cfg.layers)
        refuse("layer range [" + std::to_string(layer_begin) + ", " + std::to_string(layer_end) +
               ") is not inside [0, " + std::to_string(params.cfg.layers) + ")");
    set_stream(stream);
    impl_->loss_sum = params.pool.allocate(sizeof(double), params.gpu, stream);
    zero(impl_->loss_sum, stream);
    if (last && params.cfg.tied) {
        impl_->head_grad = floats(params.pool, params.gpu, stream, std::int64_t(params.cfg.vocab) * params.cfg.d_model);
        zero(impl_->head_grad, stream);
    }
}

part::~part() = default;
part::part(part&&) noexcept = default;
part& part::operator=(part&&) noexcept = default;

void part::set_stream(cudaStream_t stream)
{
    impl_->ex.stream = stream;
    impl_->blas.bind(stream);
}
cudaStream_t part::stream() const { return impl_->ex.stream; }

void part::begin(const gpt::batch* b, std::int64_t total_tokens)
{
    impl& I = *impl_;
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
    I.data = b;
    I.total = total_tokens > 0 ? total_tokens : count;
    I.mbs.clear();
    I.units.clear();
    const cudaStream_t s = I.ex.stream;
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(std::int32_t);
    for (auto [dst, src] : {std::pair{&I.inputs, &b->inputs}, std::pair{&I.targets, &b->targets}}) {
        if (!*dst || dst->bytes() != bytes) *dst = params_->pool.allocate(bytes, params_->gpu, s);
        TPIPE_CUDA_TRY(cudaMemcpyAsync(dst->data(), src->data(), bytes, cudaMemcpyHostToDevice, s));
    }
    zero(I.loss_sum, s);
}

namespace {
// A floats buffer on the part's GPU for work on stream s.
struct allocator {
    memory_pool& pool;
    int gpu;
    cudaStream_t s;
    device_buffer operator()(std::int64_t count) const { return floats(pool, gpu, s, count); }
};
// The stream-ordered reuse of a buffer made on another stage's stream waits for this one too.
void received_on(device_buffer& b, cudaStream_t s)
{
    if (b && b.stream() != s) b.use_on(s);
}
} // namespace

activation part::forward(const tpipe::unit& u, activation in)
{
    impl& I = *impl_;
    const gpt::config& cfg = params_->cfg;
    if (!I.data) refuse("forward() before begin()");
    const gpt::batch& B = *I.data;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    const std::int64_t d = cfg.d_model, Lb = B.seq_len, H = cfg.heads, dh = cfg.d_head(), F = cfg.d_ff();
    const std::int64_t n = rows * s;
    if (u.row_begin < 0 || u.row_end > B.rows || rows < 1 || t0 < 0 || t1 > Lb || s < 1)
        refuse("unit rows [" + std::to_string(u.row_begin) + "," + std::to_string(u.row_end) + ") tokens [" +
               std::to_string(t0) + "," + std::to_string(t1) + ") do not fit the batch " + std::to_string(B.rows) +
               " x " + std::to_string(Lb));
    const cudaStream_t st = I.ex.stream;
    const allocator alloc{params_->pool, params_->gpu, st};
    auto it = I.mbs.find(u.microbatch);
    if (t0 == 0) {
        if (it != I.mbs.end()) refuse("microbatch " + std::to_string(u.microbatch) + " forwarded twice");
        it = I.mbs.try_emplace(u.microbatch).first;
        auto& mb = it->second;
        mb.rows = rows;
        mb.row_begin = u.row_begin;
        for (int l = l0_; l < l1_; ++l) {
            mb.k.push_back(alloc(rows * Lb * d));
            mb.v.push_back(alloc(rows * Lb * d));
            mb.dk.push_back(alloc(rows * Lb * d));
            mb.dv.push_back(alloc(rows * Lb * d));
            zero(mb.dk.back(), st);
            zero(mb.dv.back(), st);
        }
    } else if (it == I.mbs.end() || it->second.forwarded != t0 || it->second.row_begin != u.row_begin ||
               it->second.rows != rows) {
        refuse("forward of " + unit_name(u) + " out of causal order (its earlier tokens must go first, same rows)");
    }
    auto& mb = it->second;
    if (I.units.count({u.microbatch, u.slice})) refuse("forward of " + unit_name(u) + " twice");
    mb.forwarded = t1;
    auto& us = I.units[{u.microbatch, u.slice}];
    us.layers.resize(static_cast<std::size_t>(l1_ - l0_));

    const parameters& P = *params_;
    const float* W = P.values().data_as<float>();
    const unit_extent ext{u.row_begin, rows, t0, s};
    device_buffer x;
    if (first_) {
        x = alloc(n * d);
        embedding_forward(I.ex, ext, view_of<const std::int32_t>(I.inputs, {B.rows, Lb}), P.value(P.lay.wte, {cfg.vocab, d}),
                          P.value(P.lay.wpe, {cfg.seq_len, d}), view_of<float>(x, {n, d}));
    } else {
        if (in.rows != rows || in.tokens != s || !in.data ||
            static_cast<std::int64_t>(in.data.bytes()) != n * d * std::int64_t(sizeof(float)))
            refuse("forward input of " + unit_name(u) + " has shape [" + std::to_string(in.rows) + "," +
                   std::to_string(in.tokens) + "] and " + std::to_string(in.data.bytes()) + " bytes; the unit needs [" +
                   std::to_string(rows) + "," + std::to_string(s) + "," + std::to_string(d) + "] floats");
        received_on(in.data, st);
        x = std::move(in.data);
    }

    const float scale = 1.0f / std::sqrt(float(dh));
    auto f = [](const device_buffer& b, shape sh) { return view_of<float>(b, sh); };
    for (int l = l0_; l < l1_; ++l) {
        const auto& bl = P.lay.blocks[static_cast<std::size_t>(l)];
        const std::size_t li = static_cast<std::size_t>(l - l0_);
        auto& sv = us.layers[li];
        auto& K = mb.k[li];
        auto& Vc = mb.v[li];
        sv.x = std::move(x);
        sv.ln1 = alloc(n * d);
        sv.mean1 = alloc(n);
        sv.rstd1 = alloc(n);
        layernorm_forward(I.ex, f(sv.x, {n, d}), P.value(bl.ln1_g, {d}), P.value(bl.ln1_b, {d}), cfg.ln_eps,
                          f(sv.ln1, {n, d}), f(sv.mean1, {n}), f(sv.rstd1, {n}));
        sv.qkv = alloc(n * 3 * d);
        I.blas.gemm(n, 3 * d, d, {sv.ln1.data_as<float>(), d, 1}, {W + bl.w_qkv, 3 * d, 1}, sv.qkv.data_as<float>(),
                    3 * d, false);
        add_bias_residual(I.ex, P.value(bl.b_qkv, {3 * d}), {}, f(sv.qkv, {n, 3 * d}));
        kv_cache_copy(I.ex, t0, true, f(sv.qkv, {n, 3 * d}), f(K, {rows, Lb, d}), f(Vc, {rows, Lb, d}));
        // Attention per row, batched over heads: S = Q K^T over keys [0, t1), causal softmax, O = P V.
        sv.probs = alloc(rows * H * s * t1);
        sv.attn = alloc(n * d);
        float* probs = sv.probs.data_as<float>();
        for (std::int64_t r = 0; r < rows; ++r)
            I.blas.gemm_batched(H, s, t1, dh, {sv.qkv.data_as<float>() + r * s * 3 * d, 3 * d, 1}, dh,
                                {K.data_as<float>() + r * Lb * d, 1, d}, dh, probs + r * H * s * t1, t1, s * t1, false);
        causal_softmax_forward(I.ex, t0, scale, f(sv.probs, {rows * H, s, t1}));
        for (std::int64_t r = 0; r < rows; ++r)
            I.blas.gemm_batched(H, s, dh, t1, {probs + r * H * s * t1, t1, 1}, s * t1,
                                {Vc.data_as<float>() + r * Lb * d, d, 1}, dh, sv.attn.data_as<float>() + r * s * d, d,
                                dh, false);
        sv.xmid = alloc(n * d);
        I.blas.gemm(n, d, d, {sv.attn.data_as<float>(), d, 1}, {W + bl.w_o, d, 1}, sv.xmid.data_as<float>(), d, false);
        add_bias_residual(I.ex, P.value(bl.b_o, {d}), f(sv.x, {n, d}), f(sv.xmid, {n, d}));
        sv.ln2 = alloc(n * d);
        sv.mean2 = alloc(n);
        sv.rstd2 = alloc(n);
        layernorm_forward(I.ex, f(sv.xmid, {n, d}), P.value(bl.ln2_g, {d}), P.value(bl.ln2_b, {d}), cfg.ln_eps,
                          f(sv.ln2, {n, d}), f(sv.mean2, {n}), f(sv.rstd2, {n}));
        sv.fc = alloc(n * F);
        I.blas.gemm(n, F, d, {sv.ln2.data_as<float>(), d, 1}, {W + bl.w_fc, F, 1}, sv.fc.data_as<float>(), F, false);
        sv.act = alloc(n * F);
        bias_gelu_forward(I.ex, P.value(bl.b_fc, {F}), f(sv.fc, {n, F}), f(sv.act, {n, F}));
        x = alloc(n * d);
        I.blas.gemm(n, d, F, {sv.act.data_as<float>(), F, 1}, {W + bl.w_proj, d, 1}, x.data_as<float>(), d, false);
        add_bias_residual(I.ex, P.value(bl.b_proj, {d}), f(sv.xmid, {n, d}), f(x, {n, d}));
    }

    if (!last_) return activation{rows, s, std::move(x)};

    // Final LayerNorm, head, softmax cross-entropy (row losses summed into loss_sum on the GPU).
    const std::int64_t V = cfg.vocab;
    us.xh = std::move(x);
    us.xf = alloc(n * d);
    us.meanf = alloc(n);
    us.rstdf = alloc(n);
    layernorm_forward(I.ex, f(us.xh, {n, d}), P.value(P.lay.lnf_g, {d}), P.value(P.lay.lnf_b, {d}), cfg.ln_eps,
                      f(us.xf, {n, d}), f(us.meanf, {n}), f(us.rstdf, {n}));
    us.dlogits = alloc(n * V);
    I.blas.gemm(n, V, d, {us.xf.data_as<float>(), d, 1}, {W + P.lay.head, 1, d}, us.dlogits.data_as<float>(), V, false);
    device_buffer row_loss = params_->pool.allocate(static_cast<std::size_t>(n) * sizeof(double), params_->gpu, st);
    const float inv_total = 1.0f / float(I.total);
    for (std::int64_t r = 0; r < rows; ++r)
        softmax_cross_entropy(I.ex, view_of<const std::int32_t>(I.targets, {s}, (u.row_begin + r) * Lb + t0), inv_total,
                              view_of<float>(us.dlogits, {s, V}, r * s * V), view_of<double>(row_loss, {s}, r * s));
    sum_doubles(I.ex, view_of<const double>(row_loss, {n}), view_of<double>(I.loss_sum, {1}));
    return activation{rows, s, {}};
}

activation part::backward_input(const tpipe::unit& u, activation grad_out)
{
    impl& I = *impl_;
    const gpt::config& cfg = params_->cfg;
    if (!I.data) refuse("backward() before begin()");
    const gpt::batch& B = *I.data;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin, t1 = u.token_end;
    const std::int64_t d = cfg.d_model, Lb = B.seq_len, H = cfg.heads, dh = cfg.d_head(), F = cfg.d_ff();
    const std::int64_t n = rows * s;
    auto uit = I.units.find({u.microbatch, u.slice});
    auto mit = I.mbs.find(u.microbatch);
    if (uit == I.units.end() || mit == I.mbs.end() || uit->second.input_done)
        refuse("backward of microbatch " + std::to_string(u.microbatch) + " slice " + std::to_string(u.slice) +
               " without a matching forward");
    auto& mb = mit->second;
    const std::int64_t expect_end = mb.backward_at < 0 ? mb.forwarded : mb.backward_at;
    if (t1 != expect_end)
        refuse("backward of " + unit_name(u) + " out of reverse token order (expected a slice ending at " +
               std::to_string(expect_end) + ")");
    mb.backward_at = t0;
    auto& us = uit->second;
    us.input_done = true;
    const parameters& P = *params_;
    const float* W = P.values().data_as<float>();
    const cudaStream_t st = I.ex.stream;
    const allocator alloc{params_->pool, params_->gpu, st};
    auto f = [](const device_buffer& b, shape sh) { return view_of<float>(b, sh); };

    device_buffer dx;
    if (last_) {
        us.dxf = alloc(n * d);
        I.blas.gemm(n, d, cfg.vocab, {us.dlogits.data_as<float>(), cfg.vocab, 1}, {W + P.lay.head, d, 1},
                    us.dxf.data_as<float>(), d, false);
        dx = alloc(n * d);
        zero(dx, st);
        layernorm_backward(I.ex, f(us.dxf, {n, d}), f(us.xh, {n, d}), f(us.meanf, {n}), f(us.rstdf, {n}),
                           P.value(P.lay.lnf_g, {d}), f(dx, {n, d}));
    } else {
        if (grad_out.rows != rows || grad_out.tokens != s || !grad_out.data ||
            static_cast<std::int64_t>(grad_out.data.bytes()) != n * d * std::int64_t(sizeof(float)))
            refuse("backward gradient of " + unit_name(u) + " has shape [" + std::to_string(grad_out.rows) + "," +
                   std::to_string(grad_out.tokens) + "] and " + std::to_string(grad_out.data.bytes()) +
                   " bytes; the unit needs [" + std::to_string(rows) + "," + std::to_string(s) + "," +
                   std::to_string(d) + "] floats");
        received_on(grad_out.data, st);
        dx = std::move(grad_out.data);
    }

    const float scale = 1.0f / std::sqrt(float(dh));
    device_buffer dattn = alloc(n * d), dp = alloc(rows * H * s * t1);
    for (int l = l1_ - 1; l >= l0_; --l) {
        const auto& bl = P.lay.blocks[static_cast<std::size_t>(l)];
        const std::size_t li = static_cast<std::size_t>(l - l0_);
        auto& sv = us.layers[li];
        auto& K = mb.k[li];
        auto& Vc = mb.v[li];
        auto& dK = mb.dk[li];
        auto& dV = mb.dv[li];
        // MLP
        sv.dout = alloc(n * d);
        copy(dx, sv.dout, st);
        sv.dfc = alloc(n * F);
        I.blas.gemm(n, F, d, {sv.dout.data_as<float>(), d, 1}, {W + bl.w_proj, 1, d}, sv.dfc.data_as<float>(), F, false);
        gelu_backward(I.ex, f(sv.fc, {n, F}), f(sv.dfc, {n, F}));
        sv.dln2 = alloc(n * d);
        I.blas.gemm(n, d, F, {sv.dfc.data_as<float>(), F, 1}, {W + bl.w_fc, 1, F}, sv.dln2.data_as<float>(), d, false);
        layernorm_backward(I.ex, f(sv.dln2, {n, d}), f(sv.xmid, {n, d}), f(sv.mean2, {n}), f(sv.rstd2, {n}),
                           P.value(bl.ln2_g, {d}), f(dx, {n, d}));
        // Attention
        sv.dproj = alloc(n * d);
        copy(dx, sv.dproj, st);
        I.blas.gemm(n, d, d, {sv.dproj.data_as<float>(), d, 1}, {W + bl.w_o, 1, d}, dattn.data_as<float>(), d, false);
        sv.dqkv = alloc(n * 3 * d);
        const float* probs = sv.probs.data_as<float>();
        float* dpp = dp.data_as<float>();
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* dO = dattn.data_as<float>() + r * s * d;
            // dP = dO V^T; dV += P^T dO
            I.blas.gemm_batched(H, s, t1, dh, {dO, d, 1}, dh, {Vc.data_as<float>() + r * Lb * d, 1, d}, dh,
                                dpp + r * H * s * t1, t1, s * t1, false);
            I.blas.gemm_batched(H, t1, dh, s, {probs + r * H * s * t1, 1, t1}, s * t1, {dO, d, 1}, dh,
                                dV.data_as<float>() + r * Lb * d, d, dh, true);
        }
        causal_softmax_backward(I.ex, t0, scale, f(sv.probs, {rows * H, s, t1}), f(dp, {rows * H, s, t1}));
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* dS = dpp + r * H * s * t1;
            // dQ = dS K (into dqkv's query columns); dK += dS^T Q
            I.blas.gemm_batched(H, s, dh, t1, {dS, t1, 1}, s * t1, {K.data_as<float>() + r * Lb * d, d, 1}, dh,
                                sv.dqkv.data_as<float>() + r * s * 3 * d, 3 * d, dh, false);
            I.blas.gemm_batched(H, t1, dh, s, {dS, 1, t1}, s * t1, {sv.qkv.data_as<float>() + r * s * 3 * d, 3 * d, 1},
                                dh, dK.data_as<float>() + r * Lb * d, d, dh, true);
        }
        // The slice's own K/V gradient is complete now (later slices already ran): into dqkv.
        kv_cache_copy(I.ex, t0, false, f(sv.dqkv, {n, 3 * d}), f(dK, {rows, Lb, d}), f(dV, {rows, Lb, d}));
        sv.dln1 = alloc(n * d);
        I.blas.gemm(n, d, 3 * d, {sv.dqkv.data_as<float>(), 3 * d, 1}, {W + bl.w_qkv, 1, 3 * d},
                    sv.dln1.data_as<float>(), d, false);
        layernorm_backward(I.ex, f(sv.dln1, {n, d}), f(sv.x, {n, d}), f(sv.mean1, {n}), f(sv.rstd1, {n}),
                           P.value(bl.ln1_g, {d}), f(dx, {n, d}));
    }
    if (t0 == 0) I.mbs.erase(mit);  // every slice of the microbatch is through: its caches go back

    if (first_) {
        us.dx0 = std::move(dx);
        return activation{rows, s, {}};
    }
    return activation{rows, s, std::move(dx)};
}

void part::backward_weight(const tpipe::unit& u)
{
    impl& I = *impl_;
    const gpt::config& cfg = params_->cfg;
    auto uit = I.units.find({u.microbatch, u.slice});
    if (uit == I.units.end() || !uit->second.input_done)
        refuse("backward_weight of microbatch " + std::to_string(u.microbatch) + " slice " +
               std::to_string(u.slice) + " before its backward_input");
    auto& us = uit->second;
    const std::int64_t rows = u.rows(), s = u.tokens(), t0 = u.token_begin;
    const std::int64_t d = cfg.d_model, F = cfg.d_ff(), n = rows * s;
    const parameters& P = *params_;
    float* G = P.grads().data_as<float>();
    auto c = [](const device_buffer& b, shape sh) { return view_of<const float>(b, sh); };

    if (last_) {
        const std::int64_t V = cfg.vocab;
        float* gh = I.head_grad ? I.head_grad.data_as<float>() : G + P.lay.head;
        I.blas.gemm(V, d, n, {us.dlogits.data_as<float>(), 1, V}, {us.xf.data_as<float>(), d, 1}, gh, d, true);
        layernorm_param_grad(I.ex, c(us.dxf, {n, d}), c(us.xh, {n, d}), c(us.meanf, {n}), c(us.rstdf, {n}),
                             P.grad(P.lay.lnf_g, {d}), P.grad(P.lay.lnf_b, {d}));
    }
    for (int l = l1_ - 1; l >= l0_; --l) {
        const auto& bl = P.lay.blocks[static_cast<std::size_t>(l)];
        auto& sv = us.layers[static_cast<std::size_t>(l - l0_)];
        I.blas.gemm(F, d, n, {sv.act.data_as<float>(), 1, F}, {sv.dout.data_as<float>(), d, 1}, G + bl.w_proj, d, true);
        column_sum(I.ex, c(sv.dout, {n, d}), P.grad(bl.b_proj, {d}));
        I.blas.gemm(d, F, n, {sv.ln2.data_as<float>(), 1, d}, {sv.dfc.data_as<float>(), F, 1}, G + bl.w_fc, F, true);
        column_sum(I.ex, c(sv.dfc, {n, F}), P.grad(bl.b_fc, {F}));
        layernorm_param_grad(I.ex, c(sv.dln2, {n, d}), c(sv.xmid, {n, d}), c(sv.mean2, {n}), c(sv.rstd2, {n}),
                             P.grad(bl.ln2_g, {d}), P.grad(bl.ln2_b, {d}));
        I.blas.gemm(d, d, n, {sv.attn.data_as<float>(), 1, d}, {sv.dproj.data_as<float>(), d, 1}, G + bl.w_o, d, true);
        column_sum(I.ex, c(sv.dproj, {n, d}), P.grad(bl.b_o, {d}));
        I.blas.gemm(d, 3 * d, n, {sv.ln1.data_as<float>(), 1, d}, {sv.dqkv.data_as<float>(), 3 * d, 1}, G + bl.w_qkv,
                    3 * d, true);
        column_sum(I.ex, c(sv.dqkv, {n, 3 * d}), P.grad(bl.b_qkv, {3 * d}));
        layernorm_param_grad(I.ex, c(sv.dln1, {n, d}), c(sv.x, {n, d}), c(sv.mean1, {n}), c(sv.rstd1, {n}),
                             P.grad(bl.ln1_g, {d}), P.grad(bl.ln1_b, {d}));
    }
    if (first_) {
        const gpt::batch& B = *I.data;
        embedding_backward(I.ex, {u.row_begin, rows, t0, s}, view_of<const std::int32_t>(I.inputs, {B.rows, B.seq_len}),
                           c(us.dx0, {n, d}), P.grad(P.lay.wte, {cfg.vocab, d}), P.grad(P.lay.wpe, {cfg.seq_len, d}));
    }
    I.units.erase(uit);
}

activation part::backward(const tpipe::unit& u, activation grad_out)
{
    auto r = backward_input(u, std::move(grad_out));
    backward_weight(u);
    return r;
}

double part::loss() const
{
    double sum = 0;
    TPIPE_CUDA_TRY(cudaMemcpyAsync(&sum, impl_->loss_sum.data(), sizeof sum, cudaMemcpyDeviceToHost, impl_->ex.stream));
    TPIPE_CUDA_TRY(cudaStreamSynchronize(impl_->ex.stream));
    return sum / static_cast<double>(impl_->total);
}

void part::flush_grad()
{
    impl& I = *impl_;
    if (!I.head_grad) return;
    const std::int64_t count = std::int64_t(params_->cfg.vocab) * params_->cfg.d_model;
    I.blas.add(count, I.head_grad.data_as<float>(), params_->grads().data_as<float>() + params_->lay.head);
    zero(I.head_grad, I.ex.stream);
}

double full_step(parameters& params, const gpt::batch& b, cudaStream_t stream)
{
    part p(params, 0, params.cfg.layers, true, true, stream);
    params.zero_grad(stream);
    p.begin(&b);
    const tpipe::unit u{0, 0, 0, b.rows, 0, b.seq_len};
    p.forward(u, {});
    p.backward(u, {});
    p.flush_grad();
    return p.loss();
}

double run_in_order(const std::vector<part*>& parts, const tpipe::scheme& units, const gpt::batch& b)
{
    if (parts.empty()) throw tpipe::invalid_argument("gpt::cuda::run_in_order: no parts");
    parts.front()->params().zero_grad(parts.front()->stream());
    for (auto* p : parts) p->begin(&b);
    // Parts may be on different streams: each hands its output to the next after its stream
    // finished (what the engine's completion event does in a pipeline).
    auto hand_over = [](part* p) { TPIPE_CUDA_TRY(cudaStreamSynchronize(p->stream())); };
    for (int i = 0; i < units.units(); ++i) {
        const auto u = units.at(i);
        activation x;
        for (auto* p : parts) {
            x = p->forward(u, std::move(x));
            hand_over(p);
        }
    }
    for (int i = units.units() - 1; i >= 0; --i) {
        const auto u = units.at(i);
        activation g;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
            g = (*it)->backward(u, std::move(g));
            hand_over(*it);
        }
    }
    for (auto* p : parts) {
        p->flush_grad();
        hand_over(p);
    }
    return parts.back()->loss();
}

// ---- AdamW ---------------------------------------------------------------------------------
adamw::adamw(parameters& p, gpt::adamw_options o, cudaStream_t stream) : p_(&p), o_(o)
{
    const std::int64_t count = p.lay.total;
    m_ = floats(p.pool, p.gpu, stream, count);
    v_ = floats(p.pool, p.gpu, stream, count);
    zero(m_, stream);
    zero(v_, stream);
    std::vector<unsigned char> decay(static_cast<std::size_t>(count), 0);
    for (const auto& t : p.lay.tensors)
        if (t.decay) std::fill_n(decay.begin() + t.offset, t.size(), 1);
    decay_ = p.pool.allocate(decay.size(), p.gpu, stream);
    TPIPE_CUDA_TRY(cudaMemcpyAsync(decay_.data(), decay.data(), decay.size(), cudaMemcpyHostToDevice, stream));
    sum_sq_ = p.pool.allocate(sizeof(double), p.gpu, stream);
    TPIPE_CUDA_TRY(cudaStreamSynchronize(stream));  // `decay` is a host temporary
}

void adamw::step(cudaStream_t stream)
{
    ++t_;
    const double bc1 = 1.0 - std::pow(o_.beta1, static_cast<double>(t_));
    const double bc2 = 1.0 - std::pow(o_.beta2, static_cast<double>(t_));
    const std::int64_t count = p_->lay.total;
    device_executor ex{stream};
    zero(sum_sq_, stream);
    sum_of_squares(ex, p_->grad(0, {count}), view_of<double>(sum_sq_, {1}));
    const body::adamw_coefficients k{float(o_.beta1), float(o_.beta2),   float(o_.eps),
                                     float(o_.lr * o_.weight_decay), float(o_.lr / bc1), float(1.0 / std::sqrt(bc2)),
                                     o_.max_grad_norm};
    adamw_update(ex, k, view_of<const double>(sum_sq_, {1}), p_->grad(0, {count}),
                 view_of<const unsigned char>(decay_, {count}), p_->value(0, {count}), view_of<float>(m_, {count}),
                 view_of<float>(v_, {count}));
}

double adamw::last_grad_norm(cudaStream_t stream) const
{
    double s = 0;
    TPIPE_CUDA_TRY(cudaMemcpyAsync(&s, sum_sq_.data(), sizeof s, cudaMemcpyDeviceToHost, stream));
    TPIPE_CUDA_TRY(cudaStreamSynchronize(stream));
    return std::sqrt(s);
}

} // namespace gpt::cuda
