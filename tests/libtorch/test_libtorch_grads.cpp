// The libtorch adapter's gradients on stage threads: tied parameters (one tensor in two stages)
// summed in stage order, a leaf outside a stage's list refused under split backward, a split
// backward that computes each product once, and
// check_token_slicing naming a stage not prepared for token slices; a checkpoint of parameters
// and AdamW state resumed on another cut; batch_io against the plain loop; the tensor-parallel
// layers against their torch::nn counterparts, on thread groups.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <torch/torch.h>
#undef CHECK  // Debian's libtorch brings glog's CHECK; the tests use Catch's
#include <catch2/catch.hpp>

#include <tpipe/adapters/libtorch.hpp>
#include <tpipe/adapters/libtorch/split_backward.hpp>
#include <tpipe/adapters/libtorch/tensor_parallel.hpp>
#include <tpipe/comm/blocking_group.hpp>
#include <tpipe/comm/thread_communicator.hpp>
#include <tpipe/exec/run.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/spec.hpp>
#include <tpipe/state/checkpoint_writer.hpp>

#include "gpt.hpp"

namespace {

using tpipe::libtorch::module_stage;
constexpr std::int64_t V = 50, D = 16, B = 4, T = 12;

//! A head whose weight is given (the embedding's own tensor: tied; or a copy: untied).
struct HeadImpl : torch::nn::Module {
    torch::Tensor weight;
    explicit HeadImpl(torch::Tensor w) : weight(register_parameter("weight", std::move(w))) {}
    torch::Tensor forward(torch::Tensor x) { return torch::matmul(torch::tanh(x), weight.t()); }
};
TORCH_MODULE(Head);

//! Embedding, Linear | Linear, Head: stage 0 holds the embedding, stage 1 the head.
torch::nn::Sequential make(bool tied)
{
    torch::manual_seed(7);
    torch::nn::Embedding emb(V, D);
    torch::Tensor w = tied ? emb->weight : emb->weight.detach().clone();
    return torch::nn::Sequential(emb, torch::nn::Linear(D, D), torch::nn::Linear(D, D), Head(w));
}

struct batch {
    torch::Tensor ids = torch::randint(V, {B, T}, torch::TensorOptions().dtype(torch::kLong).requires_grad(false));
    torch::Tensor dy = torch::randn({B, T, V});  // the gradient of the loss sum(dy * logits)
};

void train(tpipe::uniform_pipeline<module_stage>& pipe, const std::string& schedule, const std::string& slicer,
           const batch& b)
{
    const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{.ranks = 2},
                                                             tpipe::scheme_from_spec(slicer, {B, T}));
    tpipe::cpu_engine engine(2);
    tpipe::io_for<tpipe::uniform_pipeline<module_stage>> io;
    io.source = [&](const tpipe::unit& u) { return b.ids.slice(0, u.row_begin, u.row_end).slice(1, u.token_begin, u.token_end); };
    io.output_grad = [&](const tpipe::unit& u, torch::Tensor&&) {
        return b.dy.slice(0, u.row_begin, u.row_end).slice(1, u.token_begin, u.token_end).contiguous();
    };
    tpipe::run(pipe, prog, engine, io);
}

} // namespace

TEST_CASE("a parameter tied between two stage threads gets both stages' gradients, summed in stage order",
          "[libtorch]")
{
    torch::manual_seed(1);
    const batch b;
    const auto [schedule, slicer] = GENERATE(table<std::string, std::string>({
        {"zb-h1", "microbatch:4"}, {"zb-h1", "grid:2:4,8"}, {"1f1b", "microbatch:4"}}));
    CAPTURE(schedule, slicer);
    // Untied: the embedding's and the head's gradients, each accumulated by one stage thread.
    auto untied = make(false);
    tpipe::uniform_pipeline<module_stage> upipe(tpipe::libtorch::cut(untied, {0, 2, 4}));
    train(upipe, schedule, slicer, b);
    const torch::Tensor g_emb = untied[0]->named_parameters()["weight"].grad();
    const torch::Tensor g_head = untied[3]->named_parameters()["weight"].grad();
    REQUIRE(g_emb.defined());
    REQUIRE(g_head.defined());
    for (int repeat = 0; repeat < 4; ++repeat) {  // the same bits whatever the threads' timing
        auto tied = make(true);
        std::vector<module_stage> stages = tpipe::libtorch::cut(tied, {0, 2, 4});
        const torch::Tensor w = tied[0]->named_parameters()["weight"];
        REQUIRE(stages[0].tied(0));
        REQUIRE(stages[1].tied(stages[1].parameters().size() - 1));
        tpipe::uniform_pipeline<module_stage> pipe(std::move(stages));
        train(pipe, schedule, slicer, b);
        tpipe::libtorch::sum_tied_gradients(pipe);
        REQUIRE(w.grad().defined());
        CAPTURE(repeat, (w.grad() - (g_emb + g_head)).abs().max().item<double>());
        CHECK(torch::equal(w.grad(), g_emb + g_head));
    }
}

