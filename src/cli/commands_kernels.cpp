// mvllm bench kernels: the CUDA decode GEMV per weight type, 7B-sized shape and token count,
// against the copy / read bandwidth measured in the same run (backend/cuda/kernel_bench.h).
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "core/types.h"
#ifdef MVLLM_HAVE_CUDA
#include "backend/cuda/kernel_bench.h"
#endif

#ifndef MVLLM_GIT_COMMIT
#define MVLLM_GIT_COMMIT "unknown"
#endif

namespace mvllm::cli {
namespace {

struct BenchKernelsArgs {
    std::string device = "cuda";
    std::string types = "q4_0,q8_0,q4_K,q6_K,f16,bf16";
    std::string tokens = "1,2,4,8";
    std::string gemm_types = "q4_0,q8_0";
    std::string gemm_tokens;  // token counts of the tile-GEMM vs cuBLAS comparison ("" = none)
    std::string shapes;  // "IN:OUT,..." (default: the 7B table)
    int replays = 20;
    std::string json_out;
};

std::vector<std::string> split_commas(const std::string& s) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= s.size()) {
        const size_t e = s.find(',', b);
        const std::string part = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if (!part.empty()) out.push_back(part);
        if (e == std::string::npos) break;
        b = e + 1;
    }
    return out;
}

