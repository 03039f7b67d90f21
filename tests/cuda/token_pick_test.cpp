// How the CUDA backend picks tokens from logit rows, against the host (core/race.h, core/draw.h):
// the greedy argmax, the sampled draws (temperature, top_k, top_p, min_p) and the penalties
// applied before them. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "core/draw.h"
#include "core/race.h"
#include "model/generate.h"
#include "cuda_test_util.h"

namespace mvllm::test {
namespace {

// Vocabulary-sized rows span many of the argmax kernel's chunks, the last one partly filled: the
// first index of the maximum wins across chunks (a tie), an all-negative row, the maximum in the
// last partial chunk or at index 0; and the chosen token's log-probability over the whole row.
TEST(CudaOps, ArgmaxOfVocabularyRowsTakesTheFirstMaximum) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    for (const int64_t width : {int64_t{4097}, int64_t{151936}, int64_t{152064}}) {
        const int64_t n_rows = 5;
        std::vector<float> x = random_floats(width * n_rows, 31);
        const int64_t tie = width / 3;  // row 1: a tie (across chunks at the vocabulary widths), the earlier wins
        float* r1 = x.data() + width;
        r1[tie] = 7.5f;
        r1[width - 2] = 7.5f;
        float* r2 = x.data() + 2 * width;  // all negative, the maximum in the last partial chunk
        for (int64_t i = 0; i < width; ++i) r2[i] = -std::fabs(r2[i]) - 1.0f;
        r2[width - 1] = -0.5f;
        float* r3 = x.data() + 3 * width;  // the maximum at index 0, a tie at the very end
        r3[0] = 9.0f;
        r3[width - 1] = 9.0f;
        float* r4 = x.data() + 4 * width;  // NaN never wins (the host's argmax skips it)
        r4[0] = r4[width / 2] = std::numeric_limits<float>::quiet_NaN();
        TensorView t = begin_with_input(*be, x, width, n_rows);
        std::vector<int32_t> got(n_rows);
        std::vector<float> lp(n_rows);
        be->argmax_rows(t, got.data(), lp.data());
        EXPECT_EQ(got[4], row_argmax(r4, width)) << "width " << width;
        for (int64_t r = 0; r < n_rows - 1; ++r) {
            const float* row = x.data() + r * width;
            EXPECT_EQ(got[r], argmax(row, width)) << "width " << width << " row " << r;
            double sum = 0;  // the chosen token's log-softmax in double
            for (int64_t i = 0; i < width; ++i) sum += std::exp(double(row[i]) - row[got[r]]);
            EXPECT_NEAR(lp[r], -std::log(sum), 1e-5 * std::max(1.0, std::log(sum))) << "logprob row " << r;
        }
        EXPECT_EQ(got[1], tie) << "width " << width;
        EXPECT_EQ(got[2], width - 1) << "width " << width;
        EXPECT_EQ(got[3], 0) << "width " << width;
    }
}

// The device's draw (cuda::launch_draw) is race_row's (core/race.h, the host sampler's draw): on
// vocabulary-wide rows, for 40 keys each, at three temperatures with and without min_p, beside
// greedy rows in the same launch, and on a row with -inf and NaN entries; with the score inlined
// in the kernel's loop and out of line (CudaBackendOptions::draw_score_outlined).
TEST(CudaOps, DrawEqualsTheHostRace) {
    MVLLM_REQUIRE_GPU();
    for (const bool outlined : {false, true}) {  // the race's score inlined, and out of line
        SCOPED_TRACE(outlined ? "outlined score" : "inlined score");
        CudaBackendOptions o;
        o.draw_score_outlined = outlined;
        auto be = make_cuda(o);
        ASSERT_TRUE(be);
        for (const int64_t width : {int64_t{97}, int64_t{4097}, int64_t{151936}}) {
            const int64_t n_rows = 6;
            std::vector<float> x = random_floats(width * n_rows, 41);
            for (float& v : x) v *= 6.0f;  // logits spread like a model's
            float* r4 = x.data() + 4 * width;  // -inf entries (masked tokens) and a NaN
            for (int64_t i = 0; i < width; i += 3) r4[i] = -std::numeric_limits<float>::infinity();
            r4[width / 2] = std::numeric_limits<float>::quiet_NaN();
            const float temperatures[] = {0.4f, 1.0f, 2.0f};
            int differ = 0, drawn_not_argmax = 0, n = 0;
            for (uint64_t key = 1; key <= 40; ++key) {
                std::vector<TokenDraw> draws(n_rows);
                for (int64_t r = 0; r < n_rows; ++r) {
                    if (r == 2) continue;  // a greedy row among drawn ones
                    draws[r] = {temperatures[(r + key) % 3], r % 2 ? 0.02f : 0.0f, mix64(key * 131 + r)};
                }
                TensorView t = begin_with_input(*be, x, width, n_rows);
                std::vector<int32_t> got(n_rows);
                be->argmax_rows(t, got.data(), nullptr, TokenPicks{draws, {}});
                for (int64_t r = 0; r < n_rows; ++r) {
                    const float* row = x.data() + r * width;
                    const int32_t want = draws[r].temperature > 0
                                             ? race_row(row, width, draws[r].temperature, draws[r].min_p, draws[r].key)
                                             : row_argmax(row, width);
                    differ += got[r] != want;
                    drawn_not_argmax += draws[r].temperature > 0 && got[r] != row_argmax(row, width);
                    ++n;
                }
            }
            // Log space against the host's ratio: the same winner but for a rounding tie (~1e-15).
            EXPECT_EQ(differ, 0) << "of " << n << " draws, width " << width;
            EXPECT_GT(drawn_not_argmax, n / 4) << "width " << width;  // the draws really are random
        }
    }
}

// top_k and top_p on the device (draw_cut.cu, then the draw) give draw_row's token (core/draw.h,
// the host sampler's): every combination of top_k, top_p and min_p on vocabulary-wide rows, for
// 40 keys each, beside greedy and untruncated rows; rows whose cut falls among equal logits (logits
// on a grid of 0.5, a flat row), a row with -inf and NaN entries, and a top_k above the width. Both
// ways of finding the cut: the whole row in one CTA, and the binned first step (whose flat row has
// too many candidates and falls back to the whole row).
TEST(CudaOps, TruncatedDrawEqualsTheHost) {
    MVLLM_REQUIRE_GPU();
    for (const bool binned : {false, true}) {  // the whole-row selection, and the binned first step
        SCOPED_TRACE(binned ? "binned" : "whole row");
        CudaBackendOptions o;
        o.binned_cut = binned;
        auto be = make_cuda(o);
        ASSERT_TRUE(be);
        for (const int64_t width : {int64_t{97}, int64_t{4097}, int64_t{151936}}) {
            const int64_t n_rows = 9;
            std::vector<float> x = random_floats(width * n_rows, 43);
            for (float& v : x) v *= 6.0f;
            float* ties = x.data() + 5 * width;  // the cut falls among equal logits
            for (int64_t i = 0; i < width; ++i) ties[i] = std::round(ties[i]) * 0.5f;
            float* flat = x.data() + 6 * width;
            std::fill(flat, flat + width, 1.25f);
            float* masked = x.data() + 7 * width;
            for (int64_t i = 0; i < width; i += 3) masked[i] = -std::numeric_limits<float>::infinity();
            masked[width / 2] = std::numeric_limits<float>::quiet_NaN();
            int differ = 0, drawn_not_argmax = 0, n = 0;
            for (uint64_t key = 1; key <= 40; ++key) {
                const float t = key % 3 == 0 ? 0.5f : key % 3 == 1 ? 1.0f : 1.7f;
                const int32_t k = static_cast<int32_t>(1 + key % 50);
                const float p = key % 2 ? 0.9f : 0.55f;
                std::vector<TokenDraw> draws = {
                    {t, 0.0f, mix64(key * 17 + 0), k, 1.0f},               // top_k
                    {t, 0.0f, mix64(key * 17 + 1), 0, p},                  // top_p
                    {t, 0.01f, mix64(key * 17 + 2), k + 30, p},            // all three
                    {},                                                    // greedy
                    {t, 0.0f, mix64(key * 17 + 4), static_cast<int32_t>(width + 5), 1.0f},  // no cut
                    {t, 0.0f, mix64(key * 17 + 5), k, key % 4 ? p : 1.0f},  // ties at the cut
                    {t, 0.0f, mix64(key * 17 + 6), key % 2 ? k : 0, p},    // a flat row
                    {t, key % 2 ? 0.05f : 0.0f, mix64(key * 17 + 7), k, p},  // -inf and NaN
                    {t, 0.0f, mix64(key * 17 + 8), 0, 0.999f},             // a long head
                };
                TensorView tv = begin_with_input(*be, x, width, n_rows);
                std::vector<int32_t> got(n_rows);
                be->argmax_rows(tv, got.data(), nullptr, TokenPicks{draws, {}});
                for (int64_t r = 0; r < n_rows; ++r) {
                    const float* row = x.data() + r * width;
                    const int32_t want = draw_row(row, width, draws[r]);
                    EXPECT_EQ(got[r], want) << "width " << width << " row " << r << " key " << key;
                    differ += got[r] != want;
                    drawn_not_argmax += draws[r].temperature > 0 && r != 6 && got[r] != row_argmax(row, width);
                    ++n;
                }
            }
            EXPECT_EQ(differ, 0) << "of " << n << " draws, width " << width;
            // The draws really are random (at width 97, with top_k down to 1 at T 0.5, ~13 % of the
            // draws leave the argmax; the H200 measured 37 of 360).
            EXPECT_GT(drawn_not_argmax, n / 20) << "width " << width;
            // The binned step narrowed every truncating row (7 of the 9) but the flat one at full
            // width, whose 151,936 values share one bin and are read whole.
            const auto [narrowed, whole] = be->binned_cut_rows();
            const uint64_t flat_whole = binned && width > 16384 ? 40 : 0;
            EXPECT_EQ(narrowed, binned ? 7 * 40 - flat_whole : 0u) << "width " << width;
            EXPECT_EQ(whole, flat_whole) << "width " << width;
        }
    }
}

// Penalties on the device (cuda::launch_penalties, in place on the logits) give the host's
// penalised rows: greedy rows with their logprobs, then drawn rows (temperature, top_k, top_p) in
// the same launch as greedy ones, each against the host's token (core/draw.h's penalise_rows, then
// the argmax or draw_row). Penalties of every kind (repetition on positive and negative logits,
// subtraction alone, both, after a logit bias), on rows' maxima so that they change the argmax,
// and a row without any.
TEST(CudaOps, PenalisedPicksEqualTheHost) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    for (const int64_t width : {int64_t{97}, int64_t{151936}}) {
        const int64_t n_rows = 4;
        std::mt19937 gen(static_cast<uint32_t>(width));
        int changed = 0, n = 0;
        for (int round = 0; round < 12; ++round) {
            std::vector<float> x = random_floats(width * n_rows, 50 + round);
            for (float& v : x) v *= 4.0f;
            TokenPicks picks;
            for (int32_t r = 0; r < n_rows; ++r) {
                if (r == 3) continue;  // a row without penalties
                std::vector<int32_t> tokens = {row_argmax(x.data() + r * width, width)};  // the top token too
                for (int i = 0; i < 40; ++i) tokens.push_back(static_cast<int32_t>(gen() % width));
                std::sort(tokens.begin(), tokens.end());
                tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
                for (const int32_t t : tokens) {
                    const int kind = static_cast<int>(gen() % 4);  // repetition, subtraction, both, a bias and both
                    const float bias = kind == 3 ? (gen() % 2 ? -100.0f : 2.5f) : 0.0f;
                    picks.penalties.push_back({r, t, bias, kind == 1 ? 1.0f : 1.7f, kind == 0 ? 0.0f : 0.4f + 0.3f * (gen() % 5)});
                }
            }
            std::vector<float> want_x = x;
            penalise_rows(want_x.data(), width, picks.penalties);
            const bool drawn = round % 2 == 1;
            if (drawn) {
                const float t = round % 4 == 1 ? 0.7f : 1.3f;
                picks.draws = {{t, 0.0f, mix64(round * 7 + 1), 0, 1.0f},
                               {t, 0.02f, mix64(round * 7 + 2), 20, 0.9f},
                               {},
                               {t, 0.0f, mix64(round * 7 + 4), 0, 0.8f}};
            }
            TensorView tv = begin_with_input(*be, x, width, n_rows);
            std::vector<int32_t> got(n_rows);
            std::vector<float> lp(n_rows);
            be->argmax_rows(tv, got.data(), drawn ? nullptr : lp.data(), picks);
            for (int64_t r = 0; r < n_rows; ++r) {
                const float* row = want_x.data() + r * width;
                const bool row_drawn = drawn && picks.draws[r].temperature > 0;
                const int32_t want = row_drawn ? draw_row(row, width, picks.draws[r]) : row_argmax(row, width);
                EXPECT_EQ(got[r], want) << "width " << width << " round " << round << " row " << r;
                changed += r != 3 && want != (row_drawn ? draw_row(x.data() + r * width, width, picks.draws[r])
                                                        : row_argmax(x.data() + r * width, width));
                ++n;
                if (drawn) continue;
                double sum = 0;  // the chosen token's log-softmax in double, over the penalised row
                for (int64_t i = 0; i < width; ++i) sum += std::exp(double(row[i]) - row[got[r]]);
                EXPECT_NEAR(lp[r], -std::log(sum), 1e-5 * std::max(1.0, std::log(sum))) << "logprob row " << r;
            }
        }
        EXPECT_GT(changed, n / 4) << "width " << width;  // the penalties moved the picks
    }
}

