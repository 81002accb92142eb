#pragma once
// The reference GPT on the CPU: a decoder-only transformer (token + position embedding,
// pre-LayerNorm blocks with causal multi-head attention and a GELU MLP, final LayerNorm, tied or
// untied LM head, softmax cross-entropy), with a hand-written backward pass.
//
// The unit of work is a tpipe::unit: rows [row_begin,row_end) of microbatch `microbatch` and
// tokens [token_begin,token_end) of them. A `gpt::part` holds a contiguous range of the model
// (layers [l0,l1), plus the embeddings if it is first and the head + loss if it is last) and keeps,
// per microbatch, the K/V cache of its layers: a unit attends to the cached K/V of tokens
// [0, token_begin) of its rows plus its own tokens (causal). Backward runs in reverse token order
// per microbatch and adds the gradient of earlier tokens' K/V into a per-microbatch accumulator.
//
// Loss = mean over all B*L tokens of the batch, computed as a sum of per-unit partial sums each
// divided by B*L, so any slicing gives the same loss and gradients.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tpipe/comm/reduction_order.hpp>
#include <tpipe/core/unit.hpp>
#include <tpipe/slice/scheme.hpp>
#include <tpipe/state/exact_square_sum.hpp>

#include "gpt/kernels.hpp"

namespace gpt {

struct config {
    int vocab = 256;      //!< byte-level tokens by default
    int d_model = 64;
    int heads = 4;
    int layers = 2;
    int seq_len = 64;     //!< positions (the longest sequence)
    int mlp_ratio = 4;
    bool tied = true;     //!< LM head shares the token embedding
    double ln_eps = 1e-5;

    int d_head() const { return d_model / heads; }
    int d_ff() const { return mlp_ratio * d_model; }
    //! Throws std::invalid_argument naming the bad field.
    void validate() const;
};

//! Megatron's tensor parallelism: tensor rank `rank` of `ranks` holds 1/ranks of every block's
//! matrices. Column-parallel (split by output columns): the QKV projection (by heads: each rank
//! keeps the Q, K and V columns of heads [rank H/t, (rank+1) H/t)) and the first MLP matrix;
//! row-parallel (split by input rows): the attention output and the second MLP matrix, whose
//! partial products the tensor group sums (part::set_tensor_sum); vocabulary-parallel: the token
//! embedding and the head (rows [rank V/t, (rank+1) V/t) each). LayerNorms, the row-parallel
//! layers' biases and the position embedding are whole on every tensor rank, which computes the
//! same values and gradients for them.
struct tensor_split {
    int rank = 0, ranks = 1;
    friend bool operator==(const tensor_split&, const tensor_split&) = default;
};

//! Sequence parallelism's share of a unit (part::set_sequence_parallel): tensor rank `rank` of
//! `ranks` holds positions [begin, begin + count) of the unit's n = rows x tokens positions
//! (row-major), per_rank = ceil(n / ranks) of them, the last ranks fewer (or none). The group's
//! collectives run on a buffer padded to ranks x per_rank positions, whose equal ring segments
//! (tpipe::ring_segment) are then whole positions, whatever the token slice's length.
struct sequence_share {
    std::int64_t begin = 0, count = 0, per_rank = 0;
    static sequence_share of(std::int64_t n, int ranks, int rank)
    {
        const std::int64_t per = (n + ranks - 1) / ranks, begin = std::min(n, per * rank);
        return {begin, std::min(n, begin + per) - begin, per};
    }
};

//! One named parameter tensor inside the flat parameter vector.
struct tensor_info {
    std::string name;
    std::int64_t offset = 0;
    std::vector<std::int64_t> shape;
    bool decay = false;   //!< AdamW weight decay applies (matrices and embeddings)
    std::int64_t global_offset = 0;  //!< where it lies in the whole model's flat vector
    bool tied_copy = false;          //!< the last stage's copy of the embedding, its tied LM head
    //! How the tensor is split over tensor ranks (tensor_split): whole on every rank, by columns
    //! (the last axis, in `blocks` equal blocks cut alike: Q, K and V), or by rows (the first axis).
    enum class split { whole, columns, rows };
    split cut = split::whole;
    int blocks = 1;
    bool replica_copy = false;  //!< a whole tensor on tensor rank > 0: counted once, by rank 0
    //! Where this rank's element i (of `shape`) lies in the whole tensor.
    std::int64_t whole_index(std::int64_t i, const tensor_split& tp) const;
    //! The whole tensor's element count (size() * ranks when split) and shape.
    std::int64_t whole_size(const tensor_split& tp) const { return cut == split::whole ? size() : size() * tp.ranks; }
    std::vector<std::int64_t> whole_shape(const tensor_split& tp) const
    {
        auto s = shape;
        if (cut == split::columns) s.back() *= tp.ranks;
        if (cut == split::rows) s.front() *= tp.ranks;
        return s;
    }
    //! Calls f(whole_first, first, count) for each run of this rank's elements [first, first + n)
    //! that is contiguous in the whole tensor too (one run unless split by columns: then one per
    //! row and block). A checkpoint saves a share as these ranges of the whole tensor.
    template <class F>
    void each_run(const tensor_split& tp, std::int64_t first, std::int64_t n, F&& f) const
    {
        if (cut != split::columns) {
            if (n > 0) f(whole_index(first, tp), first, n);
            return;
        }
        const std::int64_t w = shape.back() / blocks;  // a block's columns on this rank
        for (std::int64_t i = first, end = first + n; i < end;) {
            const std::int64_t len = std::min(end - i, w - (i % shape.back()) % w);
            f(whole_index(i, tp), i, len);
            i += len;
        }
    }
    std::int64_t size() const
    {
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        return n;
    }
};

//! What one stage's state holds: layers [layer_begin, layer_end), the embeddings when `first`,
//! the final LayerNorm and the LM head when `last` (a tied head: a copy of the embedding).
//! layer_end < 0: every layer. The default holds the whole model.
struct holding {
    int layer_begin = 0, layer_end = -1;
    bool first = true, last = true;
    tensor_split tensor{};  //!< this tensor rank's share of every block (the whole by default)
};

//! Offsets of every parameter in the flat vector. Weight matrices are stored [in, out] (y = x W + b),
//! except the embeddings/head, which are [vocab, d] and [seq_len, d].
//! A layout for a `holding` keeps the held tensors only, in the whole model's order, at offsets
//! of their own flat vector; the offsets of what it does not hold are -1.
struct layout {
    struct block {
        std::int64_t ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b, w_fc, b_fc, w_proj, b_proj;
        std::int64_t begin, end;  //!< [begin, end) of this block's parameters
    };
    std::int64_t wte = 0, wpe = 0, lnf_g = 0, lnf_b = 0, head = 0;  // head == wte when tied
    std::vector<block> blocks;
    std::vector<tensor_info> tensors;
    std::int64_t total = 0;