TEST_CASE("tie() names the tied parameter and both stages; a run refuses to start with unsummed tied gradients",
          "[libtorch]")
{
    auto tied = make(true);
    std::vector<module_stage> stages = tpipe::libtorch::cut(tied, {0, 2, 4});
    const auto lines = tpipe::libtorch::tie(stages);
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "'0.weight': stage 0 (modules [0, 2), from torch::nn::EmbeddingImpl), stage 1 (modules [2, 4), "
                      "from torch::nn::LinearImpl)");
    tpipe::uniform_pipeline<module_stage> pipe(std::move(stages));
    const batch b;
    train(pipe, "zb-h1", "microbatch:2", b);
    try {
        train(pipe, "zb-h1", "microbatch:2", b);  // sum_tied_gradients forgotten
        FAIL("the second run should have refused to start");
    } catch (const tpipe::execution_error& e) {
        CHECK_THAT(e.what(), Catch::Contains("tied parameter '0.weight'") && Catch::Contains("sum_tied_gradients"));
    }
}

TEST_CASE("under split backward, a tensor a stage's graph reaches but its list lacks is refused by name", "[libtorch]")
{
    torch::manual_seed(2);
    torch::nn::Sequential body(torch::nn::Embedding(V, D), torch::nn::Linear(D, D));
    const torch::Tensor emb = body[0]->named_parameters()["weight"];
    auto head = [emb](torch::Tensor x) { return torch::matmul(torch::tanh(x), emb.t()); };
    const batch b;
    {
        std::vector<module_stage> stages;
        stages.push_back(module_stage::of(body, "body"));
        stages.emplace_back(head, std::vector<torch::Tensor>{}, "head");  // uses the embedding, lists nothing
        tpipe::libtorch::tie(stages);
        tpipe::uniform_pipeline<module_stage> pipe(std::move(stages));
        try {
            train(pipe, "zb-h1", "microbatch:2", b);
            FAIL("the run should have refused the unlisted embedding weight");
        } catch (const tpipe::execution_error& e) {
            CHECK(e.stage() == 1);
            CHECK_THAT(e.what(), Catch::Contains("head: its graph reaches the parameter '0.weight' of body") &&
                                     Catch::Contains("would drop its gradient"));
        }
    }
    // Listed by both stages (tied), the gradient is the plain one.
    for (auto& p : body->parameters()) p.mutable_grad() = torch::Tensor();
    std::vector<module_stage> stages;
    stages.push_back(module_stage::of(body, "body"));
    stages.emplace_back(head, std::vector<torch::Tensor>{emb}, "head");
    CHECK(tpipe::libtorch::tie(stages).size() == 1);
    tpipe::uniform_pipeline<module_stage> pipe(std::move(stages));
    train(pipe, "zb-h1", "microbatch:2", b);
    tpipe::libtorch::sum_tied_gradients(pipe);
    const torch::Tensor piped = emb.grad().clone();
    emb.mutable_grad() = torch::Tensor();
    (torch::matmul(torch::tanh(body->forward(b.ids)), emb.t()) * b.dy).sum().backward();
    CHECK(torch::allclose(piped, emb.grad(), 1e-5, 1e-6));
}

namespace {
//! y = x wᵀ whose backward counts the products it computes: x's gradient and w's, each only
//! when the engine asks for it.
struct counted_linear : torch::autograd::Function<counted_linear> {
    static inline int input_products = 0, weight_products = 0;
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor w)
    {
        ctx->save_for_backward({x, w});
        return torch::matmul(x, w.t());
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list dy)
    {
        const auto saved = ctx->get_saved_variables();
        torch::Tensor dx, dw;
        if (ctx->needs_input_grad(0)) ++input_products, dx = torch::matmul(dy[0], saved[1]);
        if (ctx->needs_input_grad(1)) ++weight_products, dw = torch::matmul(dy[0].t(), saved[0]);
        return {dx, dw};
    }
};
} // namespace

