#pragma once
// tpipe over libtorch: torch::nn::Modules as pipeline stages, torch::Tensor as the payload.
// Only included on purpose (tpipe.hpp does not include it): it needs libtorch's headers and
// libraries (CMake: find_package(Torch), see docs/libtorch.md).
//
//   auto model = torch::nn::Sequential(Embed(cfg), Block(cfg), Block(cfg), Head(cfg));
//   auto stages = tpipe::libtorch::cut(model, {0, 2, 4});        // modules [0,2) and [2,4)
//   tpipe::uniform_pipeline<tpipe::libtorch::module_stage> pipe(std::move(stages));
//   tpipe::run(pipe, prog, engine, io);                          // model's .grad() filled
//   tpipe::libtorch::sum_tied_gradients(pipe);                   // (tied parameters only)
//   optimizer.step();
//
// How a stage runs a unit (rows and tokens of a microbatch, tpipe/core/unit.hpp):
// - forward: the received tensor is checked against what the stage takes (tensor_spec; a
//   mismatch is a tpipe::invalid_argument naming both stages and both shapes, raised before
//   libtorch sees the tensor), made a leaf that requires grad (so autograd stops at the stage
//   boundary and its .grad is the input gradient), and run through the modules with autograd
//   recording; the stage keeps the graph and sends the output detached.
// - backward: torch::autograd::backward from the kept output with the received gradient; the
//   parameters' .grad() accumulate as in an unpipelined backward, and the input leaf's gradient
//   is returned.
// - split backward (zero-bubble schedules): backward_input runs the graph's nodes that lead to
//   the input and keeps the gradients where each parameter's path leaves them; backward_weight
//   runs from there to the parameters, added into their .grad(). Each node's product is
//   computed once, so I + W costs one backward (libtorch/split_backward.hpp).
// - token slices: modules that need to know which tokens a slice holds read current_unit() /
//   context_tokens() (positions), and causal attention keeps earlier slices' keys and values in
//   a kv_cache, whose gradients flow back to the slice that made them (see kv_cache).
//
// - batch_io(inputs, targets, loss, loss_sum) makes a batch the run's io: each unit's rows and
//   tokens of the inputs, and the loss on the same part of the targets, weighted so that the
//   units add up to the batch's mean (libtorch/batch_io.hpp).
// - tied parameters (one tensor in two stages): each stage keeps its gradient apart, and
//   sum_tied_gradients(pipe) adds them in stage order after the run (libtorch/cut.hpp).
// - a tensor that requires grad, is reached by a stage's graph and is not in its parameter list
//   is refused under split backward (it would lose its gradient; libtorch/module_stage.hpp).
// - check_token_slicing (libtorch/slicing_check.hpp) finds a stage not prepared for token slices.
// - checkpoints: add_stage / load_stage write and read a stage's parameters and AdamW state in
//   tpipe's checkpoint format, reshardable by name (libtorch/checkpoint.hpp).
// - elastic training (PipeTransformer): freezable_sequential makes a Sequential the model of
//   tpipe's elastic drivers (libtorch/freezable_sequential.hpp); measure_units gives the
//   planner its modules' times (libtorch/unit_times.hpp).
// - tensor parallelism (Megatron's split inside a stage): ColumnParallelLinear,
//   RowParallelLinear, VocabParallelEmbedding and vocab_parallel_cross_entropy over a
//   tensor_group (libtorch/tensor_parallel.hpp).
// - OpenBLAS's own thread pool is limited to one thread when the first stage runs, unless
//   OPENBLAS_NUM_THREADS is set (libtorch/blas_threads.hpp).
//
// Over MPI (tpipe::mpi::transport) a tensor crosses as its dtype and shape (the header) and its
// bytes (the body), libtorch/tensor_payload.hpp; libtorch/process_sum.hpp (needs MPI) sums the
// gradients and the loss over the processes.
#include "tpipe/adapters/libtorch/batch_io.hpp"
#include "tpipe/adapters/libtorch/blas_threads.hpp"
#include "tpipe/adapters/libtorch/checkpoint.hpp"
#include "tpipe/adapters/libtorch/cut.hpp"
#include "tpipe/adapters/libtorch/freezable_sequential.hpp"
#include "tpipe/adapters/libtorch/kv_cache.hpp"
#include "tpipe/adapters/libtorch/module_stage.hpp"
#include "tpipe/adapters/libtorch/slicing_check.hpp"
#include "tpipe/adapters/libtorch/tensor_payload.hpp"
#include "tpipe/adapters/libtorch/tensor_parallel.hpp"
#include "tpipe/adapters/libtorch/tensor_spec.hpp"
#include "tpipe/adapters/libtorch/unit_times.hpp"
