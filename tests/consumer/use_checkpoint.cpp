// What a user writes: the umbrella header, a checkpoint saved and read back. Compiled at a user's
// flags (-O2 -Wall -Wextra -Werror, not tpipe's own) by GCC and Clang (tests/consumer/consumer.cmake):
// warnings such as -Wmaybe-uninitialized appear only where the user's code inlines the headers.
#include <tpipe/tpipe.hpp>

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

int tpipe_consumer_checkpoint(const std::string& dir, int steps)
{
    std::vector<float> w(12, 0.5f);
    tpipe::state::checkpoint_writer out({.root = dir, .keep = 2});
    for (std::int64_t step = 1; step <= steps; ++step) {
        tpipe::state::manifest m;
        m.step = step;
        m.model = tpipe::json::object{{"layers", 2}, {"d_model", 4}};
        m.optimizer = tpipe::json::object{{"kind", "sgd"}, {"step_count", step}};
        tpipe::state::shard_snapshot shard("rank-0.bin");
        shard.add<float>("w", {3, 4}, 0, w);
        std::vector<tpipe::state::shard_snapshot> mine;
        mine.push_back(std::move(shard));
        out.begin(std::move(m), std::move(mine));
    }
    out.finish();
    const tpipe::state::checkpoint_reader in(dir);
    in.read_tensor<float>("w", {3, 4}, std::span<float>(w));
    std::puts(tpipe::json::dump(in.contents().to_json()).c_str());
    return static_cast<int>(in.contents().step);
}
