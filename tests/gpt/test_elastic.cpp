// Elastic training of the reference GPT (PipeTransformer): freezing, the sampler, the cache,
// and elastic training against the same training without pipelines, replicas or a cache.
#include <catch2/catch.hpp>

#include <filesystem>
#include <unistd.h>
#include <set>
#include <string>
#include <vector>

#include <tpipe/elastic/cache.hpp>
#include <tpipe/elastic/sampler.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "common.hpp"
#include "gpt/elastic.hpp"
#include "gpt/frozen.hpp"
#include "gpt/pipeline.hpp"

namespace {

std::string random_text(std::size_t n, std::uint64_t seed)
{
    std::string t(n, ' ');
    for (auto& c : t) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        c = static_cast<char>('a' + (seed >> 33) % 26);
    }
    return t;
}

gpt::config small_config()
{
    gpt::config c;
    c.vocab = 128;
    c.d_model = 16;
    c.heads = 2;
    c.layers = 4;
    c.seq_len = 16;
    c.tied = false;
    return c;
}

} // namespace

TEST_CASE("epoch_sampler: every sample once per epoch, however the replicas change", "[elastic]")
{
    tpipe::elastic::epoch_sampler s({.samples = 48, .batch = 8, .seed = 3});
    REQUIRE(s.steps_per_epoch() == 6);
    const int replicas_at[] = {1, 2, 2, 4, 8, 1, 4, 4, 2, 8, 8, 1};  // re-shards mid-epoch, every step
    for (int epoch = 0; epoch < 2; ++epoch) {
        std::multiset<std::int64_t> seen;
        for (int t = 0; t < 6; ++t) {
            const int step = epoch * 6 + t, D = replicas_at[step];
            for (int d = 0; d < D; ++d) {
                const auto ids = s.shard(step, d, D);
                REQUIRE(ids.size() == static_cast<std::size_t>(8 / D));
                seen.insert(ids.begin(), ids.end());
            }
            // The split does not change the step's batch.
            std::multiset<std::int64_t> whole;
            for (auto id : s.global_batch(step)) whole.insert(id);
            std::multiset<std::int64_t> parts;
            for (int d = 0; d < 4; ++d)
                for (auto id : s.shard(step, d, 4)) parts.insert(id);
            REQUIRE(whole == parts);
        }
        REQUIRE(seen.size() == 48);
        REQUIRE(std::set<std::int64_t>(seen.begin(), seen.end()).size() == 48);
    }
    const auto first = s.permutation(0);
    REQUIRE(first != s.permutation(1));  // reshuffled per epoch
    REQUIRE_THROWS_AS(s.shard(0, 0, 3), tpipe::invalid_argument);
    REQUIRE_THROWS_AS(tpipe::elastic::epoch_sampler({.samples = 50, .batch = 8}), tpipe::invalid_argument);
}

TEST_CASE("activation_cache: bitwise round trip in memory and on disk, one level per sample", "[elastic]")
{
    using act = gpt::activation<float>;
    // The spill file is unlinked as soon as it is created: nothing named is left on disk, even if
    // the process is killed (SIGINT, SIGTERM, SIGKILL) while it spills.
    const auto parent = std::filesystem::temp_directory_path() / ("tpipe-test-spill-" + std::to_string(::getpid()));
    std::filesystem::create_directory(parent);
    auto named_spills = [&] {
        return std::distance(std::filesystem::directory_iterator(parent), std::filesystem::directory_iterator());
    };
    {
        tpipe::elastic::activation_cache<act> cache({.host_bytes = 3 * 40, .spill_parent = parent});  // room for 3 of 10 floats
        std::vector<act> put;
        for (int id = 0; id < 6; ++id) {
            act a{1, 10, std::vector<float>(10)};
            for (int k = 0; k < 10; ++k) a.data[static_cast<std::size_t>(k)] = 0.1f * static_cast<float>(id * 10 + k) + 1e-7f;
            cache.put(id, 2, a);
            put.push_back(a);
        }
        auto st = cache.stats();
        REQUIRE(st.host_entries == 3);
        REQUIRE(st.disk_entries == 3);
        REQUIRE(cache.spill_directory() == parent);
        REQUIRE(named_spills() == 0);
        for (int id = 0; id < 6; ++id) {
            auto h = cache.get(id);
            REQUIRE(h);
            REQUIRE(h->level == 2);
            REQUIRE(h->value.rows == 1);
            REQUIRE(h->value.tokens == 10);
            REQUIRE(h->value.data == put[static_cast<std::size_t>(id)].data);
        }
        REQUIRE_FALSE(cache.get(99));
        cache.put(4, 3, put[0]);  // a deeper level replaces the entry
        REQUIRE(cache.get(4)->level == 3);
        REQUIRE(cache.get(4)->value.data == put[0].data);
        REQUIRE_THROWS_AS(cache.put(4, 2, put[0]), tpipe::invalid_argument);  // freezing never goes back
        st = cache.stats();
        REQUIRE(st.host_entries + st.disk_entries == 6);
        REQUIRE(st.misses == 1);
    }
    REQUIRE(named_spills() == 0);
    std::filesystem::remove(parent);
}

