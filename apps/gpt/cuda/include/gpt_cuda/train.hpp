#pragma once
// `train_gpt --device cuda`: the CUDA GPT trained through tpipe::run on tpipe::cuda::engine, every
// pipeline rank a compute stream on GPU 0. No CUDA header (train_gpt.cpp includes it).
#include <cstdint>
#include <string>

#include <tpipe/schedule/program.hpp>

#include "gpt/model.hpp"

namespace gpt::cuda {

struct train_options {
    gpt::config cfg;
    int batch = 4;
    int steps = 50;
    double lr = 1e-3;
    std::uint64_t seed = 1;       //!< initialisation
    std::uint64_t data_seed = 1;  //!< the batches' stream (train_gpt's, so CPU and GPU runs see the same data)
    int ranks = 2;                //!< engine devices (compute streams), all on GPU 0
    int stages = 2;               //!< pipeline stages (ranks x stages per rank)
    std::string schedule;         //!< for the report
    std::string units;            //!< the slicing, for the report
    bool bf16 = false;            //!< bf16 storage (float master weights and sums)
    bool json = false;
    bool check = false;           //!< also train the CPU GPT without a pipeline and compare
    double check_tol = 1e-3;
};

//! Trains and reports (one line per step, a summary); returns the exit status (3: --check failed).
//! Throws tpipe::error when no CUDA GPU can be used, naming why.
int train(const train_options& o, const tpipe::program& prog, const std::string& text);

} // namespace gpt::cuda
