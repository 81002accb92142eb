#pragma once
// train_gpt's flags: what a run is told (options), the help text, and the checks that refuse a
// bad combination before anything is built (exit status 2, tpipe::usage_error).
#include <cstdint>
#include <string>

#include <tpipe/slice/scheme.hpp>

#include "checkpointing.hpp"
#include "elastic_command.hpp"
#include "gpt/model.hpp"

#ifndef TPIPE_GPT_DEFAULT_CORPUS
#define TPIPE_GPT_DEFAULT_CORPUS "apps/gpt/data/tiny_corpus.txt"
#endif

namespace train_gpt {

struct options {
    gpt::config cfg;
    int batch = 4;
    int steps = 50;
    double lr = 1e-3;
    std::uint64_t seed = 1;
    int stages = 2;
    std::string schedule = "1f1b";
    int virtual_stages = 2;
    std::string slicer = "microbatch:4";
    std::int64_t granularity = 0;  // terapipe: 0 = seq_len / 16
    std::string data = TPIPE_GPT_DEFAULT_CORPUS;
    std::string trace;
    bool json = false;
    bool check = false;
    double check_tol = 1e-3;
    int threads = 0;  // 0: hardware threads
    int dp = 1;
    int tp = 1;  // tensor-parallel ranks per stage (Megatron's split; over MPI)
    bool sequence_parallel = false;  // --tp: the LayerNorm regions split along each unit's positions
    bool scatter_gather = false;  // --tp: 1/tp of each boundary activation crosses the pipeline, all-gathered after
    std::string transport = "threads";
    std::string link = "mpi";  // --transport mpi: the engine payloads cross processes over (mpi, ucx)
    std::string device = "cpu";
    std::string precision = "fp32";
    bool elastic = false;
    bool recompute = false;
    bool shard_optimizer = false;  // ZeRO-1: AdamW's state sharded over the --dp replicas
    bool steps_given = false;
    int watchdog = 60;  // seconds without progress before a step is stopped (0: never)
    gpt::elastic_command el;
    gpt::checkpoint_flags ckpt;  // --save, --save-every, --keep, --resume
};

//! The flags of argv; throws tpipe::usage_error for anything wrong, naming the flag.
options parse(int argc, char** argv);
//! A fixed slicer from --slicer (everything but "terapipe").
tpipe::scheme fixed_scheme(const options& o);
//! The units of a scheme, for the log: "rows [0,4) tokens 16 16 | ...".
std::string describe(const tpipe::scheme& sch);

} // namespace train_gpt
