// Lesson 4: the two-stage model of Lesson 1, one stage per MPI process, and its checkpoint.
//
// tpipe::mpi::job lays out the pipeline over the processes: process p runs stage p and holds
// only that stage's weights; the job's transport carries activations and gradients between
// them. Each process steps its own stage after the iteration, then saves it into its own shard
// of a checkpoint, which fresh stages read back. Launched as 1 process, the job runs both stages
// on threads. Every process also trains the tiny model without a pipeline, and all exit 1 if a
// pipelined or read-back weight differs from it by a bit.
//
//   mpirun -np 2 build/examples/lesson_processes   (as root: --allow-run-as-root; or 1 process:
//   build/examples/lesson_processes)
#include <mpi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <tpipe/mpi/environment.hpp>
#include <tpipe/mpi/job.hpp>
#include <tpipe/tpipe.hpp>

using vec = std::vector<float>;
constexpr int features = 4, hidden = 16, rows = 32, steps = 30;
constexpr float lr = 0.05f;

//! y = act(W x + b) for every row of a microbatch (Lesson 1's stage, unchanged).
struct dense {
    using input = vec;
    using output = vec;
    int in = 0, out = 0;
    bool relu = false;
    vec w{}, b{}, dw{}, db{};
    std::map<int, vec> x_of{}, y_of{};  // what backward needs, per microbatch

    vec forward(const tpipe::unit& u, vec x)
    {
        vec y(x.size() / in * out);
        for (std::size_t r = 0; r < x.size() / in; ++r)
            for (int o = 0; o < out; ++o) {
                float s = b[o];
                for (int i = 0; i < in; ++i) s += w[o * in + i] * x[r * in + i];
                y[r * out + o] = relu && s < 0 ? 0 : s;
            }
        x_of[u.microbatch] = std::move(x), y_of[u.microbatch] = y;
        return y;
    }
    vec backward(const tpipe::unit& u, vec dy)
    {
        auto x = x_of.extract(u.microbatch), y = y_of.extract(u.microbatch);
        vec dx(x.mapped().size(), 0.f);
        for (std::size_t r = 0; r < dx.size() / in; ++r)
            for (int o = 0; o < out; ++o) {
                const float g = relu && y.mapped()[r * out + o] <= 0 ? 0 : dy[r * out + o];
                db[o] += g;
                for (int i = 0; i < in; ++i) dw[o * in + i] += g * x.mapped()[r * in + i], dx[r * in + i] += g * w[o * in + i];
            }
        return dx;
    }
    void step()
    {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * dw[i], dw[i] = 0;
        for (std::size_t i = 0; i < b.size(); ++i) b[i] -= lr * db[i], db[i] = 0;
    }
};

//! Stage s of the model as built before training: 4 -> 16 with ReLU, then 16 -> 1.
dense layer(int s)
{
    dense d{.in = s == 0 ? features : hidden, .out = s == 0 ? hidden : 1, .relu = s == 0};
    for (int i = 0; i < d.in * d.out; ++i) d.w.push_back((s == 0 ? 0.5f : 0.3f) * std::sin(float(i + 1) * 0.7f));
    d.b.assign(d.out, 0), d.dw.assign(d.w.size(), 0), d.db.assign(d.out, 0);
    return d;
}

float input_at(std::int64_t row, int f) { return std::cos(float(row * features + f)); }
vec inputs(const tpipe::unit& u)
{
    vec x;
    for (auto r = u.row_begin; r < u.row_end; ++r)
        for (int f = 0; f < features; ++f) x.push_back(input_at(r, f));
    return x;
}
//! Mean squared error against the sum of the features, over the whole batch: returns dL/dy.
vec loss_gradient(const tpipe::unit& u, const vec& y, double& total)
{
    vec dy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
        float e = y[i];
        for (int f = 0; f < features; ++f) e -= input_at(u.row_begin + std::int64_t(i), f);
        total += double(e) * e / rows, dy[i] = 2 * e / rows;
    }
    return dy;
}

