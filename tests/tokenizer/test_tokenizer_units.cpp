// Tokenizer units that need no download: a hand-made SentencePiece vocabulary with ids derived by
// hand, loading errors, UTF-8 and byte-level helpers, a tiny byte-level BPE.
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "io/gguf.h"
#include "tok_test_util.h"
#include "tokenizer/unicode.h"

namespace mvllm::test {
namespace {

std::string write_gguf_file(const GgufWriter& writer, const std::string& tag) {
    const std::string path = scratch_dir() + "/mvllm_tok_" + tag + "_" + std::to_string(::getpid()) + ".gguf";
    EXPECT_TRUE(writer.write(path).is_ok());
    return path;
}

Result<std::unique_ptr<Tokenizer>> load_gguf(const GgufWriter& writer, const std::string& tag) {
    const std::string path = write_gguf_file(writer, tag);
    auto file = GgufFile::open(path);
    std::remove(path.c_str());
    if (!file) return file.status();
    return Tokenizer::from_gguf(**file);
}

// ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then the pieces below.
GgufWriter spm_writer() {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<float> scores = {0, 0, 0};
    std::vector<int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        tokens.push_back(name), scores.push_back(0), types.push_back(6);
    }
    const std::pair<const char*, float> pieces[] = {
        {"\u2581", -10}, {"h", -10}, {"e", -10}, {"l", -10}, {"o", -10}, {"w", -10}, {"r", -10}, {"d", -10},  // 259..266
        {"ll", -1}, {"\u2581h", -2}, {"he", -3}, {"llo", -1.5}, {"\u2581he", -2.5}, {"\u2581hello", -0.5},   // 267..272
        {"or", -4}, {"\u2581w", -4.5}, {"\u2581wor", -5},                                                     // 273..275
    };
    for (auto [text, score] : pieces) tokens.push_back(text), scores.push_back(score), types.push_back(1);
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("llama"));
    w.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
    std::vector<GgufValue> s, t;
    for (float x : scores) s.push_back(GgufValue::f32(x));
    for (int32_t x : types) t.push_back(GgufValue::i32(x));
    w.set("tokenizer.ggml.scores", GgufValue::array(GgufType::FLOAT32, s));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::INT32, t));
    w.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
    w.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
    w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
    return w;
}

using Ids = std::vector<int32_t>;

TEST(SpmTokenizer, MergesByScoreWithByteFallback) {
    auto r = load_gguf(spm_writer(), "spm");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const Tokenizer& tok = **r;
    // "▁hello▁world": ll(-1) → llo(-1.5) → ▁h(-2) → ▁he(-2.5) → ▁hello(-0.5); then or(-4) → ▁w(-4.5)
    // → ▁wor(-5); l and d stay.
    EXPECT_EQ(tok.encode("hello world", false, false), (Ids{272, 275, 262, 266}));
    EXPECT_EQ(tok.encode("hello world", true, false), (Ids{1, 272, 275, 262, 266}));
    // "i" and "é" are no pieces: bytes 0x69 → 3+0x69, 0xC3 0xA9 → 3+0xC3, 3+0xA9.
    EXPECT_EQ(tok.encode("hi \u00e9", false, false), (Ids{268, 108, 259, 198, 172}));
    // Equal scores: the leftmost pair merges first.
    EXPECT_EQ(tok.encode("lll", false, false), (Ids{259, 267, 262}));
    // Specials: parsed, then "▁" goes before the text that follows; as text, < s > are bytes.
    EXPECT_EQ(tok.encode("<s>hello", false, true), (Ids{1, 272}));
    EXPECT_EQ(tok.encode("<s>hello", false, false), (Ids{259, 63, 118, 65, 269, 270}));
    EXPECT_EQ(tok.encode("", false, false), Ids{});
    EXPECT_EQ(tok.bos_id, 1);
    EXPECT_EQ(tok.eos_id, 2);
    EXPECT_EQ(tok.stop_ids, Ids{2});
    EXPECT_TRUE(tok.is_special(1));
    EXPECT_FALSE(tok.is_special(272));
    EXPECT_EQ(tok.token_bytes(198), "\xC3");
    EXPECT_EQ(tok.token_bytes(272), " hello");
}

