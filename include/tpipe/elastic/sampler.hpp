#pragma once
// tpipe::elastic::epoch_sampler: which samples each data-parallel replica trains on, so that
// every sample is seen exactly once per epoch however often the replica count changes.
//
//   tpipe::elastic::epoch_sampler s({.samples = 1024, .batch = 16, .seed = 1});
//   for (std::int64_t step = 0; ...; ++step)
//       auto mine = s.shard(step, replica, replicas);   // this replica's sample ids of the step
//
// - An epoch is a permutation of the sample ids [0, samples) (a seeded Fisher-Yates shuffle
//   per epoch, on a fixed generator, so every process and platform draws the same one).
// - Step t of epoch e (steps_per_epoch = samples / batch steps) takes the global batch of ids
//   at positions [t * batch, (t + 1) * batch) of epoch e's permutation.
// - Re-sharding is a different split of the same global batch: replica d of D takes its
//   contiguous share [d * batch / D, (d + 1) * batch / D). The global batch does not depend on
//   D, so the replicas of any step together see exactly its batch, and an epoch's steps together
//   see every sample once, whenever D changes (AutoDP changes it at a re-plan).
// - samples must be a multiple of batch (a dataset is trimmed to whole batches), and batch a
//   multiple of the replica count; anything else is refused with a tpipe::invalid_argument.
// - Not thread-safe (it keeps the current epoch's permutation): draw the shards on one thread.
#include <cstdint>
#include <numeric>
#include <utility>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe::elastic {

class epoch_sampler {
public:
    struct options {
        std::int64_t samples = 0;  //!< dataset size (sample ids 0..samples-1)
        std::int64_t batch = 1;    //!< global batch: samples per step over all replicas
        std::uint64_t seed = 0;    //!< shuffling seed
    };

    explicit epoch_sampler(options o) : o_(o)
    {
        if (o_.batch < 1) throw invalid_argument("epoch_sampler: batch must be >= 1, got " + std::to_string(o_.batch));
        if (o_.samples < o_.batch || o_.samples % o_.batch != 0)
            throw invalid_argument("epoch_sampler: " + std::to_string(o_.samples) + " samples are not a positive multiple of the batch of " +
                                   std::to_string(o_.batch) + "; trim the dataset to " +
                                   std::to_string(o_.samples / o_.batch * o_.batch) + " samples or change the batch");
    }

    std::int64_t samples() const noexcept { return o_.samples; }
    std::int64_t batch() const noexcept { return o_.batch; }
    std::int64_t steps_per_epoch() const noexcept { return o_.samples / o_.batch; }

    //! The sample ids of global step `step` (>= 0), all replicas together.
    std::vector<std::int64_t> global_batch(std::int64_t step) { return shard(step, 0, 1); }

    //! Replica `replica`'s sample ids of step `step` among `replicas` replicas.
    std::vector<std::int64_t> shard(std::int64_t step, int replica, int replicas)
    {
        if (step < 0) throw invalid_argument("epoch_sampler: step " + std::to_string(step) + " is negative");
        if (replicas < 1 || o_.batch % replicas != 0)
            throw invalid_argument("epoch_sampler: " + std::to_string(replicas) + " replicas cannot share a batch of " +
                                   std::to_string(o_.batch) + " equally; the batch must be a multiple of the replica count");
        if (replica < 0 || replica >= replicas)
            throw invalid_argument("epoch_sampler: replica " + std::to_string(replica) + " is outside [0, " +
                                   std::to_string(replicas) + ")");
        const std::int64_t epoch = step / steps_per_epoch(), in_epoch = step % steps_per_epoch();
        const std::vector<std::int64_t>& perm = permutation(epoch);
        const std::int64_t share = o_.batch / replicas;
        const auto begin = perm.begin() + static_cast<std::ptrdiff_t>(in_epoch * o_.batch + replica * share);
        return {begin, begin + static_cast<std::ptrdiff_t>(share)};
    }

    //! Epoch `epoch`'s order of the sample ids.
    const std::vector<std::int64_t>& permutation(std::int64_t epoch)
    {
        if (epoch != epoch_ || perm_.empty()) {
            perm_.resize(static_cast<std::size_t>(o_.samples));
            std::iota(perm_.begin(), perm_.end(), std::int64_t{0});
            std::uint64_t s = o_.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch) * 0xD1B54A32D192ED03ULL + 1;
            for (std::int64_t i = o_.samples - 1; i > 0; --i) {
                const auto j = static_cast<std::int64_t>(next(s) % static_cast<std::uint64_t>(i + 1));
                std::swap(perm_[static_cast<std::size_t>(i)], perm_[static_cast<std::size_t>(j)]);
            }
            epoch_ = epoch;
        }
        return perm_;
    }

private:
    static std::uint64_t next(std::uint64_t& s) noexcept  // splitmix64
    {
        std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }

    options o_;
    std::int64_t epoch_ = -1;
    std::vector<std::int64_t> perm_;
};

} // namespace tpipe::elastic
