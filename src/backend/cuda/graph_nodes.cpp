// Reading and rewriting the kernel nodes of a recorded step (graph_step.cpp).
//
// cuBLAS launches its kernels itself, without programmatic dependent launch, so in a recorded
// step the edge from the project's kernel before a GEMM into the GEMM is an ordinary one: the GEMM's
// CTAs are launched only once the previous grid has ended and flushed. cuBLAS's Hopper GEMMs
// ("nvjet_*") wait for their prerequisite grids themselves (griddepcontrol.wait, checked with
// cuobjdump, bench/NOTES.md), so that edge may be programmatic: the GEMM is launched when the
// previous kernel triggers (the project's kernels trigger as they start), its CTAs set up and
// wait on the device, and its reads still follow the previous kernel's writes.
#include <cuda.h>  // driver types only: the functions come through cudaGetDriverEntryPointByVersion

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"

namespace mvllm {

std::string kernel_node_name(cudaGraphNode_t node, unsigned (*grid)[3]) {
    using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
    using FuncName = CUresult (*)(const char**, CUfunction);
    using KernelName = CUresult (*)(const char**, CUkernel);
    static void *get_params = nullptr, *func_name = nullptr, *kernel_name = nullptr;
    static const bool resolved = [] {
        cudaDriverEntryPointQueryResult q;
        cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &get_params, 12000, cudaEnableDefault, &q);
        cudaGetDriverEntryPointByVersion("cuFuncGetName", &func_name, 12030, cudaEnableDefault, &q);
        cudaGetDriverEntryPointByVersion("cuKernelGetName", &kernel_name, 12030, cudaEnableDefault, &q);
        cudaGetLastError();
        return true;
    }();
    (void)resolved;
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) {
        cudaGetLastError();
        return {};
    }
    std::string name;
    CUDA_KERNEL_NODE_PARAMS p{};
    if (get_params && reinterpret_cast<GetParams>(get_params)(reinterpret_cast<CUgraphNode>(node), &p) == CUDA_SUCCESS) {
        const char* mangled = nullptr;
        if (p.func && func_name) reinterpret_cast<FuncName>(func_name)(&mangled, p.func);
        else if (p.kern && kernel_name) reinterpret_cast<KernelName>(kernel_name)(&mangled, p.kern);
        if (mangled) name = mangled;
        if (grid) {
            (*grid)[0] = p.gridDimX;
            (*grid)[1] = p.gridDimY;
            (*grid)[2] = p.gridDimZ;
        }
    }
    cudaGetLastError();
    return name;
}

bool library_gemm_edges_programmatic() {
    static const bool on = [] {
        const char* v = std::getenv("MVLLM_CUBLAS_PDL");
        return v != nullptr && std::strcmp(v, "1") == 0;
    }();
    return on;
}

int make_library_gemm_edges_programmatic(cudaGraph_t graph) {
    size_t n = 0;
    MVLLM_CUDA_OK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    MVLLM_CUDA_OK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
    int changed = 0;
    for (size_t i = 0; i < n; ++i) {
        if (data[i].type != cudaGraphDependencyTypeDefault) continue;
        if (kernel_node_name(to[i]).rfind("nvjet_", 0) != 0 || kernel_node_name(from[i]).empty()) continue;
        MVLLM_CUDA_OK(cudaGraphRemoveDependencies(graph, &from[i], &to[i], &data[i], 1));
        cudaGraphEdgeData e{};
        e.from_port = cudaGraphKernelNodePortProgrammatic;
        e.type = cudaGraphDependencyTypeProgrammatic;
        MVLLM_CUDA_OK(cudaGraphAddDependencies(graph, &from[i], &to[i], &e, 1));
        ++changed;
    }
    return changed;
}

}  // namespace mvllm