// Targets (a prompt position's next token) scored on the device (cuda::launch_target_logprob) equal
// the host's log-softmax of each row's target in double, beside the argmax and its logprob; rows
// without a target (-1) get 0; penalties are applied first, and the copied rows come back with them.
TEST(CudaOps, TargetLogprobsEqualTheHost) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    for (const int64_t width : {int64_t{97}, int64_t{151936}}) {
        const int64_t n_rows = 5;
        std::vector<float> x = random_floats(width * n_rows, 61);
        for (float& v : x) v *= 5.0f;
        TokenPicks picks;
        picks.targets = {3, -1, static_cast<int32_t>(width - 1), 0, static_cast<int32_t>(width / 2)};
        picks.penalties = {{4, static_cast<int32_t>(width / 2), 1.5f, 1.3f, 0.0f}};  // row 4's target, biased
        picks.copies = {1, 2, 4};  // rows scored on the host come back, penalised (a run of two, one alone)
        std::vector<float> host = x;
        penalise_rows(host.data(), width, picks.penalties);
        TensorView t = begin_with_input(*be, x, width, n_rows);
        std::vector<int32_t> got(n_rows);
        std::vector<float> lp(n_rows), target(n_rows, 7.0f), copied(3 * width);
        be->argmax_rows(t, got.data(), lp.data(), picks, target.data(), copied.data());
        EXPECT_TRUE(std::equal(copied.begin(), copied.begin() + 2 * width, host.begin() + width));
        EXPECT_TRUE(std::equal(copied.begin() + 2 * width, copied.end(), host.begin() + 4 * width));
        for (int64_t r = 0; r < n_rows; ++r) {
            const float* row = host.data() + r * width;
            EXPECT_EQ(got[r], row_argmax(row, width)) << "width " << width << " row " << r;
            double sum = 0;
            for (int64_t i = 0; i < width; ++i) sum += std::exp(double(row[i]) - row[got[r]]);
            const double log_z = row[got[r]] + std::log(sum);
            EXPECT_NEAR(lp[r], row[got[r]] - log_z, 1e-5 * std::max(1.0, std::fabs(log_z))) << "row " << r;
            const int32_t tt = picks.targets[static_cast<size_t>(r)];
            if (tt < 0) {
                EXPECT_EQ(target[r], 0.0f) << "row " << r << " has no target";
                continue;
            }
            EXPECT_NEAR(target[r], row[tt] - log_z, 1e-5 * std::max(1.0, std::fabs(log_z))) << "row " << r;
        }
    }
}

