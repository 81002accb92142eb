#pragma once
// tpipe::mpi::agree: the launch agreement over MPI. Collective over `comm`: every process passes
// its fingerprint text (tpipe/exec/fingerprint.hpp); if any differ, every process throws the same
// tpipe::invalid_argument naming the first differing field and the processes on each side.
// tpipe::mpi::transport::agree() calls it (the runner's program fingerprint), and a trainer calls
// it on MPI_COMM_WORLD as its first collective, before anything sized by its flags can mismatch.
#include <mpi.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/fingerprint.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/setup_watch.hpp"

namespace tpipe::mpi {

namespace detail {
//! Every process's `text` (any bytes), by process number: a set-up collective over `comm`,
//! nonblocking and polled under the set-up bound (tpipe/mpi/setup_watch.hpp).
inline std::vector<std::string> all_gather_text(MPI_Comm comm, const std::string& text, const char* what)
{
    int size = 0;
    check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    // Abandoned by the watchdog, MPI may still read and write these buffers: they are then kept
    // (the job ends).
    struct buffers {
        std::string text;
        int len = 0;
        std::vector<int> lens, offsets;
        std::string all;
    };
    auto b = std::make_unique<buffers>();
    b->text = text;
    b->len = static_cast<int>(text.size());
    b->lens.resize(static_cast<std::size_t>(size));
    b->offsets.assign(static_cast<std::size_t>(size), 0);
    try {
        MPI_Request req = MPI_REQUEST_NULL;
        check(MPI_Iallgather(&b->len, 1, MPI_INT, b->lens.data(), 1, MPI_INT, comm, &req), "MPI_Iallgather (text lengths)");
        setup_wait(req, what);
        for (int p = 1; p < size; ++p) b->offsets[p] = b->offsets[p - 1] + b->lens[p - 1];
        b->all.assign(static_cast<std::size_t>(b->offsets.back() + b->lens.back()), '\0');
        check(MPI_Iallgatherv(b->text.data(), b->len, MPI_CHAR, b->all.data(), b->lens.data(), b->offsets.data(), MPI_CHAR, comm, &req),
              "MPI_Iallgatherv (texts)");
        setup_wait(req, what);
    } catch (const watchdog_error&) {
        keep_abandoned(std::move(b));
        throw;
    }
    std::vector<std::string> texts;
    for (int p = 0; p < size; ++p)
        texts.push_back(b->all.substr(static_cast<std::size_t>(b->offsets[p]), static_cast<std::size_t>(b->lens[p])));
    return texts;
}
} // namespace detail

//! `what` names the wait in a set-up watchdog's report (tpipe/mpi/setup_watch.hpp: with
//! environment_options::watchdog, a process that never arrives is named within the bound).
inline void agree(MPI_Comm comm, const std::string& text, std::string_view who = "mpi", const char* what = "tpipe::mpi::agree")
{
    const std::string why = disagreement(detail::all_gather_text(comm, text, what));
    if (!why.empty()) throw invalid_argument(who.empty() ? why : std::string(who) + ": " + why);
}

} // namespace tpipe::mpi
