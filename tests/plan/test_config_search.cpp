// The configuration search on TeraPipe's clusters (docs/papers.md 4.2-4.4): what it
// enumerates, that each row is the slicing DP of that configuration, and where the paper's
// chosen configurations land (docs/planner.md "Configuration search" discusses the 13B gap).
#include <catch2/catch.hpp>

#include <algorithm>

#include "tpipe/plan/config_search.hpp"

namespace {

tpipe::search_problem terapipe_cluster(const tpipe::transformer_shape& model, int gpus, std::int64_t batch)
{
    tpipe::search_problem p;
    p.model = model;
    p.device = tpipe::presets::v100;
    p.link = tpipe::presets::ethernet_25g;
    p.devices = gpus;
    p.batch = batch;
    p.memory_per_device = 14e9; // TeraPipe's memory_model cap on a 16 GB V100
    return p;
}

const tpipe::configuration& find(const std::vector<tpipe::configuration>& table, int t, int K, int d)
{
    const auto it = std::find_if(table.begin(), table.end(), [&](const auto& c) {
        return c.tensor_parallel == t && c.stages == K && c.data_parallel == d;
    });
    REQUIRE(it != table.end());
    return *it;
}

std::size_t rank_of(const std::vector<tpipe::configuration>& table, const tpipe::configuration& c)
{
    return static_cast<std::size_t>(&c - table.data());
}

} // namespace

TEST_CASE("configuration search enumerates t x K x d = N and ranks the fitting ones by time", "[plan][search]")
{
    const auto p = terapipe_cluster(tpipe::presets::gpt3_13b, 320, 32);
    const auto table = tpipe::search_configurations(p);
    std::size_t expected = 0; // every (t | 8, t | heads) x (K <= layers) x (d | B) with t K d = 320
    for (int t : {1, 2, 4, 8})
        for (int K = 1; K <= 40; ++K)
            if (320 % (t * K) == 0 && 32 % (320 / (t * K)) == 0) ++expected;
    CHECK(table.size() == expected);
    bool seen_unfit = false;
    for (std::size_t i = 0; i < table.size(); ++i) {
        const auto& c = table[i];
        CHECK(c.tensor_parallel * c.stages * c.data_parallel == 320);
        CHECK(c.rows * c.data_parallel == 32);
        CHECK(c.fits == (c.memory_bytes <= p.memory_per_device));
        CHECK(c.seconds == Approx(c.pipeline_seconds + c.all_reduce_seconds));
        CHECK((c.data_parallel == 1) == (c.all_reduce_seconds == 0));
        if (i && c.fits) CHECK(table[i - 1].seconds <= c.seconds);
        if (!c.fits) seen_unfit = true;
        CHECK(!(seen_unfit && c.fits)); // the fitting ones come first
    }
    // A row is the slicing DP of its configuration: the paper's 13B setting (t 8, K 40, d 1) is
    // the calibration table's 1.887 -> 1.257 s.
    const auto& paper = find(table, 8, 40, 1);
    const auto model = tpipe::presets::analytic(tpipe::presets::gpt3_13b, 40, tpipe::presets::v100, {.tensor_parallel = 8});
    CHECK(paper.pipeline_seconds ==
          Approx(tpipe::plan_slices(model, {40, 2048, 32, 8, tpipe::cut_mode::shared}).objective).epsilon(1e-12));
    CHECK(paper.pipeline_seconds == Approx(1.2575).epsilon(1e-3));
    CHECK(paper.microbatch_only == Approx(1.887).epsilon(1e-3));
    CHECK(paper.fits);

    auto tight = p;
    tight.memory_per_device = 1e9;
    const auto none = tpipe::search_configurations(tight);
    CHECK(std::none_of(none.begin(), none.end(), [](const auto& c) { return c.fits; }));
    auto bad = p;
    bad.batch = 7; // d must divide 7 and 320: only d = 1
    const auto odd = tpipe::search_configurations(bad);
    CHECK(std::all_of(odd.begin(), odd.end(), [](const auto& c) { return c.data_parallel == 1; }));
    bad.granularity = 3;
    CHECK_THROWS_AS(tpipe::search_configurations(bad), tpipe::invalid_argument);
}

TEST_CASE("TeraPipe's GPT-3 175B configuration is the search's best", "[plan][search]")
{
    // 384 V100, global batch 2: the paper's 48 stages of tensor parallel 8 (idx 0), ahead of the
    // repository's other setting, 96 stages of 4 (idx 1); data parallelism does not fit.
    const auto table = tpipe::search_configurations(terapipe_cluster(tpipe::presets::gpt3_175b, 384, 2));
    const auto& best = table.front();
    CHECK(best.tensor_parallel == 8);
    CHECK(best.stages == 48);
    CHECK(best.data_parallel == 1);
    CHECK(best.plan.slices.front().size() == 16);
    CHECK(best.seconds == Approx(1.162).epsilon(1e-3));
    CHECK(rank_of(table, find(table, 4, 96, 1)) == 1);
    for (const auto& c : table)
        if (c.data_parallel > 1) CHECK_FALSE(c.fits);
}

TEST_CASE("TeraPipe's GPT-3 13B configurations: what the search prefers", "[plan][search]")
{
    // 320 V100, global batch 32. The repository evaluated t 1 K 40 d 8 (idx 1), t 8 K 20 d 2
    // (idx 4) and t 8 K 40 d 1 (idx 7, the paper's headline). The model ranks idx 4 first of the
    // three and idx 7 second; its overall best uses 10 stages with data parallel 4, which the
    // repository did not evaluate, 28 % faster than idx 7 by the model.
    const auto table = tpipe::search_configurations(terapipe_cluster(tpipe::presets::gpt3_13b, 320, 32));
    const auto& idx1 = find(table, 1, 40, 8);
    const auto& idx4 = find(table, 8, 20, 2);
    const auto& idx7 = find(table, 8, 40, 1);
    CHECK(idx1.fits);
    CHECK(idx4.fits);
    CHECK(idx7.fits);
    CHECK(idx4.seconds < idx7.seconds);
    CHECK(idx7.seconds < idx1.seconds);
    const auto& best = table.front();
    CHECK(best.tensor_parallel == 8);
    CHECK(best.stages == 10);
    CHECK(best.data_parallel == 4);
    CHECK(best.seconds < 0.75 * idx7.seconds);
    CHECK(idx4.seconds < 1.1 * best.seconds); // the repository's best setting is within 10 % of the search's
}