TEST(SpmTokenizer, DecodeAndStream) {
    auto r = load_gguf(spm_writer(), "spm2");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const Tokenizer& tok = **r;
    for (const std::string text : {"hello world", "hi \u00e9", "  two  spaces ", "\u4f60\u597d \U0001F600", "<s>x"}) {
        const Ids ids = tok.encode(text, true, false);
        EXPECT_EQ(tok.decode(ids, true), text);
        IncrementalDecoder dec(tok);
        std::string streamed;
        for (int32_t id : ids) {
            std::string piece = dec.push(id);
            EXPECT_TRUE(utf8_is_valid(piece));
            streamed += piece;
        }
        EXPECT_EQ(streamed + dec.flush(), text);
    }
    EXPECT_EQ(tok.decode({1, 272}, false), "<s> hello");
}

TEST(SpmTokenizer, GgufRoundTrip) {
    auto a = load_gguf(spm_writer(), "spm3");
    ASSERT_TRUE(a.is_ok());
    GgufWriter w;
    (*a)->write_gguf(w);
    auto b = load_gguf(w, "spm4");
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    for (const std::string& line : corpus()) {
        EXPECT_EQ((*b)->encode(line, true, true), (*a)->encode(line, true, true));
        EXPECT_EQ((*a)->decode((*a)->encode(line, false, false)), line);
    }
}

// ---- byte-level BPE without a download --------------------------------------------------------

TEST(BpeTokenizer, TinyVocabularyMergesByRank) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
    for (const char* t : {"ab", "bc", "abc", "\u0120a", "<|end|>"}) tokens.push_back(t);  // 256..260
    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.pre", GgufValue::str("gpt2"));
    w.set("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
    std::vector<GgufValue> types(256 + 4, GgufValue::i32(1));
    types.push_back(GgufValue::i32(3));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::INT32, types));
    w.set("tokenizer.ggml.merges", GgufValue::string_array({"b c", "a b", "ab c", "\u0120 a"}));
    w.set("tokenizer.ggml.eos_token_id", GgufValue::u32(260));
    auto r = load_gguf(w, "bpe");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const Tokenizer& tok = **r;
    // "abc": b c (rank 0) first, then a + bc has no merge → a, bc. " ab": Ġa (rank 3) vs ab (rank 1)
    // → ab first: Ġ, ab.
    EXPECT_EQ(tok.encode("abc", false, false), (Ids{'a', 257}));
    EXPECT_EQ(tok.encode(" ab", false, false), (Ids{' ', 256}));
    EXPECT_EQ(tok.encode("<|end|>", false, true), Ids{260});
    EXPECT_EQ(tok.decode(tok.encode("x<|end|> \xff", false, false)), "x<|end|> \xff");  // invalid UTF-8 too
    EXPECT_EQ(tok.stop_ids, Ids{260});
}

// ---- loading errors ---------------------------------------------------------------------------

