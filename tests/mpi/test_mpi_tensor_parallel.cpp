// Three axes over processes (mpiexec -np 2, 3, 4: t = 2, 3, 2 tensor ranks x K = 1, 1, 2 stages,
// one coordinate per process, through tpipe::mpi::job): the tensor-parallel stage of
// tests/exec/tp_mlp.hpp, its sums over job.tensor(), computes exactly what the same model
// computes at t = 1 in one process.
#include <catch2/catch.hpp>

#include <vector>

#include "../exec/tp_reference.hpp"
#include "mpi_suite.hpp"
#include "tpipe/mpi/job.hpp"

using comm = tpipe::mpi::communicator;

TEST_CASE("a tensor-parallel stage pipelined over processes equals the model at t = 1", "[mpi][layout][tensor]")
{
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const int K = n % 2 == 0 && n > 2 ? 2 : 1, t = n / K, M = 4;
    tpipe::mpi::job job({.tensor_ranks = t, .pipeline_ranks = K});
    const tpipe::coordinate me = job.where();
    CAPTURE(job.layout().sizes().text(), me.text());
    const auto want = tp_test::whole_model<comm>(K, M);

    std::vector<tp_test::mlp_stage<comm>> stages;  // only stage me.rank runs here
    for (int r = 0; r < K; ++r) stages.emplace_back(r, me.tensor_rank, t, r == me.rank ? &job.tensor() : nullptr);
    const auto got = tp_test::run_pipeline<comm>(std::move(stages), M, &job.transport());

    const auto s = static_cast<std::size_t>(me.rank);
    bool ok = got.dw1[s] == tp_test::rows_of(want.dw1[s], me.tensor_rank, t) &&
              got.dw2[s] == tp_test::columns_of(want.dw2[s], me.tensor_rank, t);
    if (me.rank == K - 1) ok = ok && got.outputs == want.outputs;
    if (me.rank == 0) ok = ok && got.input_grads == want.input_grads;
    REQUIRE(tpipe_test::every_process(ok));
}
