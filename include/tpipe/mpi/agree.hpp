#pragma once
// tpipe::mpi::agree: the launch agreement over MPI. Collective over `comm`: every process passes
// its fingerprint text (tpipe/exec/fingerprint.hpp); if any differ, every process throws the same
// tpipe::invalid_argument naming the first differing field and the processes on each side.
// tpipe::mpi::transport::agree() calls it (the runner's program fingerprint), and a trainer calls
// it on MPI_COMM_WORLD as its first collective, before anything sized by its flags can mismatch.
#include <mpi.h>

#include <string>
#include <string_view>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/fingerprint.hpp"
#include "tpipe/mpi/mpi_error.hpp"

namespace tpipe::mpi {

inline void agree(MPI_Comm comm, const std::string& text, std::string_view who = "mpi")
{
    int size = 0;
    check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
    const int len = static_cast<int>(text.size());
    std::vector<int> lens(static_cast<std::size_t>(size));
    check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm), "MPI_Allgather (configuration)");
    std::vector<int> offsets(static_cast<std::size_t>(size), 0);
    for (int p = 1; p < size; ++p) offsets[p] = offsets[p - 1] + lens[p - 1];
    std::string all(static_cast<std::size_t>(offsets.back() + lens.back()), '\0');
    check(MPI_Allgatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, comm),
          "MPI_Allgatherv (configuration)");
    std::vector<std::string> texts;
    for (int p = 0; p < size; ++p)
        texts.push_back(all.substr(static_cast<std::size_t>(offsets[p]), static_cast<std::size_t>(lens[p])));
    const std::string why = disagreement(texts);
    if (!why.empty()) throw invalid_argument(who.empty() ? why : std::string(who) + ": " + why);
}

} // namespace tpipe::mpi
