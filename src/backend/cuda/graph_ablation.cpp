// MVLLM_CUDA_GRAPH_ABLATION=N (a profiling aid; it corrupts the run's outputs): at the N-th replay
// of a recorded step, time the graph as recorded, then again with each kernel's nodes disabled in
// turn (cudaGraphNodeSetEnabled), and print what each kernel costs inside the graph: the
// difference, which includes the launch gap and the drain the kernel causes there, and reflects
// programmatic dependent launch overlap, which a kernel-by-kernel profiler (ncu) cannot see.
// Disabled kernels leave stale data behind, so the replays after it compute garbage.
#include <cuda.h>  // driver types only: the functions come through cudaGetDriverEntryPointByVersion
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend_impl.h"

namespace mvllm {
namespace {

// "void mvllm::cuda::(anonymous namespace)::gemv_qx_kernel<(mvllm::DType)2, 1, false>(...)"
// -> "gemv_qx_kernel<(mvllm::DType)2, 1, false>".
std::string short_name(const char* mangled) {
    int status = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    std::string s = status == 0 && d ? d : mangled;
    std::free(d);
    for (const std::string anon : {"(anonymous namespace)::", "mvllm::", "cuda::"})
        for (size_t at; (at = s.find(anon)) != std::string::npos;) s.erase(at, anon.size());
    int depth = 0;
    size_t cut = s.size();
    for (size_t i = 0; i < s.size(); ++i) {  // the argument list: the first '(' outside <>
        if (s[i] == '<') ++depth;
        else if (s[i] == '>') --depth;
        else if (s[i] == '(' && depth == 0) { cut = i; break; }
    }
    s = s.substr(0, cut);
    if (s.rfind("void ", 0) == 0) s = s.substr(5);
    const size_t colon = s.rfind("::", s.find('<') == std::string::npos ? s.size() : s.find('<'));
    if (colon != std::string::npos) s = s.substr(colon + 2);
    return s.size() > 110 ? s.substr(0, 107) + "..." : s;
}

float time_replays(cudaGraphExec_t exec, cudaStream_t stream, cudaEvent_t a, cudaEvent_t b, int reps) {
    MVLLM_CUDA_OK(cudaGraphLaunch(exec, stream));  // warm
    MVLLM_CUDA_OK(cudaEventRecord(a, stream));
    for (int i = 0; i < reps; ++i) MVLLM_CUDA_OK(cudaGraphLaunch(exec, stream));
    MVLLM_CUDA_OK(cudaEventRecord(b, stream));
    MVLLM_CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    MVLLM_CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    return 1e3f * ms / reps;  // us per replay
}

}  // namespace

void ablate_graph(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int32_t batch_size) {
    size_t n = 0;
    MVLLM_CUDA_OK(cudaGraphGetNodes(graph, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    MVLLM_CUDA_OK(cudaGraphGetNodes(graph, nodes.data(), &n));
    // Through the driver's node parameters, which also name the kernels that libraries (cuBLAS)
    // launch with the driver API; the key adds the grid, which tells the matmul shapes apart.
    using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
    using FuncName = CUresult (*)(const char**, CUfunction);
    using KernelName = CUresult (*)(const char**, CUkernel);
    void *get_params = nullptr, *func_name = nullptr, *kernel_name = nullptr;
    cudaDriverEntryPointQueryResult q;
    cudaGetDriverEntryPointByVersion("cuGraphKernelNodeGetParams", &get_params, 12000, cudaEnableDefault, &q);
    cudaGetDriverEntryPointByVersion("cuFuncGetName", &func_name, 12030, cudaEnableDefault, &q);
    cudaGetDriverEntryPointByVersion("cuKernelGetName", &kernel_name, 12030, cudaEnableDefault, &q);
    cudaGetLastError();
    std::map<std::string, std::vector<cudaGraphNode_t>> groups;
    size_t n_kernels = 0;
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type;
        MVLLM_CUDA_OK(cudaGraphNodeGetType(node, &type));
        if (type != cudaGraphNodeTypeKernel) continue;
        ++n_kernels;
        std::string name = "(kernel of unknown name)";
        CUDA_KERNEL_NODE_PARAMS p{};
        if (get_params && reinterpret_cast<GetParams>(get_params)(reinterpret_cast<CUgraphNode>(node), &p) == CUDA_SUCCESS) {
            const char* mangled = nullptr;
            if (p.func && func_name) reinterpret_cast<FuncName>(func_name)(&mangled, p.func);
            else if (p.kern && kernel_name) reinterpret_cast<KernelName>(kernel_name)(&mangled, p.kern);
            if (mangled) name = short_name(mangled);
            char grid[64];
            std::snprintf(grid, sizeof(grid), " [%ux%ux%u]", p.gridDimX, p.gridDimY, p.gridDimZ);
            name += grid;
        }
        cudaGetLastError();
        groups[name].push_back(node);
    }
    // A kernel that runs m times per layer with the same grid (at batch 1 the O and down GEMVs)
    // is split by its occurrence in the layer: the layer count L is the commonest group size,
    // and a group of m * L nodes becomes m groups "#0" .. "#m-1" (in recording order).
    std::map<size_t, int> sizes;
    for (const auto& [name, members] : groups) ++sizes[members.size()];
    const size_t layers = std::max_element(sizes.begin(), sizes.end(), [](const auto& x, const auto& y) {
                              return x.second < y.second;
                          })->first;
    std::map<std::string, std::vector<cudaGraphNode_t>> split;
    for (auto& [name, members] : groups) {
        const size_t m = members.size() / layers;
        if (layers > 1 && m > 1 && members.size() % layers == 0) {
            for (size_t i = 0; i < members.size(); ++i) split[name + " #" + std::to_string(i % m)].push_back(members[i]);
        } else {
            split[name] = std::move(members);
        }
    }
    groups = std::move(split);
    cudaEvent_t a, b;
    MVLLM_CUDA_OK(cudaEventCreate(&a));
    MVLLM_CUDA_OK(cudaEventCreate(&b));
    constexpr int kReps = 20;
    MVLLM_CUDA_OK(cudaStreamSynchronize(stream));
    const float base = time_replays(exec, stream, a, b, kReps);
    struct Row {
        std::string name;
        size_t count;
        float saved;
    };
    std::vector<Row> rows;
    for (auto& [name, members] : groups) {
        for (cudaGraphNode_t node : members) MVLLM_CUDA_OK(cudaGraphNodeSetEnabled(exec, node, 0));
        const float t = time_replays(exec, stream, a, b, kReps);
        for (cudaGraphNode_t node : members) MVLLM_CUDA_OK(cudaGraphNodeSetEnabled(exec, node, 1));
        rows.push_back({name, members.size(), base - t});
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) { return x.saved > y.saved; });
    float sum = 0;
    for (const Row& r : rows) sum += r.saved;
    std::fprintf(stderr, "graph ablation: %d sequences, %zu kernel nodes, %.1f us per replay (%d replays each)\n",
                 batch_size, n_kernels, base, kReps);
    std::fprintf(stderr, "| kernel | nodes | us per step without it saved | us per node | share |\n|---|---|---|---|---|\n");
    for (const Row& r : rows)
        std::fprintf(stderr, "| %s | %zu | %.1f | %.2f | %.1f %% |\n", r.name.c_str(), r.count, r.saved,
                     r.saved / r.count, 100.0 * r.saved / base);
    std::fprintf(stderr, "| (sum of the rows) | | %.1f | | %.1f %% |\n", sum, 100.0 * sum / base);
}

}  // namespace mvllm
