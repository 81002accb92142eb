#pragma once
// train_gpt --elastic (see elastic_command.cpp).
#include <string>

#include "checkpointing.hpp"
#include "gpt/elastic.hpp"

namespace gpt {

struct elastic_command {
    config cfg;
    elastic_options opts;       //!< steps <= 0: `epochs` epochs of the data
    int epochs = 3;
    bool json = false;
    bool check = false;         //!< also train the non-elastic reference and require the same bits
    std::string transport = "threads";
    std::string link = "mpi";   //!< --transport mpi: the engine payloads cross processes over (mpi, ucx)
    checkpoint_flags ckpt;      //!< --save, --save-every, --keep, --resume
    std::string record_plan;    //!< --record-plan: write the planner's inputs (measured times) here
    std::string plan_from;      //!< --plan-from: plan from these recorded inputs instead of measuring
};

//! Trains on `text`; prints each interval and a summary. Exit status: 0, or 3 when a check failed.
int run_elastic_command(const elastic_command& c, const std::string& text);

} // namespace gpt