namespace {
//! The gradients of `wrt` from `forward`'s outputs: (whole backward, split backward).
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>
whole_and_split(const std::function<std::vector<torch::Tensor>()>& forward, const std::vector<torch::Tensor>& grads,
                const torch::Tensor& x, const std::vector<torch::Tensor>& params)
{
    std::vector<torch::Tensor> wrt{x};
    wrt.insert(wrt.end(), params.begin(), params.end());
    auto whole = torch::autograd::grad(forward(), wrt, grads, false, false, /*allow_unused=*/true);
    tpipe::libtorch::detail::split_backward split;
    auto got = split.input_half(forward(), grads, {x}, params);
    REQUIRE(got.size() == 1);
    const auto weights = split.weight_half();
    REQUIRE(weights.size() == params.size());
    got.insert(got.end(), weights.begin(), weights.end());
    return {whole, got};
}

void check_same(const std::vector<torch::Tensor>& whole, const std::vector<torch::Tensor>& split)
{
    for (std::size_t i = 0; i < whole.size(); ++i) {
        INFO("gradient " << i << " (0: the input)");
        REQUIRE(whole[i].defined() == split[i].defined());
        if (whole[i].defined()) CHECK(torch::allclose(split[i], whole[i], 1e-6, 1e-7));
    }
}
} // namespace

TEST_CASE("a split backward computes every product once, and the gradients of the whole backward", "[libtorch]")
{
    torch::manual_seed(3);
    auto param = [] { return torch::randn({D, D}).requires_grad_(true); };
    const std::vector<torch::Tensor> params{param(), param(), param(), torch::randn({D}).requires_grad_(true),
                                            param() /* unused */};
    const torch::Tensor &w1 = params[0], &w2 = params[1], &w3 = params[2], &bias = params[3];
    const torch::Tensor x = torch::randn({B, D}).requires_grad_(true);
    const std::vector<torch::Tensor> grads{torch::randn({B, D}), torch::randn({D, D})};
    // w2 twice at one depth; w3 on the input side and, alone, in a second output (as a cached
    // key that a first stage keeps): it gets gradient from both.
    auto forward = [&] {
        const torch::Tensor h = torch::tanh(counted_linear::apply(x, w1));
        const torch::Tensor y = counted_linear::apply(h, w2) + counted_linear::apply(h * 2, w2) +
                                counted_linear::apply(x, w3) + bias;
        return std::vector<torch::Tensor>{y, torch::sin(w3)};
    };
    counted_linear::input_products = counted_linear::weight_products = 0;
    torch::autograd::grad(forward(), {x, w1, w2, w3, bias}, grads);
    CHECK(counted_linear::input_products == 4);  // the whole backward: four of each
    CHECK(counted_linear::weight_products == 4);

    tpipe::libtorch::detail::split_backward split;
    const auto roots = forward();
    counted_linear::input_products = counted_linear::weight_products = 0;
    split.input_half(roots, grads, {x}, params);
    CHECK(counted_linear::input_products == 4);
    CHECK(counted_linear::weight_products == 0);  // no parameter's product in the input half
    split.weight_half();
    CHECK(counted_linear::input_products == 4);  // the weight half walks no activation gradient again
    CHECK(counted_linear::weight_products == 4);

    const auto [whole, parts] = whole_and_split(forward, grads, x, params);
    check_same(whole, parts);
    CHECK(torch::equal(parts[0], whole[0]));  // the input's gradient: the same nodes, in the same order
    CHECK_FALSE(parts.back().defined());      // the unused parameter: no gradient, as allow_unused

    SECTION("a weight used at two depths (shared layers) still gets its gradient once")
    {
        auto shared = [&] { return std::vector<torch::Tensor>{counted_linear::apply(counted_linear::apply(x, w1), w1)}; };
        const auto [w, p] = whole_and_split(shared, {grads[0]}, x, {w1});
        check_same(w, p);
    }
    SECTION("an output that requires no grad carries nothing back")
    {
        const auto whole_y = torch::autograd::grad({counted_linear::apply(x, w1)}, {x, w1}, {grads[0]});
        tpipe::libtorch::detail::split_backward with_constant;
        const auto got = with_constant.input_half({counted_linear::apply(x, w1), torch::ones({B, D})},
                                                  {grads[0], grads[0]}, {x}, {w1});
        CHECK(torch::equal(got[0], whole_y[0]));
        CHECK(torch::equal(with_constant.weight_half()[0], whole_y[1]));
    }
    SECTION("with no input that requires grad (a first stage), the weight half is the whole backward")
    {
        const torch::Tensor ids = x.detach();
        auto first = [&] { return std::vector<torch::Tensor>{counted_linear::apply(ids, w1) + bias}; };
        const auto whole_first = torch::autograd::grad(first(), {w1, bias}, {grads[0]});
        tpipe::libtorch::detail::split_backward split_first;
        CHECK(split_first.input_half(first(), {grads[0]}, {}, {w1, bias}).empty());
        const auto got = split_first.weight_half();
        CHECK(torch::equal(got[0], whole_first[0]));
        CHECK(torch::equal(got[1], whole_first[1]));
    }
}

