#include "checkpointing.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>
#include <span>
#include <stdexcept>
#include <utility>

#include <tpipe/state/checkpoint_reader.hpp>
#include <tpipe/core/checked.hpp>
#include <tpipe/state/checksum.hpp>
#include <tpipe/state/manifest_field.hpp>

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

const std::vector<std::string> model_keys = {"model", "vocab",   "d_model",   "heads", "layers",
                                             "seq_len", "mlp_ratio", "tied", "ln_eps", "dtype"};

//! The state of one stage (or of the whole model) into `shard`: AdamW's moments of the pieces
//! `opt` steps (pieces of tensors for a sharded optimizer; none of a frozen layer) under
//! "adamw.m/NAME" and "adamw.v/NAME", and with `params` every parameter under "param/NAME", each
//! a range of the whole tensor. A tied copy is saved once, as the embedding. With tensor ranks,
//! a rank's share of a split tensor is its runs of the whole (gpt::tensor_info::each_run), and a
//! tensor every rank holds whole is saved by tensor rank 0.
void add_state(tpipe::state::shard_snapshot& shard, const parameters<float>& p, adamw<float>& opt, bool params)
{
    const tensor_split& tp = p.lay.held.tensor;
    auto add = [&](const std::string& name, const tensor_info& t, std::span<const float> values, std::int64_t first) {
        t.each_run(tp, first, static_cast<std::int64_t>(values.size()), [&](std::int64_t whole, std::int64_t at, std::int64_t n) {
            shard.add<float>(name, t.whole_shape(tp), whole, values.subspan(static_cast<std::size_t>(at - first), static_cast<std::size_t>(n)));
        });
    };
    if (params)
        for (const auto& t : p.lay.tensors)
            if (!t.tied_copy && !t.replica_copy)
                add("param/" + t.name, t,
                    std::span<const float>(p.value).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size())), 0);
    const auto m = opt.first_moments(), v = opt.second_moments();
    opt.each_piece(p, [&](const tensor_info& t, std::int64_t first, std::size_t n, std::size_t at) {
        if (t.tied_copy || t.replica_copy) return;
        add("adamw.m/" + t.name, t, m.subspan(at, n), first);
        add("adamw.v/" + t.name, t, v.subspan(at, n), first);
    });
}

//! Reads what add_state saved, whatever stages, sharding, tensor ranks or processes saved it:
//! every parameter of `p` (a tied copy reads the embedding's ranges) and the moments of the
//! pieces `opt` steps. A share of a split tensor is picked from the whole tensor, read at once.
void read_state(const tpipe::state::checkpoint_reader& in, parameters<float>& p, adamw<float>& opt)
{
    const tensor_split& tp = p.lay.held.tensor;
    std::vector<float> whole;
    // Elements [first, first + out.size()) of this rank's share of t, from the saved tensor `name`
    // (with `shape_checked`, which must have the model's whole shape).
    auto read = [&](const std::string& name, const tensor_info& t, std::int64_t first, std::span<float> out, bool shape_checked) {
        if (t.cut == tensor_info::split::whole)
            return shape_checked ? in.read_tensor<float>(name, t.shape, out) : in.read<float>(name, first, out);
        whole.resize(static_cast<std::size_t>(t.whole_size(tp)));
        if (shape_checked) in.read_tensor<float>(name, t.whole_shape(tp), std::span<float>(whole));
        else in.read<float>(name, 0, std::span<float>(whole));
        for (std::size_t i = 0; i < out.size(); ++i)
            out[i] = whole[static_cast<std::size_t>(t.whole_index(first + static_cast<std::int64_t>(i), tp))];
    };
    for (const auto& t : p.lay.tensors)
        read("param/" + t.name, t, 0,
             std::span<float>(p.value).subspan(static_cast<std::size_t>(t.offset), static_cast<std::size_t>(t.size())), true);
    const auto m = opt.first_moments(), v = opt.second_moments();
    opt.each_piece(p, [&](const tensor_info& t, std::int64_t first, std::size_t n, std::size_t at) {
        read("adamw.m/" + t.name, t, first, m.subspan(at, n), false);
        read("adamw.v/" + t.name, t, first, v.subspan(at, n), false);
    });
}

