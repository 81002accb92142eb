// tpipe-plan search: the best tensor-parallel x pipeline x data-parallel configuration of a
// built-in transformer on N devices, each with its exact slicing plan, memory checked.
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>

#include "command.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/plan/config_search.hpp"

namespace {

constexpr const char* usage = R"(usage: tpipe-plan search --model PRESET --gpus N [--device NAME] [--link NAME] [--batch B]
                         [--seq-len L] [--granularity G] [--gpus-per-node P]
                         [--memory-per-device BYTES] [--form calibrated|roofline] [--json]

Tries every tensor-parallel degree t (dividing --gpus-per-node and the heads), pipeline depth
K <= layers and data-parallel width d with t x K x d = N and d dividing B; plans each
pipeline's B/d rows exactly (token slices and microbatches, shared cut, analytic model of the
fullest stage); refuses those that do not fit in memory; and ranks the rest by
  pipeline objective + data-parallel gradient all-reduce (ring over --link).

  --model            gpt3-1b, gpt3-13b, gpt3-44b, gpt3-175b
  --gpus N           devices in all
  --device           v100 (default), a100, h100, h200
  --link             link between nodes (default: the device's usual link)
  --batch B          global batch, rows (default 1)
  --seq-len L        tokens per sequence (default 2048)
  --granularity G    slice lengths are multiples of G tokens (default 8, as TeraPipe)
  --gpus-per-node P  tensor parallelism stays inside a node of P devices (default 8)
  --memory-per-device BYTES
                     e.g. 16GiB, 14GB (TeraPipe's cap on a 16 GB V100); default: no limit.
                     Memory: fp16 weights and gradients, fp32 master and Adam state (16 B per
                     parameter), saved activations and K/V of every unit, as docs/planner.md says
  --json             one JSON object: "best" (with "run": the train_gpt command line that runs it
                     over MPI at the model's shape, byte vocabulary) and "configurations" (every
                     one, best first)
)";

//! What runs configuration `c` with the reference GPT over MPI (train_gpt --tp t --stages K --dp d)
//! at the model's shape (train_gpt's vocabulary is bytes: 256 tokens, not the preset's), with the
//! plan's token slices; empty when its microbatches are not all of one size (no --slicer says that).
std::string run_line(const tpipe::search_problem& p, const tpipe::configuration& c)
{
    const auto& mb = c.plan.microbatches;
    for (auto rows : mb)
        if (rows != mb.front()) return {};
    std::ostringstream line;
    line << "mpirun -np " << c.tensor_parallel * c.stages * c.data_parallel << " train_gpt --transport mpi --tp "
         << c.tensor_parallel << " --stages " << c.stages << " --dp " << c.data_parallel << " --layers " << p.model.layers
         << " --d-model " << p.model.hidden << " --heads " << p.model.heads << " --seq-len " << p.seq_len << " --batch "
         << c.rows << " --schedule terapipe-1f1b --slicer grid:" << mb.size() << ":";
    for (std::size_t i = 0; i < c.plan.slices.front().size(); ++i) line << (i ? "," : "") << c.plan.slices.front()[i];
    return line.str();
}

std::string gib(double b)
{
    std::ostringstream os;
    os << std::fixed << std::setprecision(2) << b / (1024.0 * 1024 * 1024);
    return os.str();
}

int run_search(tpipe::flag_reader& a)
{
    if (a.flag("--help") || a.flag("-h")) {
        std::cout << usage;
        return 0;
    }
    const auto model_arg = a.value("--model");
    tpipe::search_problem p;
    p.devices = a.required_number<int>("--gpus");
    const auto device_arg = a.value("--device");
    const auto link_arg = a.value("--link");
    p.batch = a.number<std::int64_t>("--batch", 1);
    p.seq_len = a.number<std::int64_t>("--seq-len", p.seq_len);
    p.granularity = a.number<std::int64_t>("--granularity", p.granularity);
    p.devices_per_node = a.number<int>("--gpus-per-node", p.devices_per_node);
    const auto memory_arg = a.value("--memory-per-device");
    const auto form_arg = a.value("--form");
    const bool as_json = a.flag("--json");
    a.finish();
    if (!model_arg) throw tpipe::invalid_argument("missing --model (gpt3-1b, gpt3-13b, gpt3-44b, gpt3-175b)");
    p.model = tpipe::presets::model(*model_arg);
    p.device = tpipe::presets::device(device_arg.value_or("v100"));
    p.link = link_arg ? tpipe::presets::link(*link_arg) : tpipe::presets::default_link(p.device);
    if (memory_arg) p.memory_per_device = tpipe::parse_bytes(*memory_arg);
    if (form_arg) p.form = tpipe::analytic_form_of(*form_arg);

    const auto table = tpipe::search_configurations(p);
    const auto& best = table.front();
    if (!best.fits)
        throw tpipe::invalid_argument("no configuration fits in " + gib(p.memory_per_device) +
                                      " GiB per device; the least need is " + gib(best.memory_bytes) + " GiB (t=" +
                                      std::to_string(best.tensor_parallel) + ", K=" + std::to_string(best.stages) +
                                      ", d=" + std::to_string(best.data_parallel) + ")");
    if (as_json) {
        auto lengths = [](const std::vector<std::int64_t>& v) {
            tpipe::json::array out;
            for (auto l : v) out.emplace_back(l);
            return out;
        };
        auto row = [&](const tpipe::configuration& c) {
            return tpipe::json::object{{"tensor_parallel", c.tensor_parallel},
                                       {"stages", c.stages},
                                       {"data_parallel", c.data_parallel},
                                       {"rows_per_pipeline", c.rows},
                                       {"microbatches", lengths(c.plan.microbatches)},
                                       {"slices", lengths(c.plan.slices.front())},
                                       {"pipeline_seconds", c.pipeline_seconds},
                                       {"microbatch_only_seconds", c.microbatch_only},
                                       {"all_reduce_seconds", c.all_reduce_seconds},
                                       {"seconds", c.seconds},
                                       {"memory_bytes", c.memory_bytes},
                                       {"fits", c.fits}};
        };
        tpipe::json::object best_row = row(best);
        const std::string run = run_line(p, best);
        best_row.emplace("run", run.empty() ? tpipe::json::value(nullptr) : tpipe::json::value(run));
        tpipe::json::array all;
        for (const auto& c : table) all.emplace_back(row(c));
        std::cout << tpipe::json::dump(tpipe::json::object{{"best", std::move(best_row)}, {"configurations", std::move(all)}})
                  << "\n";
        return 0;
    }
    std::cout << p.model.name << " on " << p.devices << " x " << p.device.name << " (link " << p.link.name
              << "), global batch " << p.batch << ", L=" << p.seq_len << ", G=" << p.granularity << ", memory "
              << (memory_arg ? gib(p.memory_per_device) + " GiB" : std::string("unlimited")) << " per device\n\n";
    std::cout << std::right << std::setw(3) << "t" << std::setw(5) << "K" << std::setw(5) << "d" << std::setw(6) << "b"
              << std::setw(5) << "mb" << std::setw(8) << "slices" << std::setw(11) << "pipeline" << std::setw(11)
              << "mb-only" << std::setw(11) << "allreduce" << std::setw(11) << "total" << std::setw(10) << "GiB"
              << "\n";
    for (const auto& c : table) {
        std::cout << std::setw(3) << c.tensor_parallel << std::setw(5) << c.stages << std::setw(5) << c.data_parallel
                  << std::setw(6) << c.rows << std::setw(5) << c.plan.microbatches.size() << std::setw(8)
                  << c.plan.slices.front().size() << std::fixed << std::setprecision(3) << std::setw(11)
                  << c.pipeline_seconds << std::setw(11) << c.microbatch_only << std::setw(11) << c.all_reduce_seconds
                  << std::setw(11) << c.seconds << std::setw(10) << gib(c.memory_bytes) << (c.fits ? "" : "  does not fit")
                  << std::defaultfloat << "\n";
    }
    std::cout << "\nbest: tensor parallel " << best.tensor_parallel << ", " << best.stages << " stages, data parallel "
              << best.data_parallel << ": " << best.rows << " rows per pipeline in " << best.plan.microbatches.size()
              << " microbatches of " << best.plan.slices.front().size() << " slices, " << std::setprecision(4)
              << best.seconds << " s per iteration (" << best.pipeline_seconds << " s pipeline + "
              << best.all_reduce_seconds << " s all-reduce), " << gib(best.memory_bytes) << " GiB per device\n";
    std::cout << "slices (tokens): ";
    for (std::size_t i = 0; i < best.plan.slices.front().size(); ++i)
        std::cout << (i ? " " : "") << best.plan.slices.front()[i];
    std::cout << "\n";
    if (const std::string run = run_line(p, best); !run.empty())
        std::cout << "run it (the reference GPT at this shape, byte vocabulary): " << run << "\n";
    return 0;
}

tpipe::cli::registrar reg{"search", "best tensor x pipeline x data parallel configuration, with its slicing (--help)",
                          run_search};

} // namespace
