// Built against an installed tpipe with COMPONENTS libtorch: the adapter's headers and libtorch.
#include <tpipe/adapters/libtorch.hpp>

int main()
{
    torch::nn::Sequential model(torch::nn::Linear(2, 3), torch::nn::Linear(3, 2));
    return tpipe::libtorch::cut(model, {0, 1, 2}).size() == 2 ? 0 : 1;
}