//! Elastic and non-elastic runs draw their samples differently: neither resumes the other.
void require_elastic(const tpipe::state::manifest& m, bool elastic, const std::string& mpath)
{
    if (elastic && m.elastic.is_null())
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\" was saved by a non-elastic run (its samples were " +
                                      "drawn per replica, not by the elastic sampler); resume it without --elastic");
    if (!elastic && !m.elastic.is_null())
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\" was saved by an elastic run (train_gpt --elastic, " +
                                      "its samples drawn by the elastic sampler); resume it with --elastic");
}

//! What train_gpt reads from a manifest besides the tensors, each field checked (the library
//! checked its own: step, shards, ranges): a refusal is a corrupt_checkpoint naming the field.
//! The optimizer steps once per training step, so its step_count is the manifest's step.
struct saved_position {
    std::int64_t step_count = 0;
    std::vector<std::uint64_t> data_streams;  //!< none for an elastic run (its sampler is a function of the step)
};

saved_position read_position(const tpipe::state::manifest& m, bool elastic, const std::string& mpath)
{
    namespace field = tpipe::state::field;
    saved_position p;
    try {
        auto same_as_step = [&](const value& section, const std::string& where, const std::string& key) {
            const std::int64_t n = field::integer(section, where, key);
            if (n != m.step)
                throw tpipe::parse_error(where + "." + key + " is " + std::to_string(n) + ", but step is " +
                                         std::to_string(m.step) + " (one optimizer step and one batch per step)");
            return n;
        };
        p.step_count = same_as_step(m.optimizer, "optimizer", "step_count");
        field::integer(m.optimizer, "optimizer", "frozen");
        field::hex64_value(field::member(m.rng, "rng", "seed"), "rng.seed");
        if (elastic) {
            same_as_step(m.rng, "rng", "steps_drawn");
        } else {
            same_as_step(m.rng, "rng", "batches_drawn_per_stream");
            const auto& streams = field::array(m.rng, "rng", "data_streams");
            if (streams.empty()) throw tpipe::parse_error("rng.data_streams is empty (one stream per replica)");
            for (std::size_t d = 0; d < streams.size(); ++d)
                p.data_streams.push_back(field::hex64_value(streams[d], "rng.data_streams[" + std::to_string(d) + "]"));
        }
    } catch (const tpipe::state::checkpoint_error&) {
        throw;
    } catch (const tpipe::error& e) {
        throw tpipe::state::corrupt_checkpoint("checkpoint manifest \"" + mpath + "\" is malformed: " + e.what());
    }
    return p;
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
      out_({.root = f.save, .keep = f.keep, .run = place_.run, .leader = place_.leader,
            .shards = place_.ranks * place_.tensor.ranks * (place_.sharded ? place_.replicas : 1), .barrier = place_.barrier})
{
}

void checkpointer::after_step(std::int64_t step, const std::vector<stage_states<float>*>& replicas,
                              const std::vector<std::uint64_t>& streams)
{
    if (f_.save.empty() || f_.every <= 0) return;
    out_.finish();  // the previous save has overlapped one step of training; commit it
    if (step % f_.every == 0) save(step, replicas, streams);
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

void checkpointer::save(std::int64_t step, const std::vector<stage_states<float>*>& replicas,
                        const std::vector<std::uint64_t>& streams)
{
    const auto any = std::find_if(replicas.begin(), replicas.end(), [](auto* s) { return s != nullptr; });
    if (any == replicas.end()) throw std::logic_error("checkpoint: this process holds no replica");
    tpipe::state::manifest m;
    m.step = step;
    m.model = model_json(cfg_);
    m.optimizer = optimizer_json(opt_, (*any)->opt(first_held(**any)));
    tpipe::json::array rng;
    for (auto st : streams) rng.push_back(tpipe::state::checksum::to_hex(st));
    m.rng = object{{"seed", tpipe::state::checksum::to_hex(seed_)},
                   {"data_streams", std::move(rng)},
                   {"batches_drawn_per_stream", step}};
    m.elastic = nullptr;
    m.shape = place_.shape;
    std::vector<tpipe::state::shard_snapshot> mine;
    for (std::size_t d = 0; d < replicas.size(); ++d) {
        stage_states<float>* s = replicas[d];
        if (!s || (!place_.sharded && d != 0)) continue;  // unsharded, replica 0's state speaks for every replica
        for (int r = 0; r < place_.ranks; ++r) {
            if (place_.my_rank >= 0 && r != place_.my_rank) continue;
            std::vector<int> here;  // the stages of rank r held here
            for (int i = 0; i < s->stages(); ++i)
                if (s->holds(i) && place_.stage_rank[static_cast<std::size_t>(i)] == r) here.push_back(i);
            tpipe::state::shard_snapshot shard(
                "rank-" + std::to_string(r) +
                (place_.tensor.ranks > 1 ? "-tp-" + std::to_string(place_.tensor.rank) : std::string()) +
                (place_.sharded ? "-dp-" + std::to_string(d) : std::string()) + ".bin");
            std::size_t bytes = 0;
            for (int i : here) {
                if (d == 0)
                    for (const auto& t : s->params(i).lay.tensors)
                        if (!t.tied_copy && !t.replica_copy) bytes += static_cast<std::size_t>(t.size()) * sizeof(float);
                bytes += s->opt(i).first_moments().size() * sizeof(float) * 2;
            }
            shard.reserve(bytes);  // one copy of each byte: the snapshot is the pause a save puts into training
            for (int i : here) {
                const auto& p = s->params(i);
                auto& opt = s->opt(i);
                if (opt.frozen() != 0) throw std::logic_error("checkpoint: a stage's optimizer has a frozen prefix");
                add_state(shard, p, opt, d == 0);  // the parameters: replica 0's (every replica has the same)
            }
            mine.push_back(std::move(shard));
        }
    }
    out_.begin(std::move(m), std::move(mine));
}

training_position load_checkpoint(const std::string& path, const config& cfg, const adamw_options& o,
                                  stage_states<float>& s)
{
    const tpipe::state::checkpoint_reader in(path);
    const auto& m = in.contents();
    const std::string mpath = in.path() + "/" + tpipe::state::manifest_file;
    require_same(m.model, model_json(cfg), model_keys, "model config", mpath);
    require_elastic(m, false, mpath);
    require_same(m.optimizer, optimizer_json(o, s.opt(first_held(s))),
                 {"kind", "lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm", "frozen"}, "optimizer", mpath);
    const saved_position saved = read_position(m, false, mpath);
    for (int i = 0; i < s.stages(); ++i) {
        if (!s.holds(i)) continue;
        auto& p = s.params(i);
        auto& opt = s.opt(i);
        if (opt.frozen() != 0 || opt.steps() != 0) throw std::logic_error("load_checkpoint: the optimizer must be fresh");
        read_state(in, p, opt);
        opt.step_count() = saved.step_count;
    }
    training_position pos;
    pos.step = m.step;
    pos.run = m.run;
    pos.data_streams = saved.data_streams;
    return pos;
}

elastic_checkpointer::elastic_checkpointer(const checkpoint_flags& f, const config& cfg, const adamw_options& opt,
                                           std::uint64_t seed, tpipe::elastic::unit_seconds measured, bool writes,
                                           const std::string& run)
    : f_(f), cfg_(cfg), opt_(opt), seed_(seed), measured_(std::move(measured))
{
    if (writes && !f.save.empty())
        out_.emplace(tpipe::state::writer_options{.root = f.save, .keep = f.keep, .run = run, .shards = 1});
}

void elastic_checkpointer::after_step(std::int64_t done, const tpipe::elastic::replan_record& plan, const parameters<float>& p,
                                      adamw<float>& opt)
{
    last_done_ = done;
    last_plan_ = plan;
    if (!out_ || f_.every <= 0) return;
    out_->finish();  // the previous save has overlapped one step of training; commit it
    if (done % f_.every == 0) save(done, plan, p, opt);
}

bool elastic_checkpointer::save_stopped(std::int64_t done, const parameters<float>& p, adamw<float>& opt)
{
    if (out_ && done == last_done_ && done != last_saved_) save(done, last_plan_, p, opt);
    finish();
    return out_ && done == last_saved_;
}

void elastic_checkpointer::save(std::int64_t done, const tpipe::elastic::replan_record& plan, const parameters<float>& p,
                                adamw<float>& opt)
{
    tpipe::state::manifest m;
    m.step = done;
    m.model = model_json(cfg_);
    m.optimizer = optimizer_json(opt_, opt);
    m.rng = object{{"seed", tpipe::state::checksum::to_hex(seed_)},
                   {"sampler", "epoch_sampler"},
                   {"steps_drawn", done}};
    object seconds{{"forward", tpipe::json::array(measured_.forward.begin(), measured_.forward.end())},
                   {"backward", tpipe::json::array(measured_.backward.begin(), measured_.backward.end())}};
    for (const auto& [name, times] : tpipe::elastic::optional_times(measured_))
        if (!times->empty()) seconds.emplace(name, tpipe::json::array(times->begin(), times->end()));
    m.elastic = object{{"frozen_layers", plan.frozen},
                       {"plan", plan.to_json()},
                       {"unit_seconds", std::move(seconds)},
                       {"cache", "not saved: a resumed run computes the frozen prefix's outputs again"}};
    m.shape = object{{"elastic", true}, {"stages", plan.stages}, {"replicas", plan.replicas}};
    tpipe::state::shard_snapshot shard("rank-0.bin");
    shard.reserve(static_cast<std::size_t>(p.size() + 2 * (p.size() - opt.frozen())) * sizeof(float));
    add_state(shard, p, opt, true);  // the moments of the active layers only
    std::vector<tpipe::state::shard_snapshot> mine;
    mine.push_back(std::move(shard));
    out_->begin(std::move(m), std::move(mine));
    last_saved_ = done;
}

saved_elastic_run read_saved_elastic_run(const std::string& path, int units)
{
    const tpipe::state::checkpoint_reader in(path);
    const auto& m = in.contents();
    const std::string mpath = in.path() + "/" + tpipe::state::manifest_file;
    require_elastic(m, true, mpath);
    tpipe::elastic::unit_seconds u;
    try {
        const auto& t = m.elastic.at("unit_seconds");
        for (const auto& x : t.at("forward").as_array("forward"))
            u.forward.push_back(tpipe::checked_finite("elastic.unit_seconds.forward", x.as_number("forward seconds"), 0));
        for (const auto& x : t.at("backward").as_array("backward"))
            u.backward.push_back(tpipe::checked_finite("elastic.unit_seconds.backward", x.as_number("backward seconds"), 0));
        for (const auto& [name, times] : tpipe::elastic::optional_times(u))
            if (t.contains(name))
                for (const auto& x : t.at(name).as_array(name))
                    times->push_back(tpipe::checked_finite("elastic.unit_seconds." + std::string(name), x.as_number(name), 0));
    } catch (const tpipe::error& e) {
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\": its elastic unit times cannot be read: " + e.what());
    }
    if (const std::string problem = tpipe::elastic::unit_seconds_problem(u, static_cast<std::size_t>(units)); !problem.empty())
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\": its elastic unit times do not fit this model: " + problem);
    return {m.step, std::move(u), m.run};
}

