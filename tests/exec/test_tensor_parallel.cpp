// Three axes on threads: a tensor-parallel stage (tests/exec/tp_mlp.hpp: a column-parallel then a
// row-parallel linear, summed over the tensor group) pipelined over K = 2 stages with t = 2 tensor
// ranks computes exactly what the same model computes at t = 1: the outputs and input gradients on
// every tensor rank, and each rank's share of every weight gradient.
#include <catch2/catch.hpp>

#include <exception>
#include <optional>
#include <thread>
#include <vector>

#include "tp_reference.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/exec/group_communicators.hpp"
#include "tpipe/exec/layout.hpp"

using tp_test::mlp_stage;
using comm = tpipe::thread_communicator;

TEST_CASE("a tensor-parallel stage pipelined over K = 2 with t = 2 on threads equals the model at t = 1", "[exec][layout][tensor]")
{
    for (const tpipe::axes a : {tpipe::axes{2, 2, 1}, tpipe::axes{3, 2, 1}, tpipe::axes{2, 3, 1}}) {
        CAPTURE(a.text());
        const int t = a.tensor_ranks, K = a.pipeline_ranks, M = 4;
        const auto want = tp_test::whole_model<comm>(K, M);
        const tpipe::layout l = tpipe::layout::single_process(a);

        // Every coordinate's groups, split on a thread of its own (a split is a blocking collective).
        tpipe::thread_group all(a.size());
        std::vector<std::optional<tpipe::group_communicators<comm>>> groups(static_cast<std::size_t>(a.size()));
        {
            std::vector<std::thread> threads;
            for (int i = 0; i < a.size(); ++i)
                threads.emplace_back([&, i] { groups[static_cast<std::size_t>(i)].emplace(tpipe::split_groups(all.member(i), l, l.at(i))); });
            for (auto& th : threads) th.join();
        }
        // Tensor rank k's pipeline on a thread of its own (its K ranks on K loops), all at once:
        // the tensor ranks of a stage meet in its sums.
        std::vector<tp_test::result> got(static_cast<std::size_t>(t));
        std::vector<std::exception_ptr> errors(static_cast<std::size_t>(t));
        std::vector<std::thread> pipelines;
        for (int k = 0; k < t; ++k)
            pipelines.emplace_back([&, k] {
                try {
                    std::vector<mlp_stage<comm>> stages;
                    for (int r = 0; r < K; ++r)
                        stages.emplace_back(r, k, t, &groups[static_cast<std::size_t>(l.index({0, r, k}))]->tensor);
                    got[static_cast<std::size_t>(k)] = tp_test::run_pipeline<comm>(std::move(stages), M);
                } catch (...) {
                    errors[static_cast<std::size_t>(k)] = std::current_exception();
                }
            });
        for (auto& th : pipelines) th.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);

        for (int k = 0; k < t; ++k) {
            const auto& g = got[static_cast<std::size_t>(k)];
            CAPTURE(k);
            REQUIRE(g.outputs == want.outputs);
            REQUIRE(g.input_grads == want.input_grads);
            for (int s = 0; s < K; ++s) {
                REQUIRE(g.dw1[static_cast<std::size_t>(s)] == tp_test::rows_of(want.dw1[static_cast<std::size_t>(s)], k, t));
                REQUIRE(g.dw2[static_cast<std::size_t>(s)] == tp_test::columns_of(want.dw2[static_cast<std::size_t>(s)], k, t));
            }
        }
        REQUIRE(want.outputs[0] != tp_test::source(0));  // the layers did something
    }
}