    explicit layout(const config& c);
    //! The tensors of `h` only. Throws std::invalid_argument for a layer range outside the model,
    //! or a tensor split that does not divide the heads and the MLP width.
    layout(const config& c, const holding& h);
    layout() = default;
    gpt::holding held;   //!< what this layout holds (resolved: layer_end >= 0)
    bool whole() const
    {
        return held.first && held.last && held.layer_begin == 0 && held.layer_end == static_cast<int>(blocks.size()) &&
               held.tensor.ranks == 1;
    }

    //! End of the parameters a frozen prefix of `frozen` layers holds: the embeddings and blocks
    //! [0, frozen) are the flat range [0, frozen_end(frozen)) (0 for none; a tied LM head is the
    //! token embedding, so it freezes with layer 0). Throws std::invalid_argument past the layer
    //! count, or on a layout of part of the model.
    std::int64_t frozen_end(int frozen) const;
    bool tied = true;
};

//! Flat parameter values and gradients: of the whole model, or of what one stage holds
//! (stage-local state: a process allocates only its stages' parameters).
template <class T>
struct parameters {
    config cfg;
    gpt::layout lay;
    std::vector<T> value, grad;

    explicit parameters(const config& c);
    parameters(const config& c, const holding& h);
    //! GPT-2 style initialisation: N(0, 0.02), projections into the residual scaled by 1/sqrt(2 layers).
    //! A stage's parameters get the values of the whole model's (the draws of the rest are skipped).
    void init(std::uint64_t seed);
    void zero_grad();
    std::int64_t size() const { return lay.total; }
};

//! The tokens of one training step: inputs and targets, both [rows, seq_len] row-major.
struct batch {
    std::int64_t rows = 0;
    std::int64_t seq_len = 0;
    std::vector<std::int32_t> inputs;
    std::vector<std::int32_t> targets;
};

//! Activations (or their gradients) flowing between parts: [rows, tokens, d_model] row-major.
template <class T>
struct activation {
    std::int64_t rows = 0;
    std::int64_t tokens = 0;
    std::vector<T> data;
};

//! A contiguous range of the model: layers [layer_begin, layer_end), with the embeddings when
//! first and the final LayerNorm, head and loss when last. Parameters live in a shared
//! `parameters` object; a part writes only the gradients of its own parameters (when the head is
//! tied and this part is last but not first, the head's gradient goes to a private buffer that
//! `flush_grad()` adds to the embedding gradient after the iteration).
template <class T>
class part {
public:
    part(parameters<T>& params, int layer_begin, int layer_end, bool first, bool last, int threads = 1);
    ~part();
    part(part&&) noexcept;
    part& operator=(part&&) noexcept;

