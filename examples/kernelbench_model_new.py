"""A KernelBench-style task file: Linear + bias + GELU, with a "new" model that keeps the GEMM in cuBLAS.

The inline CUDA kernel is real, but it only fuses the bias add and the GELU. The GEMM, which is
nearly all of the work, is still `torch.matmul`, exactly as in the reference `Model`, so any
speed-up this file reports cannot come from the kernel. `kcheck check` reports KC102 here.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

bias_gelu_source = r"""
#include <torch/extension.h>

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ y, int rows, int cols) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < rows * cols) {
        float v = x[idx] + bias[idx % cols];
        y[idx] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

torch::Tensor bias_gelu_cuda(torch::Tensor x, torch::Tensor bias) {
    auto y = torch::empty_like(x);
    int rows = x.size(0), cols = x.size(1);
    int threads = 256, blocks = (rows * cols + threads - 1) / threads;
    bias_gelu_kernel<<<blocks, threads>>>(x.data_ptr<float>(), bias.data_ptr<float>(),
                                          y.data_ptr<float>(), rows, cols);
    return y;
}
"""

bias_gelu_cpp = "torch::Tensor bias_gelu_cuda(torch::Tensor x, torch::Tensor bias);"

bias_gelu = load_inline(
    name="bias_gelu",
    cpp_sources=bias_gelu_cpp,
    cuda_sources=bias_gelu_source,
    functions=["bias_gelu_cuda"],
    verbose=False,
)


class Model(nn.Module):
    """The reference: y = GELU(x @ W^T + b)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x), approximate="tanh")


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) / in_features**0.5)
        self.bias = nn.Parameter(torch.zeros(out_features))
        self.bias_gelu = bias_gelu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.matmul(x, self.weight.t())
        return self.bias_gelu.bias_gelu_cuda(h.contiguous(), self.bias)


batch_size = 4096
in_features = 4096
out_features = 11008


def get_inputs():
    return [torch.randn(batch_size, in_features, device="cuda")]


def get_init_inputs():
    return [in_features, out_features]
