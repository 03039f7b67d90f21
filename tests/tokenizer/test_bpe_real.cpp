// The real Qwen3 and Llama 3 tokenizers against Hugging Face `tokenizers` 0.23.2
// (tests/data/tokenizer/expected_*.json, made by scripts/tokenizer_reference.py):
//   encode(text, add_bos=false, parse_special=true)  == HF encode(text, add_special_tokens=False)
//   encode(text, add_bos=false, parse_special=false) == the same with encode_special_tokens=True
//     (special added tokens split as text; non-special added tokens such as <tool_call> still match)
#include <sstream>

#include "io/gguf.h"
#include "tok_test_util.h"
#include "tokenizer/unicode.h"

namespace mvllm::test {
namespace {

std::string show(const std::vector<int32_t>& ids) {
    std::ostringstream os;
    for (size_t i = 0; i < ids.size(); ++i) os << (i ? "," : "") << ids[i];
    return os.str();
}

class RealTokenizer : public ::testing::TestWithParam<std::string> {};

void compare_with_hf(const Tokenizer& tok, const std::string& name, const char* pass, bool parse_special) {
    std::ifstream in(data_path("tokenizer/expected_" + name + ".json"));
    ASSERT_TRUE(in) << "expected_" << name << ".json missing";
    const nlohmann::json expected = nlohmann::json::parse(in);
    const auto& lines = corpus();
    ASSERT_EQ(expected["n_lines"].get<size_t>(), lines.size()) << "corpus and reference out of step: rerun the reference script";
    const auto& rows = expected[pass];
    int n_bad = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
        const auto want = rows[i].get<std::vector<int32_t>>();
        const auto got = tok.encode(lines[i], false, parse_special);
        if (got != want && ++n_bad <= 10) {
            ADD_FAILURE() << name << " " << pass << " line " << i << " " << nlohmann::json(lines[i]).dump()
                          << "\n  want " << show(want) << "\n  got  " << show(got);
        }
    }
    EXPECT_EQ(n_bad, 0) << "of " << lines.size() << " lines";
}

TEST_P(RealTokenizer, MatchesHuggingFaceWithSpecialsParsed) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    compare_with_hf(*tok, GetParam(), "special", true);
}

TEST_P(RealTokenizer, MatchesHuggingFaceWithSpecialsAsText) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    compare_with_hf(*tok, GetParam(), "plain", false);
}

TEST_P(RealTokenizer, DecodeInvertsEncode) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    for (const std::string& line : corpus()) {
        EXPECT_EQ(tok->decode(tok->encode(line, false, false)), line);
        EXPECT_EQ(tok->decode(tok->encode(line, false, true)), line);
    }
}

TEST_P(RealTokenizer, IncrementalDecoderEmitsOnlyWholeCharacters) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    for (const std::string& line : corpus()) {
        const auto ids = tok->encode(line, false, true);
        for (bool skip : {false, true}) {
            IncrementalDecoder dec(*tok, skip);
            std::string streamed;
            for (int32_t id : ids) {
                const std::string piece = dec.push(id);
                EXPECT_TRUE(utf8_is_valid(piece)) << nlohmann::json(line).dump();
                streamed += piece;
            }
            streamed += dec.flush();
            EXPECT_EQ(streamed, tok->decode(ids, skip)) << nlohmann::json(line).dump();
        }
    }
}

TEST_P(RealTokenizer, SpecialTokensParsedOnlyWhenAsked) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    const std::string text = GetParam() == "qwen3" ? "<|im_start|>" : "<|begin_of_text|>";
    const auto parsed = tok->encode(text, false, true);
    ASSERT_EQ(parsed.size(), 1u);
    EXPECT_TRUE(tok->is_special(parsed[0]));
    EXPECT_EQ(tok->token_text(parsed[0]), text);
    const auto plain = tok->encode(text, false, false);
    EXPECT_GT(plain.size(), 1u);
    for (int32_t id : plain) EXPECT_FALSE(tok->is_special(id));
    EXPECT_EQ(tok->decode(parsed, true), "");
    EXPECT_EQ(tok->decode(plain, true), text);
}

TEST_P(RealTokenizer, SpecialIdsAndTemplate) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    auto has_stop = [&](const std::string& text) {
        const auto ids = tok->encode(text, false, true);
        return ids.size() == 1 && std::find(tok->stop_ids.begin(), tok->stop_ids.end(), ids[0]) != tok->stop_ids.end();
    };
    EXPECT_FALSE(tok->chat_template.empty());
    if (GetParam() == "qwen3") {
        EXPECT_EQ(tok->bos_id, -1);
        EXPECT_EQ(tok->eos_text, "<|im_end|>");
        EXPECT_TRUE(has_stop("<|im_end|>"));
        EXPECT_TRUE(has_stop("<|endoftext|>"));
        EXPECT_EQ(tok->encode("hi", true, false), tok->encode("hi", false, false));  // no BOS to add
    } else {
        EXPECT_EQ(tok->bos_text, "<|begin_of_text|>");
        EXPECT_EQ(tok->bos_id, 128000);
        EXPECT_TRUE(has_stop("<|end_of_text|>"));
        EXPECT_TRUE(has_stop("<|eot_id|>"));
    }
}

TEST_P(RealTokenizer, GgufRoundTripEncodesIdentically) {
    MVLLM_REQUIRE_TOKENIZER(tok, GetParam());
    GgufWriter writer;
    tok->write_gguf(writer);
    const std::string path = scratch_dir() + "/mvllm_tok_" + GetParam() + "_" + std::to_string(::getpid()) + ".gguf";
    ASSERT_TRUE(writer.write(path).is_ok());
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    auto loaded = Tokenizer::from_gguf(**file);
    std::remove(path.c_str());
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    const Tokenizer& back = **loaded;
    EXPECT_EQ(back.n_vocab(), tok->n_vocab());
    EXPECT_EQ(back.bos_id, tok->bos_id);
    EXPECT_EQ(back.eos_id, tok->eos_id);
    EXPECT_EQ(back.stop_ids, tok->stop_ids);
    EXPECT_EQ(back.add_bos_default, tok->add_bos_default);
    EXPECT_EQ(back.chat_template, tok->chat_template);
    for (const std::string& line : corpus()) {
        EXPECT_EQ(back.encode(line, true, true), tok->encode(line, true, true)) << nlohmann::json(line).dump();
        EXPECT_EQ(back.encode(line, false, false), tok->encode(line, false, false)) << nlohmann::json(line).dump();
    }
}

INSTANTIATE_TEST_SUITE_P(Fetched, RealTokenizer, ::testing::Values("qwen3", "llama3"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mvllm::test
