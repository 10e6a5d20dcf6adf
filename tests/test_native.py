"""kcheck.native: which host functions of inline C++/CUDA source wait for the GPU."""

from kcheck.native import file_host_syncs, host_syncs, looks_native

SOURCE = """
#include <torch/extension.h>
namespace ops {
__global__ void k(float* y) { cudaDeviceSynchronize(); }
__device__ float twice(float v) { return 2 * v; }
struct Holder { void wait() { cudaDeviceSynchronize(); } };

void copy_back(torch::Tensor x, float* host) {
    cudaMemcpy(host, x.data_ptr<float>(), 4, cudaMemcpyDeviceToHost);
}
void copy_async(torch::Tensor x, float* host, cudaStream_t s) {
    cudaMemcpyAsync(host, x.data_ptr<float>(), 4, cudaMemcpyDeviceToHost, s);
}
torch::Tensor commented(torch::Tensor x) {
    // cudaDeviceSynchronize();
    /* x.cpu(); */
    printf("cudaDeviceSynchronize()");
    return x;
}
int64_t count(torch::Tensor x) { return x.sum().item<int64_t>(); }
torch::Tensor through(torch::Tensor x) {
    if (count(x) > 0) { return x; }
    return x;
}
}  // namespace ops
"""


def test_host_functions_that_wait():
    found = host_syncs(SOURCE)
    assert found == {
        "copy_back": "cudaMemcpy()",
        "count": ".item()",
        "through": "count() -> .item()",
    }


def test_device_code_classes_comments_and_async_copies_do_not_wait():
    found = host_syncs(SOURCE)
    for name in ("k", "twice", "wait", "Holder", "copy_async", "commented"):
        assert name not in found


def test_only_strings_that_look_native_are_read():
    assert not looks_native("void f() { cudaDeviceSynchronize(); }  but no header or torch")
    assert file_host_syncs(["torch::Tensor f(torch::Tensor x) { cudaDeviceSynchronize(); return x; }",
                            "plain {text} f() { cudaDeviceSynchronize(); }"]) == {"f": "cudaDeviceSynchronize()"}