namespace {
//! Positions without the slice's offset: right unsliced, wrong in token slices.
struct PositionsImpl : torch::nn::Module {
    torch::Tensor table = register_parameter("table", torch::randn({T, D}));
    torch::Tensor forward(torch::Tensor x) { return x + table.slice(0, 0, x.size(1)); }
};
TORCH_MODULE(Positions);
} // namespace

TEST_CASE("check_token_slicing names the first stage whose token slices differ from the unsliced run", "[libtorch]")
{
    torch::manual_seed(3);
    const torch::Tensor ids = torch::randint(V, {2, T}, torch::kLong);
    torch::nn::Sequential unprepared(torch::nn::Embedding(V, D), torch::nn::Linear(D, D), Positions(),
                                     torch::nn::Linear(D, V));
    tpipe::uniform_pipeline<module_stage> bad(tpipe::libtorch::cut(unprepared, {0, 2, 4}));
    CHECK_THROWS_WITH(tpipe::libtorch::check_token_slicing(bad, ids, {6, 3, 3}),
                      Catch::StartsWith("stage 1 (modules [2, 4), from ") &&
                          Catch::Contains("PositionsImpl) gives different outputs in token slices than unsliced, "
                                          "from token 6 on") &&
                          Catch::Contains("context_tokens()"));
    CHECK_NOTHROW(tpipe::libtorch::check_token_slicing(bad, ids, {12}));  // one slice is the unsliced run
    // The example's GPT (positions offset, attention through a kv_cache) passes.
    const libtorch_gpt::config c{.vocab = V, .seq_len = T, .d_model = D, .heads = 2, .layers = 2};
    auto gpt = libtorch_gpt::make_gpt(c);
    tpipe::uniform_pipeline<module_stage> good(tpipe::libtorch::cut(gpt, {0, 2, 4}));
    CHECK_NOTHROW(tpipe::libtorch::check_token_slicing(good, ids, {6, 3, 3}));
}


