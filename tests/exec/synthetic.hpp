#pragma once
// Synthetic stages for runtime tests: exact integer arithmetic on small vectors, with a causal
// "K/V" dependency between the token slices of a microbatch, weight-gradient accumulators, and
// checks that the runtime keeps the stage contract (slice order, one thread at a time).
#include <atomic>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpipe/core/unit.hpp"

namespace synth {

using vec = std::vector<long long>;

struct fault {
    int microbatch = -1, slice = -1;
    char kind = 0;  // 'F', 'B' (backward or backward_input) or 'W'
};

struct stage_state {
    long long da = 0, db = 0;                        // weight gradients
    std::map<int, long long> kv;                     // per microbatch: sum of earlier inputs
    std::map<int, long long> kv_tokens;              // tokens seen so far
    std::map<int, long long> kv_grad;                // gradient flowing into earlier slices
    std::map<int, long long> bwd_next;               // slice expected next in backward (descending)
    std::map<std::pair<int, int>, vec> saved_x, saved_g;
    friend bool operator==(const stage_state& a, const stage_state& b)
    {
        return a.da == b.da && a.db == b.db && a.kv == b.kv && a.kv_grad == b.kv_grad;
    }
};

//! y_i = a*x_i + b + kv[mb]; backward: dx_i = a*g_i + kv_grad[mb]; dA += x.g, dB += sum g.
template <bool Split>
struct stage {
    using input = vec;
    using output = vec;
    long long a = 1, b = 0;
    stage_state st{};
    fault f{};
    int slices_per_mb = 1;
    std::atomic<int> inside{0};

    stage(long long a_, long long b_, fault f_ = {}) : a(a_), b(b_), f(f_) {}
    stage(stage&& o) noexcept : a(o.a), b(o.b), st(std::move(o.st)), f(o.f), slices_per_mb(o.slices_per_mb) {}

    //! Clears the per-iteration K/V state (keeps the weight gradients accumulating).
    void new_iteration()
    {
        st.kv.clear();
        st.kv_tokens.clear();
        st.kv_grad.clear();
        st.bwd_next.clear();
    }

    //! One call inside the stage, left on every exit (also by an exception). Entering refuses a
    //! second thread and raises the injected fault.
    class call_scope {
    public:
        call_scope(std::atomic<int>& inside, bool injected_fault, char kind) : inside_(inside)
        {
            const bool alone = inside_.fetch_add(1) == 0;
            if (alone && !injected_fault) return;
            inside_.fetch_sub(1);
            if (!alone) throw std::logic_error("two threads inside one stage");
            throw std::runtime_error(std::string("injected fault in ") + kind);
        }
        call_scope(const call_scope&) = delete;
        call_scope& operator=(const call_scope&) = delete;
        ~call_scope() { inside_.fetch_sub(1); }

    private:
        std::atomic<int>& inside_;
    };

    [[nodiscard]] call_scope enter(const tpipe::unit& u, char kind)
    {
        return call_scope(inside, u.microbatch == f.microbatch && u.slice == f.slice && kind == f.kind, kind);
    }

    vec forward(const tpipe::unit& u, vec x)
    {
        const auto scope = enter(u, 'F');
        if (st.kv_tokens[u.microbatch] != u.token_begin) throw std::logic_error("forward slices out of order");
        vec y(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) y[i] = a * x[i] + b + st.kv[u.microbatch];
        long long sum = 0;
        for (auto v : x) sum += v;
        st.kv[u.microbatch] += sum;
        st.kv_tokens[u.microbatch] = u.token_end;
        st.saved_x[{u.microbatch, u.slice}] = std::move(x);
        return y;
    }
    vec input_grad(const tpipe::unit& u, const vec& g)
    {
        if (!st.bwd_next.count(u.microbatch)) st.bwd_next[u.microbatch] = u.slice;  // the last slice comes first
        if (st.bwd_next[u.microbatch] != u.slice) throw std::logic_error("backward slices out of order");
        st.bwd_next[u.microbatch] = u.slice - 1;
        vec dx(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) dx[i] = a * g[i] + st.kv_grad[u.microbatch];
        long long sum = 0;
        for (auto v : g) sum += v;
        st.kv_grad[u.microbatch] += sum * static_cast<long long>(g.size());
        return dx;
    }
    void weight_grad(const tpipe::unit& u, const vec& g)
    {
        const vec& x = st.saved_x.at({u.microbatch, u.slice});
        for (std::size_t i = 0; i < g.size(); ++i) {
            st.da += x[i] * g[i];
            st.db += g[i];
        }
        st.saved_x.erase({u.microbatch, u.slice});
    }
    vec backward(const tpipe::unit& u, vec g)
    {
        const auto scope = enter(u, 'B');
        vec dx = input_grad(u, g);
        weight_grad(u, g);
        return dx;
    }
    vec backward_input(const tpipe::unit& u, vec g)
        requires Split
    {
        const auto scope = enter(u, 'B');
        vec dx = input_grad(u, g);
        st.saved_g[{u.microbatch, u.slice}] = std::move(g);
        return dx;
    }
    void backward_weight(const tpipe::unit& u)
        requires Split
    {
        const auto scope = enter(u, 'W');
        auto g = std::move(st.saved_g.at({u.microbatch, u.slice}));
        st.saved_g.erase({u.microbatch, u.slice});
        weight_grad(u, g);
    }
};

//! First-stage input of a unit: 3 elements derived from the unit.
inline vec source(const tpipe::unit& u)
{
    vec x(3);
    for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = static_cast<long long>(u.microbatch * 7 + u.slice * 3 + static_cast<int>(i) + u.token_begin) % 11 - 5;
    return x;
}

//! Loss gradient: out + 1 (mod a small number, to keep values small).
inline vec loss_grad(const vec& out)
{
    vec g(out.size());
    for (std::size_t i = 0; i < out.size(); ++i) g[i] = out[i] % 13 + 1;
    return g;
}

} // namespace synth