TEST_CASE("activation_cache: caches sharing a directory see each other's entries and levels", "[elastic]")
{
    using act = gpt::activation<float>;
    const auto dir = std::filesystem::temp_directory_path() / ("tpipe-test-shared-" + std::to_string(::getpid()));
    std::filesystem::create_directory(dir);
    {
        tpipe::elastic::activation_cache<act> a({.shared_directory = dir}), b({.shared_directory = dir});
        const act x{1, 3, {1.5f, -2.0f, 3.25f}}, y{1, 3, {7.0f, 8.0f, -9.5f}};
        a.put(5, 1, x);
        auto h = b.get(5);  // written by the other cache (another process)
        REQUIRE(h);
        REQUIRE(h->level == 1);
        REQUIRE(h->value.data == x.data);
        b.put(5, 4, y);  // extended elsewhere
        h = a.get(5);
        REQUIRE(h->level == 4);
        REQUIRE(h->value.data == y.data);
        REQUIRE_THROWS_AS(a.put(5, 2, x), tpipe::invalid_argument);  // a knows of level 4 now
        REQUIRE_FALSE(a.get(6));
    }
    REQUIRE(std::filesystem::exists(dir));  // the caller's directory
    std::filesystem::remove_all(dir);
    REQUIRE_THROWS_AS(tpipe::elastic::activation_cache<act>({.shared_directory = dir}), tpipe::invalid_argument);
}

TEST_CASE("freezing: the frozen prefix is outside the gradients and the optimizer", "[elastic]")
{
    // A tied LM head is the token embedding: it freezes with layer 0, and the head reads it frozen
    // (it makes no gradient of it either).
    const bool tied = GENERATE(false, true);
    CAPTURE(tied);
    auto cfg = small_config();
    cfg.tied = tied;
    gpt::parameters<float> p(cfg);
    p.init(5);
    const auto b = gpt_test::random_batch(cfg, 2, cfg.seq_len, 9);
    const std::int64_t end = p.lay.frozen_end(2);
    REQUIRE(end == p.lay.blocks[1].end);
    REQUIRE((p.lay.head < end) == tied);
    gpt::pipelined_model<float> model(p, 2, 1, {2, 3, 4});
    std::vector<std::int64_t> ids{0, 1};
    gpt::frozen_prefix<float> prefix(p, 1);
    const auto x = prefix.forward(b, ids, 2);
    model.set_source([&](const tpipe::unit& u) { return gpt::unit_slice(x, u, cfg.d_model); });
    for (int s = 0; s < 2; ++s)
        for (auto span : model.part_at(s).gradients()) {
            REQUIRE(span.data() >= p.grad.data() + end);  // nothing of the frozen prefix is exposed
        }
    gpt::adamw<float> opt(p, {});
    opt.freeze(end);
    REQUIRE(opt.first_moments().size() == static_cast<std::size_t>(p.size() - end));  // no state for frozen weights
    const std::vector<float> before(p.value.begin(), p.value.begin() + end);
    const std::vector<float> tail_before(p.value.begin() + p.lay.lnf_g, p.value.end());
    tpipe::cpu_engine eng(2);
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{.ranks = 2},
                                                            tpipe::microbatch_slicer{2}.scheme({2, cfg.seq_len}));
    for (int step = 0; step < 2; ++step) {
        model.step(b, prog, eng);
        for (std::int64_t i = 0; i < end; ++i) REQUIRE(p.grad[static_cast<std::size_t>(i)] == 0.0f);
        opt.step(p);
    }
    REQUIRE(std::vector<float>(p.value.begin(), p.value.begin() + end) == before);
    REQUIRE(std::vector<float>(p.value.begin() + p.lay.lnf_g, p.value.end()) != tail_before);  // the tail trains
    REQUIRE_THROWS_AS(opt.freeze(end - 1), std::invalid_argument);
}