// Rows scored on the device (TokenPicks::scores, cuda::launch_row_scores) equal the host's
// score_row of the penalised row: the same token and logit, the same alternatives in (logit
// descending, id ascending) order with their logits, bit for bit, and log_z to float rounding. The
// rows hold runs of tied values (so the order among equal logits is checked), one row is drawn (its
// score is of the drawn token), one asks for more alternatives than a 97-wide row of ties would
// break, and widths that are and are not a multiple of 4 take both load paths. In row 0 the 8 best
// values all fall to one thread (floats 0-3 and 2048-2051: its first and second float4), more
// than its short list keeps, so the selection must be redone (row_scores_exact_kernel).
TEST(CudaOps, RowScoresEqualTheHost) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    // Five asks: a row of 20,003 or 151,936 logits is read in parts by several CTAs and merged (odd
    // widths by scalar loads); 97 and 4,099 by one CTA.
    for (const int64_t width : {int64_t{97}, int64_t{4099}, int64_t{20003}, int64_t{151936}}) {
        SCOPED_TRACE("width " + std::to_string(width));
        const int64_t n_rows = 6;
        std::vector<float> x = random_floats(width * n_rows, 71);
        for (int64_t i = 0; i < width * n_rows; ++i) {
            x[i] *= 4.0f;
            if (i % 7 == 3) x[i] = std::round(x[i]);  // ties, several of them near each row's top
        }
        x[2 * width + 5] = x[2 * width + 9] = 40.0f;  // a tie at the very top of row 2
        if (width > 2052)
            for (int j = 0; j < 4; ++j) x[j] = 50.0f + static_cast<float>(j), x[2048 + j] = 54.0f + static_cast<float>(j);
        TokenPicks picks;
        picks.penalties = {{1, 3, 2.0f, 1.2f, 0.0f}, {4, static_cast<int32_t>(width - 2), 9.0f, 1.0f, 0.0f}};
        picks.draws.assign(n_rows, TokenDraw{});
        picks.draws[3] = {0.8f, 0.0f, mix64(width), 0, 1.0f};
        picks.scores = {{0, -1, 8},
                        {1, 3, 20},
                        {2, -1, 3},
                        {3, -1, 2},
                        {5, static_cast<int32_t>(width - 1), 0}};
        std::vector<float> host = x;
        penalise_rows(host.data(), width, picks.penalties);
        TensorView t = begin_with_input(*be, x, width, n_rows);
        std::vector<int32_t> got(n_rows);
        std::vector<RowScore> scores(picks.scores.size());
        be->argmax_rows(t, got.data(), nullptr, picks, nullptr, nullptr, scores.data());
        EXPECT_EQ(got[3], draw_row(host.data() + 3 * width, width, picks.draws[3]));
        for (size_t i = 0; i < picks.scores.size(); ++i) {
            const ScoreAsk& a = picks.scores[i];
            const float* row = host.data() + a.row * width;
            const int32_t token = a.token >= 0 ? a.token : got[a.row];
            if (a.row != 3) {
                EXPECT_EQ(got[a.row], row_argmax(row, width)) << "row " << a.row;
            }
            const RowScore want = score_row(row, width, token, a.n_top);
            const RowScore& g = scores[i];
            EXPECT_EQ(g.token, want.token) << "row " << a.row;
            EXPECT_EQ(g.logit, want.logit) << "row " << a.row;
            EXPECT_NEAR(g.log_z, want.log_z, 2e-6 * std::max(1.0, std::fabs(want.log_z))) << "row " << a.row;
            ASSERT_EQ(g.top.size(), want.top.size()) << "row " << a.row;
            for (size_t j = 0; j < want.top.size(); ++j) {
                EXPECT_EQ(g.top[j].first, want.top[j].first) << "row " << a.row << " place " << j;
                EXPECT_EQ(g.top[j].second, want.top[j].second) << "row " << a.row << " place " << j;
            }
        }
        EXPECT_EQ(scores[2].top[0].first, 5);  // the tie at the top: the lower id first
        EXPECT_EQ(scores[2].top[1].first, 9);
        if (width > 2052) {
            EXPECT_EQ(scores[0].top[7].first, 0);  // the 8th best, from the redone selection
        }
    }
}

