// tpipe-plan freeze: the AutoFreeze schedule, frozen layers per epoch.
#include <iomanip>
#include <iostream>
#include <string>

#include "command.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/elastic/freeze.hpp"

namespace {

constexpr const char* usage = R"(usage: tpipe-plan freeze --layers L --alpha A --epochs E [--policy progressive|paper]
                         [--max-frozen N] [--json]

Frozen leading layers at the start of each epoch 0 .. E-1 (AutoFreeze, PipeTransformer).

  --layers L       freezable layers (transformer blocks); the head after them never freezes
  --alpha A        freeze degree in (0, 1]: p/q (1/3) or a decimal (0.25), kept exact
  --epochs E       epochs to list (>= 1)
  --policy         progressive (default): F(e) = ceil(L (1 - (1 - A)^e)), the released code's
                   schedule, computed exactly (L = 12, A = 1/3 gives 4 at e = 1, not 5);
                   paper: Eq. 1, F <- min(F + ceil(A (L - F)), argmin of the active layers'
                   gradient norms + 1); with no gradients observed here, the bound alone,
                   i.e. the integer recursion (it can run ahead of the closed form)
  --max-frozen N   at most N layers freeze (default L; L - 1 keeps the last layer trainable)
  --json           {"frozen": [...], "layers", "alpha", "policy"}
)";

template <class Policy>
std::vector<int> schedule(Policy p, int layers, int epochs, int max_frozen)
{
    return tpipe::elastic::freeze_schedule(p, layers, epochs, max_frozen);
}

int run_freeze(tpipe::flag_reader& a)
{
    if (a.flag("--help") || a.flag("-h")) {
        std::cout << usage;
        return 0;
    }
    const int layers = a.required_number<int>("--layers");
    const auto alpha_text = a.value("--alpha");
    const int epochs = a.required_number<int>("--epochs");
    const std::string policy = a.text("--policy", "progressive");
    const int max_frozen = a.number<int>("--max-frozen", -1);
    const bool as_json = a.flag("--json");
    a.finish();
    if (!alpha_text) throw tpipe::invalid_argument("missing required --alpha A (p/q or a decimal in (0, 1])");
    if (a.value("--max-frozen") && max_frozen < 0)
        throw tpipe::invalid_argument("--max-frozen must be >= 0, got " + std::to_string(max_frozen));
    const auto alpha = tpipe::elastic::fraction::parse(*alpha_text);
    std::vector<int> frozen;
    if (policy == "progressive") frozen = schedule(tpipe::elastic::progressive_freeze(alpha), layers, epochs, max_frozen);
    else if (policy == "paper") frozen = schedule(tpipe::elastic::paper_freeze(alpha), layers, epochs, max_frozen);
    else throw tpipe::invalid_argument("--policy must be progressive or paper, got '" + policy + "'");

    if (as_json) {
        tpipe::json::array f;
        for (int x : frozen) f.emplace_back(x);
        std::cout << tpipe::json::dump(tpipe::json::object{
                         {"frozen", std::move(f)}, {"layers", layers}, {"alpha", alpha.str()}, {"policy", policy}})
                  << "\n";
        return 0;
    }
    std::cout << "policy " << policy << ", L = " << layers << ", alpha = " << alpha.str() << "\nepoch  frozen\n";
    for (std::size_t e = 0; e < frozen.size(); ++e) std::cout << std::setw(5) << e << "  " << frozen[e] << "\n";
    return 0;
}

tpipe::cli::registrar reg{"freeze", "AutoFreeze schedule: frozen layers per epoch (--help for options)", run_freeze};

} // namespace