TEST_CASE("frozen prefix: the cache and the incremental extension change no bit", "[elastic]")
{
    const auto cfg = small_config();
    gpt::parameters<float> p(cfg);
    p.init(2);
    const auto b = gpt_test::random_batch(cfg, 3, cfg.seq_len, 4);
    const std::vector<std::int64_t> ids{7, 3, 5};
    gpt::frozen_prefix<float> plain(p, 1);
    gpt::frozen_prefix<float>::cache_type cache({.host_bytes = static_cast<std::size_t>(2 * cfg.seq_len * cfg.d_model * 4)});  // 2 rows in memory
    gpt::frozen_prefix<float> cached(p, 2, &cache);
    REQUIRE(cached.forward(b, ids, 1).data == plain.forward(b, ids, 1).data);
    REQUIRE(cached.count().full == 3);
    const auto f3 = plain.forward(b, ids, 3);
    REQUIRE(cached.forward(b, ids, 3).data == f3.data);  // 1 -> 3 on the cached level-1 outputs
    REQUIRE(cached.count().extended == 3);
    REQUIRE(cached.forward(b, ids, 3).data == f3.data);  // served as cached
    REQUIRE(cached.count().cached == 3);
    REQUIRE(cache.stats().disk_entries == 1);
}

TEST_CASE("elastic training equals the same freezing without pipelines, replicas or a cache, bitwise", "[elastic]")
{
    const auto cfg = small_config();
    const std::string text = random_text(16 * 24 + 1, 11);  // 24 samples
    const gpt::window_dataset data(text, cfg.seq_len, 4);
    gpt::elastic_options o;
    o.devices = 2;
    o.batch = 4;
    o.steps = 16;  // 6 steps per epoch
    o.freeze_every = 3;
    o.threads = 2;
    o.freeze = [](int interval, int frozen) { return interval == 0 ? 0 : interval == 1 ? 2 : interval == 2 ? 3 : frozen; };
    const auto run = gpt::train_elastic(cfg, data, o);
    REQUIRE(run.intervals.size() == 6);
    REQUIRE(run.intervals[0].plan.stages == 2);
    REQUIRE(run.intervals[0].plan.replicas == 1);
    REQUIRE(run.intervals[2].plan.stages == 1);  // 1 active layer and the head: a 1-stage pipeline
    REQUIRE(run.intervals[2].plan.replicas == 2);  // the freed device is a replica
    REQUIRE(run.replans_kept_weights);
    REQUIRE(run.replicas_identical);
    REQUIRE(run.intervals[3].rows_cached == 0);  // epoch 1: no sample has come again yet
    REQUIRE(run.intervals[4].rows_cached == 12);  // epoch 2 (steps 12-14): every sample from the cache
    REQUIRE(run.intervals[2].rows_extended > 0);  // 2 -> 3 ran only layer 2
    const auto ref = gpt::train_frozen_reference(cfg, data, o, run.intervals);
    REQUIRE(run.weights == ref);

    // The reference has no cache, so the cache changed nothing. Without it, the planner may
    // choose other microbatch counts (it prices the frozen forward then), so compare with the
    // reference of that run's own plan.
    SECTION("without AutoCache")
    {
        auto no_cache = o;
        no_cache.autocache = false;
        const auto r = gpt::train_elastic(cfg, data, no_cache);
        REQUIRE(r.intervals[4].rows_cached == 0);
        REQUIRE(r.weights == gpt::train_frozen_reference(cfg, data, no_cache, r.intervals));
    }
    SECTION("without AutoDP the freed device idles; the weights are the reference's for that plan")
    {
        auto no_dp = o;
        no_dp.autodp = false;
        const auto r = gpt::train_elastic(cfg, data, no_dp);
        REQUIRE(r.intervals[2].plan.replicas == 1);
        REQUIRE(r.weights == gpt::train_frozen_reference(cfg, data, no_dp, r.intervals));
    }
}