    //! Starts an iteration: drops every cache and saved activation, sets the batch (kept by pointer)
    //! and the loss normaliser (token count of the whole batch, B*L by default).
    void begin(const batch* b, std::int64_t total_tokens = 0);

    //! Forward of one unit. The first part ignores `in` and embeds the unit's tokens; the last part
    //! adds the unit's loss contribution to loss() and returns an activation with no data.
    //! Throws std::logic_error for a unit out of causal order or outside the batch.
    activation<T> forward(const tpipe::unit& u, activation<T> in);
    //! Gradient with respect to the unit's input (and the K/V of earlier tokens, accumulated).
    //! The last part ignores `grad_out` (its seed is d loss / d logits). The first part returns an
    //! empty activation.
    activation<T> backward_input(const tpipe::unit& u, activation<T> grad_out);
    //! Adds the unit's parameter gradients. Must follow backward_input of the same unit.
    void backward_weight(const tpipe::unit& u);
    //! backward_input then backward_weight.
    activation<T> backward(const tpipe::unit& u, activation<T> grad_out);

    //! For profiling: makes microbatch `microbatch` (rows [row_begin,row_end)) look as if its
    //! tokens [0, context) had gone forward already (the cached K/V hold arbitrary values), so a
    //! unit with that context can be timed without running the prefix.
    void assume_context(int microbatch, std::int64_t row_begin, std::int64_t row_end, std::int64_t context);

    //! Sum of the units' loss contributions so far in this iteration (the mean loss once all ran).
    double loss() const { return loss_; }
    //! Adds privately accumulated gradients (tied head) into params.grad and, under sequence
    //! parallelism, sums the LayerNorms' gradients over the tensor group (every tensor rank calls
    //! it). Call once per iteration, after the last backward.
    void flush_grad();
    //! A tied LM head frozen with the embedding (a frozen prefix): the head reads the embedding
    //! but makes no gradient of it, and gradients() leaves it out (nothing to all-reduce).
    void freeze_head();
    //! Where this part's parameter gradients are, before flush_grad: its layers' range of
    //! params.grad, the embeddings when first, the final LayerNorm and the head when last (the
    //! tied head's private accumulator). Data parallelism all-reduces these.
    std::vector<std::span<T>> gradients();
    //! Where each span of gradients() lies in params.grad and params.value, in the same order
    //! (the tied head's accumulator: the head's place, where flush_grad adds it).
    std::vector<tpipe::element_range> gradient_ranges() const;

    //! Tensor parallelism (the parameters' holding has tensor ranks > 1): `sum` adds a span over
    //! the stage's tensor group in place, the same bits on every member (e.g. through a
    //! tpipe::blocking_group). Called twice per layer in the forward (after the attention output
    //! and the second MLP matrix) and twice in the backward (the inputs' gradients of the QKV and
    //! first MLP matrices); the first part once per unit (the embedding lookup), the last three
    //! times forward (the cross-entropy) and once backward. Every tensor rank calls it in the same order.
    void set_tensor_sum(std::function<void(std::span<T>)> sum) { tensor_sum_ = std::move(sum); }

    //! Megatron's sequence parallelism (with tensor ranks > 1 and the group's sum): the LayerNorm
    //! regions, the residual stream between a row-parallel and a column-parallel layer, are split
    //! along the unit's positions (sequence_share), so each tensor rank keeps and normalises 1/t
    //! of them. `reduce_scatter` and `all_gather` act in place on a span of t equal ring segments,
    //! as tpipe::reduce_scatter_communicator defines them. Where a row-parallel product was summed
    //! over the group, it is reduce-scattered; before a column-parallel product the positions are
    //! all-gathered; the backward does the converse (the same bytes as the sums they replace). What
    //! crosses a stage boundary is this rank's positions only, and the first part gathers its
    //! input's gradient back for the vocabulary-parallel embedding. The LayerNorms' gradients,
    //! each rank's over its own positions, are summed over the group in flush_grad(). With token
    //! slices, each slice's positions are split again among the tensor ranks; each rank still
    //! keeps the K/V of its own heads at every position (the QKV product reads gathered inputs).
    void set_sequence_parallel(std::function<void(std::span<T>)> reduce_scatter,
                               std::function<void(std::span<T>)> all_gather)
    {
        reduce_scatter_ = std::move(reduce_scatter);
        all_gather_ = std::move(all_gather);
    }
    bool sequence_parallel() const { return reduce_scatter_ && params_->lay.held.tensor.ranks > 1; }
    //! This tensor rank's positions of unit `u` (all of them without sequence parallelism).
    sequence_share positions(const tpipe::unit& u) const;