// Many asks (more than the H100's or H200's 132 SMs): one CTA per row, each row's selection and
// log-sum-exp equal the host's.
TEST(CudaOps, ManyRowScoresEqualTheHost) {
    MVLLM_REQUIRE_GPU();
    auto be = make_cuda();
    ASSERT_TRUE(be);
    const int64_t width = 32768, n_rows = 160;
    std::vector<float> x = random_floats(width * n_rows, 72);
    for (int64_t i = 0; i < width * n_rows; ++i) x[i] = i % 5 == 1 ? std::round(x[i] * 3.0f) : x[i] * 3.0f;
    TokenPicks picks;
    for (int32_t r = 0; r < n_rows; ++r) picks.scores.push_back({r, r % 3 == 0 ? -1 : r * 7, r % 21});
    TensorView t = begin_with_input(*be, x, width, n_rows);
    std::vector<int32_t> got(n_rows);
    std::vector<RowScore> scores(picks.scores.size());
    be->argmax_rows(t, got.data(), nullptr, picks, nullptr, nullptr, scores.data());
    for (int32_t r = 0; r < n_rows; ++r) {
        const float* row = x.data() + r * width;
        EXPECT_EQ(got[r], row_argmax(row, width)) << "row " << r;
        const RowScore want = score_row(row, width, r % 3 == 0 ? got[r] : r * 7, r % 21);
        const RowScore& g = scores[r];
        EXPECT_EQ(g.token, want.token) << "row " << r;
        EXPECT_EQ(g.logit, want.logit) << "row " << r;
        EXPECT_NEAR(g.log_z, want.log_z, 2e-6 * std::max(1.0, std::fabs(want.log_z))) << "row " << r;
        ASSERT_EQ(g.top.size(), want.top.size()) << "row " << r;
        for (size_t j = 0; j < want.top.size(); ++j) EXPECT_EQ(g.top[j], want.top[j]) << "row " << r << " place " << j;
    }
}

}  // namespace
}  // namespace mvllm::test
