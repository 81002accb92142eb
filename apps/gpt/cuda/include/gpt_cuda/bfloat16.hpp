#pragma once
// bfloat16 on the host: the storage type the host backend uses to run the CUDA GPT's bf16 path
// in the CPU tests. Its conversions are the device's __nv_bfloat16's: float to bf16 rounds to
// nearest even (NaN stays NaN), bf16 to float is exact. Arithmetic happens in float: a value is
// converted explicitly at each load and store, as in the kernels' bodies. No CUDA header.
#include <cstdint>
#include <cstring>

namespace gpt::cuda {

struct bfloat16 {
    std::uint16_t bits = 0;

    bfloat16() = default;
    explicit bfloat16(float f)
    {
        std::uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it one, quietly
            bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
            return;
        }
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
        bits = static_cast<std::uint16_t>(u >> 16);
    }
    explicit operator float() const
    {
        const std::uint32_t u = std::uint32_t(bits) << 16;
        float f;
        std::memcpy(&f, &u, sizeof f);
        return f;
    }
};
static_assert(sizeof(bfloat16) == 2);

} // namespace gpt::cuda