    //! Activation recomputation: a unit keeps only its input to this part from its forward to its
    //! backward, which recomputes the part's forward first: the same inputs, weights and kernels,
    //! so bitwise the same gradients. The K/V cache of a microbatch's earlier tokens is kept, not
    //! recomputed: it is the context later slices attend to, and every slice's backward needs it
    //! (recomputing it would redo the forward of all earlier slices). The last part keeps its
    //! head's saves (the softmax gradient: the loss is not computed twice).
    void set_recompute(bool on) { recompute_ = on; }
    bool recompute() const { return recompute_; }

    bool first() const { return first_; }
    bool last() const { return last_; }
    int layer_begin() const { return l0_; }
    int layer_end() const { return l1_; }
    thread_pool& pool() { return *pool_; }
    parameters<T>& params() { return *params_; }

private:
    std::vector<T> embed(const tpipe::unit& u);
    void forward_blocks(const tpipe::unit& u, std::vector<T>& x);
    void sum_over_tensor_group(std::vector<T>& v);
    //! Where a row-parallel product of `size` values goes before its group sum: `out` itself, or
    //! under sequence parallelism a workspace (what a rank keeps is 1/t of it).
    std::vector<T>& partial_for(std::vector<T>& out, std::int64_t size);
    //! The group's sum of the partial [n x d] product (from partial_for(out, n x d)) into `out`:
    //! all of it, or this rank's positions only under sequence parallelism.
    void reduce_positions(const tpipe::unit& u, std::vector<T>& partial, std::vector<T>& out);
    //! The unit's whole [n x d] into `whole` from this rank's positions (gathered under sequence
    //! parallelism; a copy without it).
    void gather_positions(const tpipe::unit& u, const T* mine, std::vector<T>& whole);
    //! y (this rank's positions, or all) = LN(x) into `whole` (gathered under sequence parallelism).
    void norm_positions(const tpipe::unit& u, const T* x, std::int64_t g, std::int64_t b, std::vector<T>& whole,
                        std::vector<T>& mean, std::vector<T>& rstd);
    //! The attention width of this tensor rank's heads (d_model at one tensor rank).
    std::int64_t attention_width() const { return params_->cfg.d_model / params_->lay.held.tensor.ranks; }
    //! The vocabulary rows of the embedding and head this tensor rank holds: [vocab_begin(), + vocab_share()).
    std::int64_t vocab_share() const { return params_->cfg.vocab / params_->lay.held.tensor.ranks; }
    std::int64_t vocab_begin() const { return vocab_share() * params_->lay.held.tensor.rank; }
    double vocab_parallel_cross_entropy(const tpipe::unit& u, T scale, std::vector<T>& logits);
    std::function<void(std::span<T>)> tensor_sum_, reduce_scatter_, all_gather_;
    struct impl;
    std::unique_ptr<impl> impl_;
    parameters<T>* params_;
    int l0_, l1_;
    bool first_, last_;
    std::unique_ptr<thread_pool> pool_;
    double loss_ = 0;
    bool recompute_ = false;
};

//! Runs one whole iteration on a single part holding the whole model, as one unit (the
//! non-pipelined reference). Returns the mean loss; gradients are in params.grad (zeroed first).
template <class T>
double full_step(parameters<T>& params, const batch& b, int threads = 1);

//! Runs one iteration through a chain of parts without a pipeline runtime: every unit of the
//! scheme forward through all parts (microbatch-major, slices ascending), then backward in the
//! reverse order. Zeroes the gradients first, flushes at the end; returns the mean loss.
template <class T>
double run_in_order(const std::vector<part<T>*>& parts, const tpipe::scheme& units, const batch& b);

//! AdamW with bias correction; decay only on tensors marked `decay`. Gradients are first
//! clipped to a global L2 norm of `max_grad_norm` (<= 0: no clipping).
//!
//! Freezing: after freeze(end), the parameters [0, end) are frozen: step() neither reads their
//! gradients nor changes their values (no decay either), and their moments are released (the
//! optimizer keeps state for [end, size) only). The frozen range only grows.
struct adamw_options {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, max_grad_norm = 1.0;
};
template <class T>
class adamw {
public:
    adamw(const parameters<T>& p, adamw_options o);
    void step(parameters<T>& p);
    std::int64_t steps() const { return t_; }
    //! Freezes the parameters [0, end) (see above). Throws std::invalid_argument if end shrinks
    //! the frozen range or lies outside the parameters.
    void freeze(std::int64_t end);
    std::int64_t frozen() const { return frozen_; }
    //! ZeRO-1: keep moments for, count in squares() and step only the elements `owned` of the
    //! flat vector (any order, overlaps merged); the others are stepped by other data-parallel
    //! members. Call on a fresh optimizer (no step, nothing frozen).
    void shard(std::vector<tpipe::element_range> owned);
    //! The elements this optimizer steps, in order: its moments are theirs, concatenated.
    const std::vector<tpipe::element_range>& owned() const { return owned_; }
    //! Calls f(t, first, count, at) for every piece of a tensor of `p` this optimizer steps:
    //! `count` elements of tensor t from its element `first`, whose moments start at element `at`
    //! of its state. Unsharded, the pieces are whole (active) tensors; sharded, the parts of
    //! tensors in this replica's shard.
    template <class F>
    void each_piece(const parameters<T>& p, F&& f) const
    {
        std::size_t at = 0;
        for (const auto& r : owned_) {
            for (const auto& t : p.lay.tensors) {
                const auto b = std::max<std::int64_t>(t.offset, static_cast<std::int64_t>(r.begin));
                const auto e = std::min<std::int64_t>(t.offset + t.size(), static_cast<std::int64_t>(r.begin + r.size));
                if (e > b) f(t, b - t.offset, static_cast<std::size_t>(e - b), at + static_cast<std::size_t>(b) - r.begin);
            }
            at += r.size;
        }
    }
    //! The state of the active parameters owned() (unsharded: [frozen(), size)): first and second
    //! moments, one value per parameter each, and the step count (what a new replica receives).
    std::span<T> first_moments()
    {
        allocate();
        return m_;
    }
    std::span<T> second_moments()
    {
        allocate();
        return v_;
    }
    std::int64_t& step_count() { return t_; }
    //! Global gradient norm seen by the last step (before clipping).
    double last_grad_norm() const { return norm_; }