TEST_CASE("a libtorch checkpoint restores parameters and AdamW state so that training continues bitwise",
          "[libtorch][checkpoint]")
{
    // Two parameter groups (no weight decay on the embedding) and amsgrad: every piece of state.
    auto optimizer_of = [](torch::nn::Sequential m, double beta1) {
        std::vector<torch::optim::OptimizerParamGroup> groups;
        groups.emplace_back(m->ptr(0)->parameters(), std::make_unique<torch::optim::AdamWOptions>(
                                                    torch::optim::AdamWOptions(1e-2).betas({beta1, 0.99}).weight_decay(0).amsgrad(true)));
        std::vector<torch::Tensor> rest;
        for (std::size_t k = 1; k < m->size(); ++k)
            for (const auto& p : m->ptr(k)->parameters()) rest.push_back(p);
        std::erase_if(rest, [&](const torch::Tensor& p) { return p.is_same(m->ptr(0)->parameters()[0]); });  // tied head
        groups.emplace_back(rest, std::make_unique<torch::optim::AdamWOptions>(
                                      torch::optim::AdamWOptions(1e-2).betas({beta1, 0.99}).weight_decay(0.1).amsgrad(true)));
        return torch::optim::AdamW(groups, torch::optim::AdamWOptions(1e-2));
    };
    auto step = [](tpipe::uniform_pipeline<module_stage>& pipe, torch::optim::AdamW& opt, const batch& b) {
        opt.zero_grad();
        train(pipe, "zb-h1", "grid:2:6,6", b);
        tpipe::libtorch::sum_tied_gradients(pipe);
        opt.step();
    };
    torch::manual_seed(11);
    const std::vector<batch> data(4);
    const std::string dir = (std::filesystem::temp_directory_path() / ("tpipe_libtorch_ckpt_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);

    auto a = make(true);
    tpipe::uniform_pipeline<module_stage> pa(tpipe::libtorch::cut(a, {0, 2, 4}));
    auto oa = optimizer_of(a, 0.9);
    step(pa, oa, data[0]);
    step(pa, oa, data[1]);
    {
        tpipe::state::checkpoint_writer out({.root = dir, .shards = 2});
        tpipe::state::manifest m;
        m.step = 2;
        m.optimizer = tpipe::libtorch::adamw_json(oa);
        std::vector<tpipe::state::shard_snapshot> shards;
        for (std::size_t i = 0; i < 2; ++i) {  // one shard a stage, as two processes would write them
            shards.emplace_back("stage-" + std::to_string(i) + ".bin");
            tpipe::libtorch::add_stage(shards.back(), pa.stage(i), oa);
        }
        out.begin(std::move(m), std::move(shards));
        out.finish();
    }
    const tpipe::state::checkpoint_reader in(dir);
    REQUIRE(in.has("adamw.vmax/0.weight"));

    // Loaded on one stage (another cut): each tensor is read by name.
    auto b = make(true);
    tpipe::uniform_pipeline<module_stage> pb(tpipe::libtorch::cut(b, {0, 4}));
    auto ob = optimizer_of(b, 0.9);
    tpipe::libtorch::load_stage(in, pb.stage(0), ob);
    {
        const auto want = a->parameters(), got = b->parameters();
        REQUIRE(want.size() == got.size());
        for (std::size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i], got[i]));
    }

    // Resumed on the saver's cut, in another model: two more steps are bitwise the saver's.
    auto c = make(true);
    tpipe::uniform_pipeline<module_stage> pc(tpipe::libtorch::cut(c, {0, 2, 4}));
    auto oc = optimizer_of(c, 0.9);
    for (std::size_t i = 0; i < 2; ++i) tpipe::libtorch::load_stage(in, pc.stage(i), oc);
    for (std::size_t s = 2; s < 4; ++s) {
        step(pa, oa, data[s]);
        step(pc, oc, data[s]);
    }
    {
        const auto want = a->parameters(), got = c->parameters();
        for (std::size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i], got[i]));
    }

    // Another beta1 is refused, naming it.
    auto d = make(true);
    tpipe::uniform_pipeline<module_stage> pd(tpipe::libtorch::cut(d, {0, 4}));
    auto od = optimizer_of(d, 0.8);
    CHECK_THROWS_WITH(tpipe::libtorch::load_stage(in, pd.stage(0), od),
                      Catch::Contains("another AdamW") && Catch::Contains("group 0 beta1 0.9") &&
                          Catch::Contains("(this optimizer: 0.8"));
    std::filesystem::remove_all(dir);
}

TEST_CASE("a libtorch checkpoint of stage-local optimizers resumes each stage from its own shard's state",
          "[libtorch][checkpoint]")
{
    // Each stage with an optimizer of its own parameters only (as a process holding one stage
    // has): the manifest's optimizer section is the first stage's, and its group sizes differ
    // from the second stage's optimizer, which must still load.
    auto stage_optimizers = [](tpipe::uniform_pipeline<module_stage>& pipe) {
        std::vector<std::unique_ptr<torch::optim::AdamW>> opts;
        for (std::size_t i = 0; i < pipe.size(); ++i)
            opts.push_back(std::make_unique<torch::optim::AdamW>(pipe.stage(i).parameters(),
                                                                 torch::optim::AdamWOptions(1e-2).weight_decay(0.05)));
        return opts;
    };
    auto step = [](tpipe::uniform_pipeline<module_stage>& pipe, std::vector<std::unique_ptr<torch::optim::AdamW>>& opts,
                   const batch& b) {
        for (auto& o : opts) o->zero_grad();
        train(pipe, "1f1b", "microbatch:2", b);
        for (auto& o : opts) o->step();
    };
    torch::manual_seed(12);
    const std::vector<batch> data(4);
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("tpipe_libtorch_ckpt_local_" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);

    auto a = make(false);
    tpipe::uniform_pipeline<module_stage> pa(tpipe::libtorch::cut(a, {0, 1, 4}));
    auto oa = stage_optimizers(pa);
    REQUIRE(oa[0]->param_groups()[0].params().size() != oa[1]->param_groups()[0].params().size());
    step(pa, oa, data[0]);
    step(pa, oa, data[1]);
    {
        tpipe::state::checkpoint_writer out({.root = dir, .shards = 2});
        tpipe::state::manifest m;
        m.step = 2;
        m.optimizer = tpipe::libtorch::adamw_json(*oa[0]);
        std::vector<tpipe::state::shard_snapshot> shards;
        for (std::size_t i = 0; i < 2; ++i) {
            shards.emplace_back("stage-" + std::to_string(i) + ".bin");
            tpipe::libtorch::add_stage(shards.back(), pa.stage(i), *oa[i]);
        }
        out.begin(std::move(m), std::move(shards));
        out.finish();
    }
    const tpipe::state::checkpoint_reader in(dir);
    auto c = make(false);
    tpipe::uniform_pipeline<module_stage> pc(tpipe::libtorch::cut(c, {0, 1, 4}));
    auto oc = stage_optimizers(pc);
    for (std::size_t i = 0; i < 2; ++i) tpipe::libtorch::load_stage(in, pc.stage(i), *oc[i]);
    for (std::size_t s = 2; s < 4; ++s) {
        step(pa, oa, data[s]);
        step(pc, oc, data[s]);
    }
    const auto want = a->parameters(), got = c->parameters();
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(torch::equal(want[i], got[i]));
    std::filesystem::remove_all(dir);
}

