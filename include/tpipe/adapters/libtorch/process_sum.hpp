#pragma once
// After a run over MPI (one pipeline over several processes, every process holding the whole
// model): each process has gradients only for the parameters of the stages it ran, and only the
// process of the last stage knows the loss. sum_over_processes adds both up over the processes,
// so that every process steps the same model with the batch's gradient. Needs MPI (the mpi
// component) besides libtorch; not included by tpipe/adapters/libtorch.hpp.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn.h>

#include "tpipe/adapters/libtorch/cut.hpp"
#include "tpipe/adapters/libtorch/tensor_spec.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/mpi/mpi_error.hpp"

namespace tpipe::libtorch {

//! Sums the gradients of `parameters` (the whole model's, in the same order on every process)
//! and `loss` over the processes of `comm`. A parameter without a gradient on a process (a stage
//! it does not run) counts as zeros there; tied parameters' stage gradients are first added up
//! (sum_tied_gradients). One MPI_Allreduce for the float32 gradients, one for the loss; other
//! dtypes are refused.
inline void sum_over_processes(uniform_pipeline<module_stage>& pipe, std::vector<torch::Tensor> parameters,
                               double& loss, MPI_Comm comm = MPI_COMM_WORLD)
{
    sum_tied_gradients(pipe);
    std::vector<torch::Tensor> grads;
    std::int64_t n = 0;
    for (auto& p : parameters) {
        if (!p.requires_grad()) continue;
        if (p.scalar_type() != torch::kFloat)
            throw tpipe::invalid_argument("sum_over_processes: sums float32 gradients, but a parameter is " +
                                          describe(p) + "; reduce the others yourself");
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        grads.push_back(p.grad());
        n += p.numel();
    }
    if (n > 0) {
        torch::Tensor flat = torch::cat(
            [&] {
                std::vector<torch::Tensor> f;
                for (auto& g : grads) f.push_back(g.reshape({-1}));
                return f;
            }(),
            0);
        if (n > static_cast<std::int64_t>(INT32_MAX))
            throw tpipe::invalid_argument("sum_over_processes: " + std::to_string(n) +
                                          " gradient values are more than one MPI_Allreduce counts");
        tpipe::mpi::check(MPI_Allreduce(MPI_IN_PLACE, flat.data_ptr<float>(), static_cast<int>(n), MPI_FLOAT,
                                        MPI_SUM, comm),
                          "MPI_Allreduce (gradients over the pipeline's processes)");
        std::int64_t at = 0;
        for (auto& g : grads) {
            g.copy_(flat.slice(0, at, at + g.numel()).view(g.sizes()));
            at += g.numel();
        }
    }
    tpipe::mpi::check(MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM, comm),
                      "MPI_Allreduce (loss over the pipeline's processes)");
}

} // namespace tpipe::libtorch