    //! The clip's sum of squares, kept exactly (tpipe/state/exact_square_sum.hpp): the norm has
    //! the same bits however the gradients are split over stages, processes or shards.
    using square_sum = tpipe::exact_square_sum<T>;
    //! Stage-local state: the squares of p's active (and owned) gradients (a tied copy of the
    //! embedding is left out: its holder counts it). Add the stages' sums, in any order.
    square_sum squares(const parameters<T>& p) const;
    //! A step whose clip uses the global norm of `all_squares`, the squares of every stage.
    void step(parameters<T>& p, const square_sum& all_squares);

private:
    void update(parameters<T>& p, double norm);
    void squares_into(const parameters<T>& p, square_sum& out) const;
    void allocate();
    adamw_options o_;
    std::int64_t size_ = 0;                      //!< parameters of the stage
    std::vector<tpipe::element_range> decayed_;  //!< the tensors weight decay applies to
    bool allocated_ = false;
    square_sum scratch_;
    std::vector<T> m_, v_;
    std::vector<unsigned char> decay_;
    std::vector<tpipe::element_range> owned_;
    std::int64_t t_ = 0;
    std::int64_t frozen_ = 0;
    double norm_ = 0;
};

//! Why unit `u` lies outside batch `b` (rows, tokens), or empty when it fits: the check both
//! models (CPU and CUDA) make before a forward.
inline std::string unit_outside(const tpipe::unit& u, const batch& b)
{
    if (u.row_begin >= 0 && u.row_end <= b.rows && u.rows() >= 1 && u.token_begin >= 0 && u.token_end <= b.seq_len &&
        u.tokens() >= 1)
        return {};
    return "unit rows [" + std::to_string(u.row_begin) + "," + std::to_string(u.row_end) + ") tokens [" +
           std::to_string(u.token_begin) + "," + std::to_string(u.token_end) + ") do not fit the batch " +
           std::to_string(b.rows) + " x " + std::to_string(b.seq_len);
}

//! Byte-level data: samples `rows` random windows of seq_len+1 bytes of `text`.
batch sample_batch(const std::string& text, std::int64_t rows, std::int64_t seq_len, std::uint64_t& rng_state);

} // namespace gpt
