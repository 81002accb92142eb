// A thread pool that cannot start all its threads must throw, not hang or terminate: its
// constructor used to unwind while the started workers waited for a job (deadlock on join, or
// std::terminate from a joinable std::thread).
#include <catch2/catch.hpp>

#include <cstring>
#include <stdexcept>
#include <string>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpt/kernels.hpp"

TEST_CASE("a thread pool refused its threads throws, naming how many it got", "[gpt][kernels]")
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    WARN("not checked under sanitizers: address-space limits and their shadow memory do not mix");
#else
    // In a child: cap the address space a little above what is mapped, so that thread stacks
    // (8 MiB each) run out after a few threads. Exit 0: threw the right error; 3: no error;
    // 4: another error; killed by SIGALRM: hung; SIGABRT: terminated.
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        alarm(30);
        rlimit lim{};
        getrlimit(RLIMIT_AS, &lim);
        long pages = 0;
        if (FILE* f = std::fopen("/proc/self/statm", "r")) {
            if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
            std::fclose(f);
        }
        lim.rlim_cur = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (64 << 20);
        setrlimit(RLIMIT_AS, &lim);
        try {
            gpt::thread_pool pool(1000);
            _exit(3);
        } catch (const std::runtime_error& e) {
            _exit(std::strstr(e.what(), "could start only") && std::strstr(e.what(), "of 1000 threads") ? 0 : 4);
        } catch (...) {
            _exit(4);
        }
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    INFO("exited " << WIFEXITED(status) << " status " << WEXITSTATUS(status) << " signal "
                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
#endif
}
