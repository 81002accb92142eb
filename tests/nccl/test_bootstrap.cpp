#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "members.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/nccl/file_bootstrap.hpp"

namespace fs = std::filesystem;

namespace {
fs::path fresh_path(const char* name)
{
    const fs::path p = fs::temp_directory_path() / (std::string("tpipe-") + name + "-" + std::to_string(::getpid()) + ".id");
    fs::remove(p);
    return p;
}
tpipe::nccl::unique_id id_of(unsigned char seed)
{
    tpipe::nccl::unique_id id;
    for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = std::byte(static_cast<unsigned char>(seed + i));
    return id;
}
} // namespace

TEST_CASE("file bootstrap: every rank gets rank 0's id, also when it starts before rank 0", "[nccl][bootstrap]")
{
    const fs::path path = fresh_path("threads");
    const int n = 4;
    std::vector<tpipe::nccl::unique_id> got(n);
    auto errors = tpipe::nccl::fake::on_threads(n, [&](int r) {
        if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the others wait for it
        got[r] = tpipe::nccl::exchange_through_file(path, r, [] { return id_of(7); });
    });
    for (const auto& e : errors) CHECK(e.empty());
    for (int r = 0; r < n; ++r) CHECK(got[r] == id_of(7));
    CHECK(fs::exists(path));
    CHECK_THROWS_WITH(tpipe::nccl::exchange_through_file(path, 0, [] { return id_of(1); }), Catch::Contains("already there"));
    tpipe::nccl::remove_bootstrap_file(path);
    CHECK(!fs::exists(path));
}

TEST_CASE("file bootstrap: across forked processes, and the id initialises a communicator", "[nccl][bootstrap]")
{
    const fs::path path = fresh_path("fork");
    const pid_t child = ::fork();
    if (child == 0) {  // rank 1: reads the id rank 0 writes, exits 0 if it is rank 0's
        const auto id = tpipe::nccl::exchange_through_file(path, 1, [] { return id_of(0); });
        ::_exit(id == id_of(42) ? 0 : 1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(tpipe::nccl::exchange_through_file(path, 0, [] { return id_of(42); }) == id_of(42));
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    tpipe::nccl::remove_bootstrap_file(path);

    // Members on threads initialise one fake NCCL communicator from an id they exchanged.
    tpipe::nccl::fake::world w;
    tpipe::nccl::fake::api a{&w};
    const fs::path p2 = fresh_path("init");
    std::vector<int> sums(3);
    auto errors = tpipe::nccl::fake::on_threads(3, [&](int r) {
        const auto shared = tpipe::nccl::exchange_through_file(p2, r, [&] {
            tpipe::nccl::unique_id made;
            REQUIRE(a.get_unique_id(made) == 0);
            return made;
        });
        auto c = tpipe::nccl::fake::communicator::init(a, 3, shared, r);
        std::vector<std::int32_t> v{r + 1};
        tpipe::sync_wait([&]() -> tpipe::task<void> { co_await c.all_reduce_sum(std::span<std::int32_t>(v)); }());
        sums[r] = v[0];
    });
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(sums == std::vector<int>{6, 6, 6});
    tpipe::nccl::remove_bootstrap_file(p2);
}

TEST_CASE("file bootstrap: a rank whose file never appears says which file, which rank and how long", "[nccl][bootstrap]")
{
    const fs::path path = fresh_path("missing");
    CHECK_THROWS_WITH(tpipe::nccl::exchange_through_file(path, 2, [] { return id_of(0); }, {.timeout = std::chrono::milliseconds(40)}),
                      Catch::Contains("rank 2 waited") && Catch::Contains(path.string()) && Catch::Contains("ms for"));
    std::ofstream(path) << "not an id";
    CHECK_THROWS_WITH(tpipe::nccl::exchange_through_file(path, 1, [] { return id_of(0); }), Catch::Contains("is not a tpipe NCCL id file"));
    fs::remove(path);
}
