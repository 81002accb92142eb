#include "checkpointing.hpp"

#include <span>
#include <stdexcept>
#include <utility>

#include <tpipe/state/checkpoint_reader.hpp>
#include <tpipe/state/checksum.hpp>

namespace gpt {

namespace {

using tpipe::json::object;
using tpipe::json::value;
using tpipe::state::incompatible_checkpoint;

value optimizer_json(const adamw_options& o, const adamw<float>& opt)
{
    return object{{"kind", "adamw"},  {"lr", o.lr},   {"beta1", o.beta1},
                  {"beta2", o.beta2}, {"eps", o.eps}, {"weight_decay", o.weight_decay},
                  {"max_grad_norm", o.max_grad_norm}, {"step_count", opt.steps()}, {"frozen", opt.frozen()}};
}

//! Refuses a saved section that differs from this run's in any of `keys`, naming each.
void require_same(const value& saved, const value& mine, const std::vector<std::string>& keys, const std::string& what,
                  const std::string& path)
{
    std::string diff;
    for (const auto& k : keys) {
        const std::string a = saved.contains(k) ? tpipe::json::dump(saved.at(k)) : "(none)";
        const std::string b = tpipe::json::dump(mine.at(k));
        if (a != b) diff += (diff.empty() ? "" : ", ") + k + " " + a + " (this run: " + b + ")";
    }
    if (!diff.empty())
        throw incompatible_checkpoint("checkpoint \"" + path + "\" was saved with another " + what + ": " + diff);
}

} // namespace

value model_json(const config& c)
{
    return object{{"model", "gpt"},     {"vocab", c.vocab},         {"d_model", c.d_model}, {"heads", c.heads},
                  {"layers", c.layers}, {"seq_len", c.seq_len},     {"mlp_ratio", c.mlp_ratio},
                  {"tied", c.tied},     {"ln_eps", c.ln_eps},       {"dtype", "f32"}};
}

checkpointer::checkpointer(const checkpoint_flags& f, checkpoint_place place, const config& cfg,
                           const adamw_options& opt, std::uint64_t seed)
    : f_(f), place_(std::move(place)), cfg_(cfg), opt_(opt), seed_(seed),
      out_({.root = f.save, .keep = f.keep, .leader = place_.leader, .shards = place_.ranks, .barrier = place_.barrier})
{
}

void checkpointer::after_step(std::int64_t step, stage_states<float>& s, const std::vector<std::uint64_t>& streams)
{
    if (f_.save.empty() || f_.every <= 0) return;
    out_.finish();  // the previous save has overlapped one step of training; commit it
    if (step % f_.every == 0) save(step, s, streams);
}

namespace {

//! The first stage held here (its optimizer speaks for all: every stage steps together).
int first_held(const stage_states<float>& s)
{
    for (int i = 0; i < s.stages(); ++i)
        if (s.holds(i)) return i;
    throw std::logic_error("checkpoint: this process holds no stage");
}

} // namespace

void checkpointer::save(std::int64_t step, stage_states<float>& s, const std::vector<std::uint64_t>& streams)
{
    tpipe::state::manifest m;
    m.step = step;
    m.model = model_json(cfg_);
    m.optimizer = optimizer_json(opt_, s.opt(first_held(s)));
    tpipe::json::array rng;
    for (auto st : streams) rng.push_back(tpipe::state::checksum::to_hex(st));
    m.rng = object{{"seed", tpipe::state::checksum::to_hex(seed_)},
                   {"data_streams", std::move(rng)},
                   {"batches_drawn_per_stream", step}};
    m.elastic = nullptr;
    m.shape = place_.shape;
    std::vector<tpipe::state::shard_snapshot> mine;
    if (place_.writes)
        for (int r = 0; r < place_.ranks; ++r) {
            if (place_.my_rank >= 0 && r != place_.my_rank) continue;
            std::vector<int> here;  // the stages of rank r held here
            for (int i = 0; i < s.stages(); ++i)
                if (s.holds(i) && place_.stage_rank[static_cast<std::size_t>(i)] == r) here.push_back(i);
            tpipe::state::shard_snapshot shard("rank-" + std::to_string(r) + ".bin");
            std::size_t bytes = 0;
            for (int i : here)
                for (const auto& t : s.params(i).lay.tensors)
                    if (!t.tied_copy) bytes += static_cast<std::size_t>(t.size()) * sizeof(float) * 3;
            shard.reserve(bytes);  // one copy of each byte: the snapshot is the pause a save puts into training
            for (int i : here) {
                const auto& p = s.params(i);
                auto& opt = s.opt(i);
                if (opt.frozen() != 0) throw std::logic_error("checkpoint: a stage's optimizer has a frozen prefix");
                const auto m_all = opt.first_moments(), v_all = opt.second_moments();
                for (const auto& t : p.lay.tensors) {
                    if (t.tied_copy) continue;  // saved once, by the stage that holds the embedding
                    const auto n = static_cast<std::size_t>(t.size());
                    const auto at = static_cast<std::size_t>(t.offset);
                    shard.add<float>("param/" + t.name, t.shape, 0, std::span<const float>(p.value).subspan(at, n));
                    shard.add<float>("adamw.m/" + t.name, t.shape, 0, std::span<const float>(m_all.subspan(at, n)));
                    shard.add<float>("adamw.v/" + t.name, t.shape, 0, std::span<const float>(v_all.subspan(at, n)));
                }
            }
            mine.push_back(std::move(shard));
        }
    out_.begin(std::move(m), std::move(mine));
}

training_position load_checkpoint(const std::string& path, const config& cfg, const adamw_options& o,
                                  stage_states<float>& s)
{
    const tpipe::state::checkpoint_reader in(path);
    const auto& m = in.contents();
    const std::string mpath = in.path() + "/" + tpipe::state::manifest_file;
    require_same(m.model, model_json(cfg),
                 {"model", "vocab", "d_model", "heads", "layers", "seq_len", "mlp_ratio", "tied", "ln_eps", "dtype"},
                 "model config", mpath);
    require_same(m.optimizer, optimizer_json(o, s.opt(first_held(s))),
                 {"kind", "lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm", "frozen"}, "optimizer", mpath);
    const auto step_count = static_cast<std::int64_t>(m.optimizer.at("step_count").as_number("step_count"));
    for (int i = 0; i < s.stages(); ++i) {
        if (!s.holds(i)) continue;
        auto& p = s.params(i);
        auto& opt = s.opt(i);
        if (opt.frozen() != 0 || opt.steps() != 0) throw std::logic_error("load_checkpoint: the optimizer must be fresh");
        const auto m_all = opt.first_moments(), v_all = opt.second_moments();
        for (const auto& t : p.lay.tensors) {  // a tied copy reads the embedding's ranges ("wte")
            const auto n = static_cast<std::size_t>(t.size());
            const auto at = static_cast<std::size_t>(t.offset);
            in.read_tensor<float>("param/" + t.name, t.shape, std::span<float>(p.value).subspan(at, n));
            in.read_tensor<float>("adamw.m/" + t.name, t.shape, m_all.subspan(at, n));
            in.read_tensor<float>("adamw.v/" + t.name, t.shape, v_all.subspan(at, n));
        }
        opt.step_count() = step_count;
    }
    training_position pos;
    pos.step = m.step;
    for (const auto& st : m.rng.at("data_streams").as_array("data_streams"))
        pos.data_streams.push_back(tpipe::state::checksum::from_hex(st.as_string("data stream"), "data stream"));
    return pos;
}

} // namespace gpt