tpipe::elastic::resume_point load_elastic_checkpoint(const std::string& path, const config& cfg, const adamw_options& o,
                                                     parameters<float>& p, adamw<float>& opt)
{
    const tpipe::state::checkpoint_reader in(path);
    const auto& m = in.contents();
    const std::string mpath = in.path() + "/" + tpipe::state::manifest_file;
    require_same(m.model, model_json(cfg), model_keys, "model config", mpath);
    require_elastic(m, true, mpath);
    if (opt.frozen() != 0 || opt.steps() != 0) throw std::logic_error("load_elastic_checkpoint: the optimizer must be fresh");
    require_same(m.optimizer, optimizer_json(o, opt),
                 {"kind", "lr", "beta1", "beta2", "eps", "weight_decay", "max_grad_norm"}, "optimizer", mpath);
    const saved_position saved = read_position(m, true, mpath);
    tpipe::elastic::resume_point at;
    at.steps_done = m.step;
    try {
        at.plan = tpipe::elastic::replan_record::from_json(m.elastic.at("plan"));
    } catch (const tpipe::error& e) {
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\": its elastic plan cannot be read: " + e.what());
    }
    const int frozen = at.plan.frozen;
    if (frozen < 0 || frozen > cfg.layers || at.plan.stages < 1 || at.plan.replicas < 1)
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\": its elastic plan (" + std::to_string(frozen) +
                                      " frozen layers, " + std::to_string(at.plan.stages) + " stages x " +
                                      std::to_string(at.plan.replicas) + " replicas) does not fit a model of " +
                                      std::to_string(cfg.layers) + " layers");
    opt.freeze(p.lay.frozen_end(frozen));
    const auto saved_frozen = tpipe::state::field::integer(m.optimizer, "optimizer", "frozen");
    if (saved_frozen != opt.frozen())
        throw incompatible_checkpoint("checkpoint \"" + mpath + "\": its optimizer's frozen range ends at " +
                                      std::to_string(saved_frozen) + " parameters, but " + std::to_string(frozen) +
                                      " frozen layers end at " + std::to_string(opt.frozen()));
    read_state(in, p, opt);
    opt.step_count() = saved.step_count;
    return at;
}

} // namespace gpt
