#pragma once
// tpipe::launch: the processes a launcher (mpirun, mpiexec, srun) started together with this one.
#include <cstdlib>
#include <string>

namespace tpipe {

//! The processes a launcher started together with this one, as the variable it sets says;
//! processes == 0 when none did. A program that is not told to use MPI but runs as one of several
//! would do the whole job once per process, independently, and exit 0.
struct launch {
    int processes = 0;
    std::string variable;  //!< e.g. OMPI_COMM_WORLD_SIZE=2

    static launch detect()
    {
        for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
                              "SLURM_STEP_NUM_TASKS"}) {
            const char* text = std::getenv(v);
            if (!text || !*text) continue;
            char* end = nullptr;
            const long n = std::strtol(text, &end, 10);
            if (*end == '\0' && n > 0 && n < (1L << 30)) return {static_cast<int>(n), std::string(v) + "=" + text};
        }
        return {};
    }
};

} // namespace tpipe