namespace {
//! A per-token model (no attention: token slices are exact) and its plain loss and gradients.
torch::nn::Sequential per_token()
{
    torch::manual_seed(21);
    return torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::Tanh(), torch::nn::Linear(8, 3));
}
torch::Tensor mse(const torch::Tensor& y, const torch::Tensor& t) { return torch::nn::functional::mse_loss(y, t); }
} // namespace

TEST_CASE("batch_io: a batch's inputs, targets and loss drive the pipeline as the plain loop does", "[libtorch][batch_io]")
{
    torch::manual_seed(22);
    const torch::Tensor x = torch::randn({4, 6, 4}), t = torch::randn({4, 6, 3});
    auto plain = per_token();
    const torch::Tensor want_loss = mse(plain->forward(x), t);
    want_loss.backward();
    const auto [schedule, slicer] = GENERATE(table<std::string, std::string>({
        {"1f1b", "microbatch:4"}, {"gpipe", "microbatch:2"}, {"1f1b", "grid:2:2,4"}, {"zb-h1", "grid:4:3,3"}}));
    CAPTURE(schedule, slicer);
    auto model = per_token();
    tpipe::uniform_pipeline<module_stage> pipe(tpipe::libtorch::cut(model, {0, 2, 3}));
    const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{.ranks = 2},
                                                             tpipe::scheme_from_spec(slicer, {4, 6}));
    tpipe::cpu_engine engine(2);
    double loss = 0;
    const auto io = tpipe::libtorch::batch_io(x, t, mse, loss);
    tpipe::run(pipe, prog, engine, io);
    CHECK(loss == Approx(want_loss.item<double>()).epsilon(1e-6));
    const auto want = plain->parameters(), got = model->parameters();
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
        REQUIRE(got[i].grad().defined());
        CHECK(torch::allclose(got[i].grad(), want[i].grad(), 1e-5, 1e-7));
    }
}

TEST_CASE("batch_io refuses a batch that does not fit its units or its loss, naming the sizes", "[libtorch][batch_io]")
{
    const torch::Tensor x = torch::randn({4, 6, 4}), t = torch::randn({4, 6, 3});
    double loss = 0;
    CHECK_THROWS_WITH(tpipe::libtorch::batch_io(x, torch::randn({3, 6, 3}), mse, loss),
                      Catch::Contains("the inputs have 4 rows and the targets 3"));
    CHECK_THROWS_WITH(tpipe::libtorch::batch_io(x, t, mse, loss, {.tokens = 3}),
                      Catch::Contains("batch_dims::tokens is 3 for inputs [4, 6, 4] and targets [4, 6, 3]"));
    CHECK_THROWS_WITH(tpipe::libtorch::batch_io(x, torch::randn({4, 5, 3}), mse, loss),
                      Catch::Contains("the inputs hold 6 tokens and the targets 5 on dimension 1"));

    auto model = per_token();
    tpipe::uniform_pipeline<module_stage> pipe(tpipe::libtorch::cut(model, {0, 2, 3}));
    tpipe::cpu_engine engine(2);
    auto run = [&](const std::string& slicer, tpipe::batch_shape shape, tpipe::libtorch::unit_loss fn,
                   tpipe::libtorch::batch_dims dims = {}) {
        const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{.ranks = 2}, tpipe::scheme_from_spec(slicer, shape));
        tpipe::run(pipe, prog, engine, tpipe::libtorch::batch_io(x, t, std::move(fn), loss, dims));
    };
    CHECK_THROWS_WITH(run("microbatch:4", {8, 6}, mse), Catch::Contains("a unit holds rows [4, 6) but the inputs have 4 rows"));
    CHECK_THROWS_WITH(run("grid:2:3,3", {4, 6}, mse, {.tokens = -1}),
                      Catch::Contains("batch_dims::tokens is -1 (no token dimension)"));
    CHECK_THROWS_WITH(run("microbatch:2", {4, 6},
                          [](const torch::Tensor& y, const torch::Tensor& z) {
                              return torch::nn::functional::mse_loss(y, z, torch::nn::functional::MSELossFuncOptions(torch::kNone));
                          }),
                      Catch::Contains("the loss returned a tensor of shape [2, 6, 3]; it must return the unit's mean"));
}