int cmd_bench_kernels(const BenchKernelsArgs& a) {
#ifndef MVLLM_HAVE_CUDA
    (void)a;
    return fail(make_error("bench kernels needs the CUDA backend (this build has none)"));
#else
    if (a.device != "cuda") return fail(make_error("bench kernels times the CUDA kernels: --device cuda"));
    cuda::KernelBenchOptions o;
    o.types.clear();
    for (const std::string& t : split_commas(a.types)) {
        DType type;
        if (!parse_type_name(t, &type)) return fail(make_error("unknown type \"", t, "\""));
        o.types.push_back(type);
    }
    o.n_tokens.clear();
    for (const std::string& t : split_commas(a.tokens)) {
        const int n = std::atoi(t.c_str());
        if (n < 1 || n > 8) return fail(make_error("token count ", t, " outside 1..8"));
        o.n_tokens.push_back(n);
    }
    for (const std::string& t : split_commas(a.gemm_tokens)) {
        const int n = std::atoi(t.c_str());
        if (n < 1 || n > 4096) return fail(make_error("GEMM token count ", t, " outside 1..4096"));
        o.gemm_tokens.push_back(n);
    }
    o.gemm_types.clear();
    for (const std::string& t : split_commas(a.gemm_types)) {
        DType type;
        if (!parse_type_name(t, &type)) return fail(make_error("unknown type \"", t, "\""));
        o.gemm_types.push_back(type);
    }
    if ((o.n_tokens.empty() || o.types.empty()) && o.gemm_tokens.empty()) return fail(make_error("nothing to time"));
    if (o.types.empty()) o.n_tokens.clear();
    const std::string shapes = a.shapes.empty()
                                   ? "4096:4096,4096:11008,11008:4096,3584:4608,3584:18944,18944:3584,3584:152064"
                                   : a.shapes;
    for (const std::string& sh : split_commas(shapes)) {
        const size_t c = sh.find(':');
        if (c == std::string::npos) return fail(make_error("shape \"", sh, "\" is not IN:OUT"));
        const int64_t n_in = std::atoll(sh.substr(0, c).c_str()), n_out = std::atoll(sh.substr(c + 1).c_str());
        // IN: whole QX blocks (32 values); a type whose blocks are larger (the K-quants' 256) skips
        // the shapes it cannot hold.
        if (n_in <= 0 || n_out <= 0 || n_in % 32 != 0) return fail(make_error("shape \"", sh, "\": IN must be a positive multiple of 32"));
        o.shapes.emplace_back(n_in, n_out);
    }
    o.replays = a.replays;
    auto report = cuda::run_kernel_bench(o);
    if (!report) return fail(report.status());
    std::printf("device %s (%d SMs): copy %.0f GB/s (read + write), read-only kernel %.0f GB/s\n",
                report->device.c_str(), report->n_sms, report->copy_gbps, report->read_gbps);
    std::printf("| type | n_in x n_out | tokens | us | MB moved | GB/s | %% of copy |\n|---|---|---|---|---|---|---|\n");
    nlohmann::json cases = nlohmann::json::array();
    for (const cuda::GemvBenchCase& c : report->cases) {
        std::printf("| %s | %ldx%ld | %d | %.2f | %.1f | %.0f | %.1f |\n", type_name(c.type), static_cast<long>(c.n_in),
                    static_cast<long>(c.n_out), c.n_tokens, c.us, c.bytes / 1e6, c.gbps, c.pct_of_copy);
        cases.push_back({{"type", type_name(c.type)}, {"n_in", c.n_in}, {"n_out", c.n_out}, {"n_tokens", c.n_tokens},
                         {"us", c.us}, {"weight_bytes", c.weight_bytes}, {"bytes", c.bytes}, {"gbps", c.gbps},
                         {"pct_of_copy", c.pct_of_copy}});
    }
    nlohmann::json gemm = nlohmann::json::array();
    if (!report->gemm_cases.empty())
        std::printf("\n| type | n_in x n_out | tokens | kernel | us | TFLOP/s | weight GB/s | rel err vs cuBLAS |\n"
                    "|---|---|---|---|---|---|---|---|\n");
    for (const cuda::GemmBenchCase& c : report->gemm_cases) {
        std::printf("| %s | %ldx%ld | %d | %s | %.2f | %.1f | %.0f | %.2e |\n", type_name(c.type),
                    static_cast<long>(c.n_in), static_cast<long>(c.n_out), c.n_tokens, c.kernel.c_str(), c.us,
                    c.tflops, c.weight_gbps, c.rel_err);
        gemm.push_back({{"type", type_name(c.type)}, {"n_in", c.n_in}, {"n_out", c.n_out}, {"n_tokens", c.n_tokens},
                        {"kernel", c.kernel}, {"us", c.us}, {"tflops", c.tflops}, {"weight_gbps", c.weight_gbps},
                        {"rel_err", c.rel_err}});
    }
    if (!a.json_out.empty()) {
        std::time_t now = std::time(nullptr);
        char date[32];
        std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
        const nlohmann::json j = {{"benchmark", "kernels"}, {"kernel", "decode GEMV (gemv.cuh)"},
                                  {"commit", MVLLM_GIT_COMMIT}, {"date", date}, {"device", report->device},
                                  {"n_sms", report->n_sms}, {"copy_gbps", report->copy_gbps},
                                  {"read_gbps", report->read_gbps}, {"replays", o.replays}, {"cases", cases},
                                  {"gemm_cases", gemm}};
        std::ofstream(a.json_out) << j.dump(2) << "\n";
    }
    return 0;
#endif
}

}  // namespace

void register_kernel_commands(CLI::App& app) {
    static BenchKernelsArgs args;
    CLI::App* k = bench_group(app)->add_subcommand("kernels", "Decode GEMV kernels: time and GB/s against the measured copy bandwidth");
    k->add_option("--device", args.device, "cuda (the only device with these kernels)")->check(CLI::IsMember({"cuda", "cpu"}));
    k->add_option("--types", args.types, "weight types, comma-separated");
    k->add_option("--tokens", args.tokens, "token columns, comma-separated (1..8)");
    k->add_option("--gemm-tokens", args.gemm_tokens,
                  "token counts for the quantised tile GEMM (every variant) against cuBLAS on F16 copies, "
                  "comma-separated (default: none)");
    k->add_option("--gemm-types", args.gemm_types, "weight types of the GEMM comparison (q4_0, q8_0)");
    k->add_option("--shapes", args.shapes, "IN:OUT,... (default: 7B shapes and the 152064-row LM head)");
    k->add_option("--replays", args.replays, "timed graph replays (median)")->check(CLI::Range(1, 1000));
    k->add_option("--json-out", args.json_out, "write the result as JSON");
    k->callback([] { std::exit(cmd_bench_kernels(args)); });
}

}  // namespace mvllm::cli
