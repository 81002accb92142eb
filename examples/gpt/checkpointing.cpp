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

//! The stage that holds tensor `name`: the embeddings the first, block l's tensors the stage
//! whose layers include l, the final LayerNorm and an untied head the last.
int stage_of(const std::string& name, const std::vector<int>& cuts)
{
    const int stages = static_cast<int>(cuts.size()) - 1;
    if (name.rfind("h.", 0) == 0) {
        const int layer = std::stoi(name.substr(2));
        for (int s = 0; s < stages; ++s)
            if (layer >= cuts[s] && layer < cuts[s + 1]) return s;
        throw std::logic_error("layer " + std::to_string(layer) + " lies in no stage");
    }
    return name == "wte" || name == "wpe" ? 0 : stages - 1;
}

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

void checkpointer::after_step(std::int64_t step, const parameters<float>& p, adamw<float>& opt,
                              const std::vector<std::uint64_t>& streams)
{
    if (f_.save.empty() || f_.every <= 0) return;
    out_.finish();  // the previous save has overlapped one step of training; commit it
    if (step % f_.every == 0) save(step, p, opt, streams);
}

void checkpointer::save(std::int64_t step, const parameters<float>& p, adamw<float>& opt,
                        const std::vector<std::uint64_t>& streams)
{
    tpipe::state::manifest m;
    m.step = step;
    m.model = model_json(cfg_);
    m.optimizer = optimizer_json(opt_, opt);
    tpipe::json::array rng;
    for (auto s : streams) rng.push_back(tpipe::state::checksum::to_hex(s));
    m.rng = object{{"seed", tpipe::state::checksum::to_hex(seed_)},
                   {"data_streams", std::move(rng)},
                   {"batches_drawn_per_stream", step}};
    m.elastic = nullptr;
    m.shape = place_.shape;
    std::vector<tpipe::state::shard_snapshot> mine;
    if (place_.writes)
        for (int r = 0; r < place_.ranks; ++r) {
            if (place_.my_rank >= 0 && r != place_.my_rank) continue;
            tpipe::state::shard_snapshot s("rank-" + std::to_string(r) + ".bin");
            const auto m_all = opt.first_moments(), v_all = opt.second_moments();
            std::size_t bytes = 0;
            for (const auto& t : p.lay.tensors)
                if (place_.stage_rank[static_cast<std::size_t>(stage_of(t.name, place_.layer_cuts))] == r)
                    bytes += static_cast<std::size_t>(t.size()) * sizeof(float) * (t.offset < opt.frozen() ? 1 : 3);
            s.reserve(bytes);  // one copy of each byte: the snapshot is the pause a save puts into training
            for (const auto& t : p.lay.tensors) {
                if (place_.stage_rank[static_cast<std::size_t>(stage_of(t.name, place_.layer_cuts))] != r) continue;
                const auto n = static_cast<std::size_t>(t.size());
                s.add<float>("param/" + t.name, t.shape, 0, std::span<const float>(p.value).subspan(static_cast<std::size_t>(t.offset), n));
                if (t.offset < opt.frozen()) continue;  // frozen: no optimizer state
                const auto at = static_cast<std::size_t>(t.offset - opt.frozen());
                s.add<float>("adamw.m/" + t.name, t.shape, 0, std::span<const float>(m_all.subspan(at, n)));
                s.add<float>("adamw.v/" + t.name, t.shape, 0, std::span<const float>(v_all.subspan(at, n)));
            }
            mine.push_back(std::move(s));
        }
    out_.begin(std::move(m), std::move(mine));
}

training_position load_checkpoint(const std::string& path, const config& cfg, const adamw_options& o,
                                  parameters<float>& p, adamw<float>& opt)
{
    const tpipe::state::checkpoint_reader in(path);
    const auto& m = in.contents();
    const std::string mpath = in.path() + "/" + tpipe::state::manifest_file;
    require_same(m.model, model_json(cfg),
                 {"model", "vocab", "d_model", "heads", "layers", "seq_len", "mlp_ratio", "tied", "ln_eps", "dtype"},
                 "model config", mpath);
    require_same(m.optimizer, optimizer_json(o, opt),
                 {"kind", "lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm", "frozen"}, "optimizer", mpath);
    if (opt.frozen() != 0) throw std::logic_error("load_checkpoint: the optimizer must be fresh");
    const auto m_all = opt.first_moments(), v_all = opt.second_moments();
    for (const auto& t : p.lay.tensors) {
        const auto n = static_cast<std::size_t>(t.size());
        const auto at = static_cast<std::size_t>(t.offset);
        in.read_tensor<float>("param/" + t.name, t.shape, std::span<float>(p.value).subspan(at, n));
        in.read_tensor<float>("adamw.m/" + t.name, t.shape, m_all.subspan(at, n));
        in.read_tensor<float>("adamw.v/" + t.name, t.shape, v_all.subspan(at, n));
    }
    training_position pos;
    pos.step = m.step;
    opt.step_count() = static_cast<std::int64_t>(m.optimizer.at("step_count").as_number("step_count"));
    for (const auto& s : m.rng.at("data_streams").as_array("data_streams"))
        pos.data_streams.push_back(tpipe::state::checksum::from_hex(s.as_string("data stream"), "data stream"));
    return pos;
}

} // namespace gpt
