#pragma once
// Training the libtorch GPT (gpt.hpp): plainly, or pipelined by tpipe over CPU threads or MPI
// processes. This interface has no libtorch type in it, so that the flag parsing of
// train_libtorch_gpt.cpp and the tests compile without libtorch's headers.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <tpipe/elastic/driver_options.hpp>

namespace libtorch_gpt {

struct options {
    std::int64_t layers = 4, d_model = 64, heads = 4, seq_len = 64;
    int batch = 8;
    int steps = 20;
    double lr = 1e-3;
    std::uint64_t seed = 1;
    //! none: plain libtorch, no tpipe; threads: one CPU thread per pipeline rank; mpi: one MPI
    //! process per pipeline rank (inside an MPI environment).
    std::string transport = "threads";
    std::string link = "mpi";  //!< transport mpi: the engine payloads cross processes over (mpi, ucx)
    int stages = 2;
    //! Tensor ranks per stage (Megatron's split, gpt.hpp): t x stages processes under MPI.
    int tp = 1;
    std::string schedule = "1f1b";      //!< any runnable schedule of tpipe's registry
    std::string slicer = "microbatch:4";  //!< tpipe::scheme_from_spec
    int threads = 0;                    //!< libtorch intra-op threads per process (0: libtorch's default)
    std::string data;                   //!< training text (bytes are tokens)
    bool check_slicing = false;         //!< first check that token slices give the unsliced outputs
    //! --elastic --slicer terapipe: TeraPipe token slices re-planned at every re-plan, cut at
    //! multiples of this many tokens (0: microbatches of whole sequences).
    std::int64_t terapipe_granularity = 0;
    std::string record_plan;            //!< --elastic: write the planner's inputs (measured times) to this file
    std::string plan_from;              //!< --elastic: plan from the inputs recorded in this file, not measured ones
    int watchdog = 60;                  //!< seconds without progress before a step is stopped (0: never)
    std::string save;                   //!< checkpoint directory (empty: no checkpoints)
    int save_every = 0;                 //!< steps between checkpoints (with save)
    int keep = 0;                       //!< newest checkpoints kept (0: all)
    std::string resume;                 //!< checkpoint (or run directory) to continue from
    std::string trace;                  //!< Perfetto/Chrome trace of the last step to this file (under MPI: FILE.process<k>)
    //! result::weights holds every parameter (on every process); false: only result::weights_fnv,
    //! so that over MPI no process ever holds the whole model.
    bool keep_weights = true;
};

struct result {
    std::vector<double> losses;  //!< mean loss of every step run (from the resumed step on)
    int first_step = 1;          //!< the first step run (> 1 when resumed)
    std::vector<double> weights;  //!< every parameter after the last step, flattened in model order (keep_weights)
    std::string weights_fnv;      //!< FNV-1a of those doubles' bytes (on the process that speaks)
    double seconds = 0;          //!< wall time of steps 2..N (the first warms up; all of it for one step)
    double tokens_per_s = 0;     //!< over those steps
    bool speaks = true;          //!< this process reports (process 0 under MPI)
};

//! Trains `o.steps` steps from the same initialisation and data for every transport. Throws
//! std::exception (tpipe::error for bad pipeline settings) on failure.
result train(const options& o);

//! --elastic: the PipeTransformer way, by tpipe's elastic drivers (threads: thread_driver, one
//! loop per device; mpi: mpi::elastic_driver, one process per device) over the model as a
//! tpipe::libtorch::freezable_sequential (units: the embeddings, each block, the head). `d`
//! gives devices, steps and the AutoFreeze/AutoPipe/AutoDP/AutoCache settings; batch, seq_len,
//! seed and the unit times (measured on process 0, or replayed from o.plan_from) are filled in
//! from `o`, and with o.terapipe_granularity the modules' token latency tables (profiled on
//! process 0, or replayed) unless d.slicing holds some; o.record_plan records them (process 0).
//! `on_interval` sees each interval (on the process that speaks).
struct elastic_result : tpipe::elastic::run_report {
    std::int64_t samples = 0;     //!< windows of the text: the sampler's epoch
    std::vector<double> weights;  //!< every parameter after the run, in model order
    std::string weights_fnv;
    bool speaks = true;
};
elastic_result train_elastic(const options& o, tpipe::elastic::driver_options d,
                             const std::function<void(const tpipe::elastic::interval_report&)>& on_interval);

//! Windows of the text of `o.data` (the samples of an --elastic epoch for `o.batch`).
std::int64_t elastic_samples(const options& o);

//! Plain libtorch with the elastic run's freezing and replica split at the same steps: each
//! interval's frozen modules train no more, each step adds the mean-loss gradients of the
//! replicas' sample shares divided by their count, then AdamW steps. Returns the final weights
//! and, in `interval_losses`, each interval's mean loss.
std::vector<double> frozen_reference(const options& o, const std::vector<tpipe::elastic::interval_report>& intervals,
                                     std::vector<double>& interval_losses);

//! --elastic --check's default tolerance, from the arithmetic of the run's plans: the elastic run
//! and plain libtorch add the same float32 terms of every gradient, grouped otherwise. A step of
//! interval i adds each gradient element from r_i partial sums (per replica, one per microbatch
//! or token slice; then the replicas' sums) where plain libtorch adds one per replica, and each
//! regrouping may round differently by one float32 epsilon of the element. The tolerance is
//! eps_f32 * sum_i(steps_i * r_i): the differences a step's regroupings can introduce, added up
//! over the steps that carry them to the final weights (docs/elastic.md, "Checking a run").
double elastic_check_tolerance(const std::vector<tpipe::elastic::interval_report>& intervals);

//! The weights' checksum (FNV-1a of their bytes, 16 hex digits), printed by every run.
std::string checksum_of(const std::vector<double>& weights);

//! ||a - b|| / ||b||
double relative_difference(const std::vector<double>& a, const std::vector<double>& b);

} // namespace libtorch_gpt