struct TempDir {
    std::string path;
    explicit TempDir(const std::string& tag) {
        path = scratch_dir() + "/mvllm_tokdir_" + tag + "_" + std::to_string(::getpid());
        std::filesystem::create_directories(path);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
    void write(const std::string& name, const std::string& text) const { std::ofstream(path + "/" + name) << text; }
};

void expect_error(const Result<std::unique_ptr<Tokenizer>>& r, const std::string& fragment) {
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(TokenizerLoad, MissingTokenizerJson) {
    TempDir dir("missing");
    expect_error(Tokenizer::from_hf_dir(dir.path), "tokenizer.json: cannot open");
    expect_error(Tokenizer::from_path(dir.path + "/nowhere"), "no such file");
}

TEST(TokenizerLoad, MalformedJson) {
    TempDir dir("malformed");
    dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
    expect_error(Tokenizer::from_hf_dir(dir.path), "malformed JSON");
    dir.write("tokenizer.json", "{\"model\": 1e999}");  // nlohmann throws out_of_range, not parse_error (found by fuzzing)
    expect_error(Tokenizer::from_hf_dir(dir.path), "malformed JSON");
}

TEST(TokenizerLoad, UnknownModelTypes) {
    TempDir dir("unigram");
    dir.write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
    expect_error(Tokenizer::from_hf_dir(dir.path), "unsupported tokenizer model type 'Unigram'");
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [1]}})");
    expect_error(Tokenizer::from_hf_dir(dir.path), "neither");
    // Ids that are not JSON integers (a huge float once reached an undefined float-to-int cast).
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1.1e118}, "merges": []}})");
    expect_error(Tokenizer::from_hf_dir(dir.path), "the id of 'b' is not an integer");
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                    "added_tokens": [{"id": "7", "content": "<x>"}]})");
    expect_error(Tokenizer::from_hf_dir(dir.path), "added token's id");
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "added_tokens": [{"content": "<x>"}]})");
    expect_error(Tokenizer::from_hf_dir(dir.path), "added token's id");
    // An id range mostly of holes (a fuzzed file once asked for 2 GB this way) is refused; a few
    // holes, as padded vocabularies have, still load, each named [PADn].
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                                    "added_tokens": [{"id": 3000000, "content": "<x>"}]})");
    expect_error(Tokenizer::from_hf_dir(dir.path), "vocabulary ids out of range (highest 3000000 for 3 tokens");
    dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
                                    "pre_tokenizer": {"type": "ByteLevel"},
                                    "added_tokens": [{"id": 900, "content": "<x>", "special": true}]})");
    auto holes = Tokenizer::from_hf_dir(dir.path);
    ASSERT_TRUE(holes.is_ok()) << holes.status().message();
    EXPECT_EQ(holes.value()->n_vocab(), 901);
    EXPECT_EQ(holes.value()->token_text(5), "[PAD5]");
    EXPECT_TRUE(holes.value()->is_special(900));

    GgufWriter w;
    w.set("tokenizer.ggml.model", GgufValue::str("bert"));
    w.set("tokenizer.ggml.tokens", GgufValue::string_array({"a"}));
    expect_error(load_gguf(w, "bert"), "unsupported tokenizer.ggml.model 'bert'");
    w.set("tokenizer.ggml.model", GgufValue::str("none"));
    expect_error(load_gguf(w, "none"), "carries no vocabulary");
    GgufWriter empty;
    empty.set("general.architecture", GgufValue::str("llama"));
    expect_error(load_gguf(empty, "empty"), "tokenizer.ggml.model is missing");
    GgufWriter bad_pre = w;
    bad_pre.set("tokenizer.ggml.model", GgufValue::str("gpt2"));
    bad_pre.set("tokenizer.ggml.pre", GgufValue::str("klingon"));
    expect_error(load_gguf(bad_pre, "pre"), "unsupported tokenizer.ggml.pre 'klingon'");
    GgufWriter bad_id = spm_writer();
    bad_id.set("tokenizer.ggml.bos_token_id", GgufValue::u32(100000));
    expect_error(load_gguf(bad_id, "badid"), "outside the vocabulary");
}

// ---- UTF-8 and byte-level helpers -------------------------------------------------------------

TEST(Unicode, CompletePrefixHoldsBackOnlyUnfinishedCharacters) {
    EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
    EXPECT_EQ(utf8_complete_prefix("a\xE4"), 1u);          // 你 started
    EXPECT_EQ(utf8_complete_prefix("a\xE4\xBD"), 1u);
    EXPECT_EQ(utf8_complete_prefix("a\xE4\xBD\xA0"), 4u);
    EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);   // 😀 started
    EXPECT_EQ(utf8_complete_prefix("a\xFF"), 2u);          // never valid: not held
    EXPECT_EQ(utf8_complete_prefix("a\xED\xA0"), 3u);      // a surrogate: never valid
    EXPECT_EQ(utf8_sanitize("a\xFF" "b"), "a\uFFFDb");
}

TEST(Unicode, ByteLevelAlphabetIsABijection) {
    for (int b = 0; b < 256; ++b) {
        const std::string& c = byte_to_unicode(static_cast<uint8_t>(b));
        size_t pos = 0;
        uint32_t cp = 0;
        ASSERT_TRUE(utf8_next(c, pos, cp));
        EXPECT_EQ(unicode_to_byte(cp), b);
    }
    EXPECT_EQ(bytes_to_byte_level(" hi\n"), "\u0120hi\u010a");
    EXPECT_EQ(byte_level_to_bytes("\u0120hi\u010a"), " hi\n");
}

}  // namespace
}  // namespace mvllm::test