namespace tensor_parallel_test {

namespace F = torch::nn::functional;
namespace tp = tpipe::libtorch;
constexpr std::int64_t vocab = 48, width = 16, rows = 3, tokens = 5;

//! The whole model: embedding, a column- then row-parallel MLP, a head, the loss (summed).
struct whole {
    torch::nn::Embedding embedding{nullptr};
    torch::nn::Linear up{nullptr}, down{nullptr}, head{nullptr}, qkv{nullptr};
    whole()
    {
        torch::manual_seed(11);
        embedding = torch::nn::Embedding(vocab, width);
        up = torch::nn::Linear(width, 4 * width);
        down = torch::nn::Linear(4 * width, width);
        head = torch::nn::Linear(torch::nn::LinearOptions(width, vocab).bias(false));
        qkv = torch::nn::Linear(width, 3 * width);
    }
    std::vector<torch::Tensor> parameters() const
    {
        return {embedding->weight, up->weight, up->bias, down->weight, down->bias, head->weight, qkv->weight, qkv->bias};
    }
    torch::Tensor loss(const torch::Tensor& ids, const torch::Tensor& targets)
    {
        auto y = head(down(F::gelu(up(embedding(ids)))));
        return F::cross_entropy(y.reshape({-1, vocab}), targets.reshape({-1}), F::CrossEntropyFuncOptions().reduction(torch::kSum));
    }
};

//! The same model split over a tensor group, drawn in the same order from the same seed.
struct split : torch::nn::Module {
    tp::VocabParallelEmbedding embedding{nullptr};
    tp::ColumnParallelLinear up{nullptr}, head{nullptr}, qkv{nullptr};
    tp::RowParallelLinear down{nullptr};
    explicit split(const tp::tensor_group& g)
    {
        torch::manual_seed(11);
        embedding = register_module("embedding", tp::VocabParallelEmbedding(vocab, width, g));
        up = register_module("up", tp::ColumnParallelLinear(width, 4 * width, g));
        down = register_module("down", tp::RowParallelLinear(4 * width, width, g));
        head = register_module("head", tp::ColumnParallelLinear(width, vocab, g, tp::ColumnParallelLinearOptions{.bias = false}));
        qkv = register_module("qkv", tp::ColumnParallelLinear(width, 3 * width, g, tp::ColumnParallelLinearOptions{.blocks = 3}));
    }
    torch::Tensor loss(const torch::Tensor& ids, const torch::Tensor& targets, const tp::tensor_group& g)
    {
        return tp::vocab_parallel_cross_entropy(head(down(F::gelu(up(embedding(ids))))), targets, g, at::Reduction::Sum);
    }
};

//! Largest |a - b| over the tensors.
double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b)
{
    REQUIRE(a.size() == b.size());
    double most = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        REQUIRE(a[i].sizes() == b[i].sizes());
        most = std::max(most, (a[i] - b[i]).abs().max().item<double>());
    }
    return most;
}

void sgd_step(const std::vector<torch::Tensor>& ps)
{
    torch::NoGradGuard no_grad;
    for (const auto& p : ps)
        if (p.grad().defined()) p.sub_(0.5 * p.grad());
}

} // namespace tensor_parallel_test

