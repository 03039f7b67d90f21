#include "engine/perplexity.h"

#include <cmath>
#include <string>

namespace mvllm {

PerplexityResult summarise_nll(const std::vector<double>& nll, int64_t n_windows) {
    PerplexityResult r;
    r.n_windows = n_windows;
    r.n_scored = static_cast<int64_t>(nll.size());
    if (nll.empty()) return r;
    double sum = 0, sum_sq = 0;
    for (const double x : nll) sum += x, sum_sq += x * x;
    const double n = static_cast<double>(nll.size());
    r.mean_nll = sum / n;
    r.ppl = std::exp(r.mean_nll);
    const double variance = n > 1 ? std::max(0.0, (sum_sq / n - r.mean_nll * r.mean_nll) * n / (n - 1)) : 0.0;
    r.ppl_error = r.ppl * std::sqrt(variance / n);
    return r;
}

Result<PerplexityResult> perplexity(Engine& engine, const std::vector<int32_t>& tokens, const PerplexityOptions& o,
                                    const std::function<void(int64_t, int64_t)>& progress) {
    if (o.ctx < 4) return make_error("a perplexity window needs at least 4 tokens, got ", o.ctx);
    int64_t n_windows = static_cast<int64_t>(tokens.size()) / o.ctx;
    if (o.max_windows > 0) n_windows = std::min(n_windows, o.max_windows);
    if (n_windows == 0)
        return make_error("perplexity needs at least one window of ", o.ctx, " tokens, the text has ", tokens.size());
    // Window w's prompt logprobs: entry k is token k + 1's, given tokens 0..k.
    std::vector<std::vector<TokenLogprob>> scores(static_cast<size_t>(n_windows));
    std::vector<std::string> errors(static_cast<size_t>(n_windows));
    int64_t n_done = 0;
    for (int64_t w = 0; w < n_windows; ++w) {
        Request r;
        r.prompt_ids.assign(tokens.begin() + w * o.ctx, tokens.begin() + (w + 1) * o.ctx);
        if (o.bos >= 0) r.prompt_ids[0] = o.bos;
        r.sampling.temperature = 0;
        r.sampling.max_tokens = 1;
        r.sampling.ignore_eos = true;
        r.sampling.prompt_logprobs = 0;
        MVLLM_TRY(engine.submit(std::move(r), [&, w](const EngineEvent& e) {
            std::vector<TokenLogprob>& s = scores[static_cast<size_t>(w)];
            if (e.kind == EngineEvent::Kind::Token) {
                s.insert(s.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
                return;
            }
            if (e.reason == FinishReason::Error) errors[static_cast<size_t>(w)] = e.error;
            ++n_done;
            if (progress) progress(n_done, n_windows);
        }).status());
    }
    Status status;
    while (n_done < n_windows && engine.step(&status)) {
    }
    MVLLM_TRY(status);
    if (n_done < n_windows) return make_error("the engine stopped before the windows were scored");
    std::vector<double> nll;
    for (int64_t w = 0; w < n_windows; ++w) {
        if (!errors[static_cast<size_t>(w)].empty()) return make_error("window ", w, ": ", errors[static_cast<size_t>(w)]);
        const std::vector<TokenLogprob>& s = scores[static_cast<size_t>(w)];
        if (static_cast<int64_t>(s.size()) != o.ctx - 1)
            return make_error("window ", w, " returned ", s.size(), " prompt logprobs, not ", o.ctx - 1);
        for (int64_t k = o.ctx / 2; k < o.ctx - 1; ++k) nll.push_back(-static_cast<double>(s[static_cast<size_t>(k)].logprob));
    }
    return summarise_nll(nll, n_windows);
}

}  // namespace mvllm
