// External oracle: the same tiny model in PyTorch (Debian's python3-torch, /usr/bin/python3),
// same weights and tokens; loss and every gradient must agree (relative error <= 1e-4, float32).
// Skipped with a printed reason when /usr/bin/python3 cannot import torch.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <unistd.h>

#include "common.hpp"

#ifndef TPIPE_GPT_TEST_DIR
#error "TPIPE_GPT_TEST_DIR must name tests/gpt (set by tests/gpt_tests.cmake)"
#endif

namespace fs = std::filesystem;

namespace {

bool torch_available(std::string& why)
{
    const int rc = std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1");
    if (rc != 0) why = "/usr/bin/python3 cannot import torch and numpy (apt-get install -y python3-torch)";
    return rc == 0;
}

void oracle_check(const gpt::config& cfg, std::int64_t rows)
{
    gpt::parameters<float> p(cfg);
    p.init(21);
    // Non-trivial LayerNorm gains and biases, so that their gradients are checked for real.
    for (const auto& t : p.lay.tensors)
        if (t.shape.size() == 1)
            for (std::int64_t i = 0; i < t.size(); ++i)
                p.value[static_cast<std::size_t>(t.offset + i)] += 0.1f * std::sin(float(t.offset + 3 * i));
    const auto b = gpt_test::random_batch(cfg, rows, cfg.seq_len, 9);
    const double loss = gpt::full_step(p, b, 2);

    const fs::path dir = fs::temp_directory_path() /
                         ("tpipe_gpt_oracle_" + std::to_string(::getpid()) + "_" + std::to_string(cfg.tied));
    fs::create_directories(dir);
    {
        std::ofstream m(dir / "manifest.txt");
        m << "config vocab=" << cfg.vocab << " d_model=" << cfg.d_model << " heads=" << cfg.heads
          << " layers=" << cfg.layers << " seq_len=" << cfg.seq_len << " tied=" << (cfg.tied ? 1 : 0)
          << " ln_eps=" << cfg.ln_eps << "\n";
        m << "batch " << b.rows << " " << b.seq_len << "\n";
        for (const auto& t : p.lay.tensors) {
            if (!cfg.tied || t.name != "head") {
                m << "tensor " << t.name << " " << t.offset;
                for (auto s : t.shape) m << " " << s;
                m << "\n";
            }
        }
        std::ofstream w(dir / "params.f32", std::ios::binary);
        w.write(reinterpret_cast<const char*>(p.value.data()), static_cast<std::streamsize>(p.value.size() * 4));
        std::ofstream tk(dir / "tokens.i32", std::ios::binary);
        tk.write(reinterpret_cast<const char*>(b.inputs.data()), static_cast<std::streamsize>(b.inputs.size() * 4));
        tk.write(reinterpret_cast<const char*>(b.targets.data()), static_cast<std::streamsize>(b.targets.size() * 4));
    }
    const std::string cmd = "/usr/bin/python3 " TPIPE_GPT_TEST_DIR "/torch_oracle.py " + dir.string();
    REQUIRE(std::system(cmd.c_str()) == 0);
    std::ifstream r(dir / "result.f64", std::ios::binary);
    std::vector<double> res(static_cast<std::size_t>(1 + p.size()));
    r.read(reinterpret_cast<char*>(res.data()), static_cast<std::streamsize>(res.size() * 8));
    const auto got = static_cast<std::size_t>(r.gcount() / 8);
    fs::remove_all(dir);
    REQUIRE(got >= 1);
    INFO("loss ours " << loss << " torch " << res[0]);
    CHECK(std::abs(loss - res[0]) <= 1e-4 * std::abs(res[0]));
    std::size_t pos = 1;
    for (const auto& t : p.lay.tensors) {
        if (cfg.tied && t.name == "head") continue;
        REQUIRE(pos + static_cast<std::size_t>(t.size()) <= got);
        const double e = gpt_test::rel_err(p.grad.data() + t.offset, res.data() + pos, t.size());
        INFO("tensor " << t.name << " relative error " << e);
        CHECK(e <= 1e-4);
        pos += static_cast<std::size_t>(t.size());
    }
}

} // namespace

TEST_CASE("loss and gradients equal PyTorch's", "[gpt][oracle]")
{
    std::string why;
    if (!torch_available(why)) {
        std::cout << "SKIPPED [gpt][oracle]: " << why << "\n";
        WARN("skipped: " << why);
        return;
    }
    gpt::config cfg;
    cfg.vocab = 50;
    cfg.d_model = 32;
    cfg.heads = 4;
    cfg.layers = 2;
    cfg.seq_len = 24;
    for (bool tied : {true, false}) {
        cfg.tied = tied;
        oracle_check(cfg, 3);
    }
}