int main(int argc, char** argv)
{
    // [snippet:loop]
    tpipe::mpi::environment env(argc, argv);     // MPI, also for one process
    tpipe::mpi::job job({.pipeline_ranks = 2});  // 2 processes: a stage each; 1: both on threads
    auto here = [&](int s) { return job.transport().runs(s); };  // stage s (on rank s) runs in this process
    auto units = tpipe::microbatch_slicer{.count = 4}.scheme({.rows = rows, .seq_len = 1});
    auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{.ranks = 2}, units);
    tpipe::uniform_pipeline<dense> pipe({here(0) ? layer(0) : dense{}, here(1) ? layer(1) : dense{}});
    tpipe::cpu_engine cpu(job.single_process() ? 2 : 1);  // a loop thread per stage run here
    tpipe::runner r(pipe, prog, cpu, job.transport());    // to and from the other process's stage
    double loss = 0;
    tpipe::io_for<decltype(pipe)> io{.source = inputs,  // where stage 0 runs; the loss where stage 1 does
                                     .output_grad = [&](const tpipe::unit& u, vec&& y) { return loss_gradient(u, y, loss); }};
    for (int step = 0; step < steps; ++step) {
        loss = 0, r.run(io);
        for (int s : {0, 1}) if (here(s)) pipe.stage(s).step();  // each process steps the stage it holds
        if (here(1) && step % 10 == 0) std::printf("step %2d  loss %.5f\n", step, loss);
    }
    // [/snippet]

    long id = ::getpid();  // one scratch directory for the job
    MPI_Bcast(&id, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    const std::string dir = (std::filesystem::temp_directory_path() / ("tpipe_lesson4_" + std::to_string(id))).string();
    // [snippet:save]
    tpipe::state::shard_snapshot mine("process-" + std::to_string(job.process()) + ".bin");
    for (int s : {0, 1})
        if (here(s)) {  // the tensors of the stages this process holds, by name
            const dense& d = pipe.stage(s);
            mine.add<float>("stage" + std::to_string(s) + ".w", {d.out, d.in}, 0, d.w);
            mine.add<float>("stage" + std::to_string(s) + ".b", {d.out}, 0, d.b);
        }
    tpipe::state::checkpoint_writer saver({.root = dir, .leader = job.process() == 0, .shards = job.all().size(),
                                           .barrier = [] { MPI_Barrier(MPI_COMM_WORLD); }});
    tpipe::state::manifest m;  // a real run also records its model, optimizer and data position here
    m.step = steps;
    saver.begin(m, {std::move(mine)});  // written on a background thread
    saver.finish();                     // process 0 commits DIR/step-00000030
    MPI_Barrier(MPI_COMM_WORLD);        // ... before anyone reads it
    // [/snippet]

    // [snippet:load]
    tpipe::state::checkpoint_reader saved(dir);  // the newest checkpoint, whole and checked
    bool same = saved.contents().step == steps;
    for (int s : {0, 1})
        if (here(s)) {  // a resumed run: fresh stages, each reading its tensors wherever they were saved
            dense d = layer(s);
            saved.read_tensor<float>("stage" + std::to_string(s) + ".w", {d.out, d.in}, d.w);
            saved.read_tensor<float>("stage" + std::to_string(s) + ".b", {d.out}, d.b);
            same = same && d.w == pipe.stage(s).w && d.b == pipe.stage(s).b;
        }
    // [/snippet]

    // The reference: both stages, one microbatch at a time on this thread.
    dense ref[2] = {layer(0), layer(1)};
    for (int step = 0; step < steps; ++step) {
        double unused = 0;
        for (int i = 0; i < units.units(); ++i) {
            const tpipe::unit u = units.at(i);
            ref[0].backward(u, ref[1].backward(u, loss_gradient(u, ref[1].forward(u, ref[0].forward(u, inputs(u))), unused)));
        }
        ref[0].step(), ref[1].step();
    }
    for (int s : {0, 1})
        if (here(s)) same = same && pipe.stage(s).w == ref[s].w && pipe.stage(s).b == ref[s].b;
    int all_same = same;
    MPI_Allreduce(MPI_IN_PLACE, &all_same, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (job.process() == 0) {
        std::filesystem::remove_all(dir);
        std::printf("%d process(es): pipelined and checkpointed weights %s the sequential ones\n", job.all().size(),
                    all_same ? "equal (bitwise)" : "DIFFER from");
    }
    return all_same ? 0 : 1;
}