TEST_CASE("tensor-parallel layers over a group of one are their torch::nn counterparts, bit for bit",
          "[libtorch][tensor]")
{
    using namespace tensor_parallel_test;
    whole w;
    split s{tp::tensor_group{}};
    const auto ws = w.parameters();
    const auto ss = tp::whole_parameters(s);
    REQUIRE(ss.size() == ws.size());
    for (std::size_t i = 0; i < ws.size(); ++i) CHECK(torch::equal(ss[i], ws[i]));
    torch::manual_seed(3);
    const auto ids = torch::randint(vocab, {rows, tokens}, torch::kLong);
    const auto targets = torch::randint(vocab, {rows, tokens}, torch::kLong);
    CHECK(torch::equal(w.loss(ids, targets), s.loss(ids, targets, tp::tensor_group{})));
}

TEST_CASE("at 2 and 4 tensor ranks on threads, the split model's loss and SGD step equal the whole model's "
          "within float32 rounding; whole_parameters gathers the shares",
          "[libtorch][tensor]")
{
    using namespace tensor_parallel_test;
    const int t = GENERATE(2, 4);
    torch::manual_seed(3);
    const auto ids = torch::randint(vocab, {rows, tokens}, torch::kLong);
    const auto targets = torch::randint(vocab, {rows, tokens}, torch::kLong);
    whole w;
    const std::vector<torch::Tensor> initial = [&] {
        std::vector<torch::Tensor> c;
        for (const auto& p : w.parameters()) c.push_back(p.detach().clone());
        return c;
    }();
    const double reference_loss = [&] {
        auto l = w.loss(ids, targets);
        l.backward();
        sgd_step(w.parameters());
        return l.item<double>();
    }();

    tpipe::thread_group group(t);
    std::vector<tpipe::thread_communicator> members;
    std::vector<std::unique_ptr<tpipe::blocking_group<tpipe::thread_communicator>>> sums;
    std::vector<tp::tensor_group> groups;
    std::vector<std::unique_ptr<split>> ranks;
    members.reserve(static_cast<std::size_t>(t));
    for (int k = 0; k < t; ++k) {  // built here, one after another: the draws use one global generator
        members.push_back(group.member(k));
        sums.push_back(std::make_unique<tpipe::blocking_group<tpipe::thread_communicator>>(members.back()));
        groups.emplace_back(*sums.back());
        ranks.push_back(std::make_unique<split>(groups.back()));
    }
    std::vector<double> losses(static_cast<std::size_t>(t));
    std::vector<std::vector<torch::Tensor>> before(static_cast<std::size_t>(t)), after(static_cast<std::size_t>(t));
    {
        std::vector<std::jthread> threads;
        for (int k = 0; k < t; ++k)
            threads.emplace_back([&, k] {
                const auto i = static_cast<std::size_t>(k);
                before[i] = tp::whole_parameters(*ranks[i]);
                auto l = ranks[i]->loss(ids, targets, groups[i]);
                l.backward();
                sgd_step(ranks[i]->parameters());
                losses[i] = l.item<double>();
                after[i] = tp::whole_parameters(*ranks[i]);
            });
    }
    for (int k = 0; k < t; ++k) {
        const auto i = static_cast<std::size_t>(k);
        INFO("t = " << t << ", tensor rank " << k);
        CHECK(max_difference(before[i], initial) == 0);  // the shares of the whole draws, gathered exactly
        CHECK(losses[i] == Approx(reference_loss).epsilon(1e-6));
        CHECK(max_difference(after[i], w.parameters()) < 1e-5);  // summed in another order only
        CHECK(max_difference(after[i], after[0]) == 0);          // every rank gathers the same bits
    }
}

TEST_CASE("a tensor-parallel layer refuses sizes its group does not divide, naming them", "[libtorch][tensor]")
{
    const tpipe::libtorch::tensor_group four(1, 4, [](std::span<float>) {});
    CHECK_THROWS_WITH(tpipe::libtorch::VocabParallelEmbedding(50, 8, four),
                      "tensor parallelism over 4 ranks: the vocabulary (50) is not divisible by 4; use a tensor size "
                      "that divides it");
    CHECK_THROWS_WITH(tpipe::libtorch::ColumnParallelLinear(8, 18, four, tpipe::libtorch::ColumnParallelLinearOptions{.blocks = 3}),
                      Catch::Contains("output features per block (6) is not divisible by 4"));
    CHECK_THROWS_WITH(tpipe::libtorch::RowParallelLinear(6, 8, four), Catch::Contains("input features (6) is not divisible by 4"));
    CHECK_THROWS_WITH(tpipe::libtorch::tensor_group(4, 4, [](std::span<float>) {}), Catch::Contains("rank 4 of 4 ranks"));
}
