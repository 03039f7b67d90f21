// Chat templates against Hugging Face: every (template, conversation, add_generation_prompt) of
// tests/data/chat/expected.json (written by scripts/chat_template_reference.py with transformers'
// render_jinja_template) must render byte-identical, or fail where the reference raised.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "tokenizer/chat_template.h"

namespace mvllm {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

TEST(ChatTemplate, MatchesHuggingFace) {
    const std::string dir = std::string(MVLLM_TEST_DATA_DIR) + "/chat";
    auto doc = nlohmann::ordered_json::parse(read_file(dir + "/expected.json"));
    std::map<std::string, nlohmann::ordered_json> conversations;
    for (const auto& c : doc["conversations"]) conversations[c["name"].get<std::string>()] = c;
    std::map<std::string, std::pair<int, int>> per_template;  // template -> (passed, total)
    int n_cases = 0;
    for (const auto& c : doc["cases"]) {
        std::string tmpl_name = c["template"];
        const auto& conv = conversations.at(c["conversation"].get<std::string>());
        ChatTemplateOptions options;
        options.add_generation_prompt = c["add_generation_prompt"];
        options.bos_token = doc["bos_token"];
        options.eos_token = doc["eos_token"];
        options.now_unix = doc["now_unix"];
        if (conv.contains("tools")) options.tools = conv["tools"];
        if (conv.contains("extra")) options.extra = conv["extra"];
        auto out = apply_chat_template(read_file(dir + "/templates/" + tmpl_name), conv["messages"], options);
        std::string label = tmpl_name + " / " + c["conversation"].get<std::string>() +
                            (options.add_generation_prompt ? " / gen" : "");
        bool ok;
        if (c.contains("error")) {
            ok = !out.is_ok();
            EXPECT_FALSE(out.is_ok()) << label << ": reference raised " << c["error"] << ", we rendered:\n"
                                      << (out.is_ok() ? out.value() : "");
        } else {
            ok = out.is_ok() && out.value() == c["output"].get<std::string>();
            EXPECT_TRUE(out.is_ok()) << label << ": " << out.status().message();
            if (out.is_ok()) EXPECT_EQ(out.value(), c["output"].get<std::string>()) << label;
        }
        auto& [passed, total] = per_template[tmpl_name];
        passed += ok;
        ++total;
        ++n_cases;
    }
    EXPECT_EQ(n_cases, 320);
    for (const auto& [name, counts] : per_template)
        std::printf("  %-45s %d/%d\n", name.c_str(), counts.first, counts.second);
}

TEST(ChatTemplate, RaiseExceptionMessageIsKept) {
    const std::string dir = std::string(MVLLM_TEST_DATA_DIR) + "/chat";
    nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
        R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
    auto out = apply_chat_template(read_file(dir + "/templates/google-gemma-2-2b-it.jinja"), messages);
    ASSERT_FALSE(out.is_ok());
    EXPECT_NE(out.status().message().find("Conversation roles must alternate"), std::string::npos)
        << out.status().message();
}

TEST(ChatTemplate, FallbackChatML) {
    std::vector<ChatMessage> messages = {{"system", "Be brief.", nullptr, ""}, {"user", "Hi", nullptr, ""}};
    ChatTemplateOptions options;
    options.add_generation_prompt = true;
    auto out = apply_chat_template(fallback_chat_template(), messages, options);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(out.value(),
              "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    auto parts = nlohmann::json::parse(
        R"([{"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "image"}, {"type": "text", "text": "B"}]}])");
    out = apply_chat_template(fallback_chat_template(), parts);
    ASSERT_TRUE(out.is_ok()) << out.status().message();
    EXPECT_EQ(out.value(), "<|im_start|>user\nAB<|im_end|>\n");
}

TEST(ChatTemplate, BadInputsAreErrors) {
    EXPECT_FALSE(apply_chat_template(fallback_chat_template(), nlohmann::ordered_json::object()).is_ok());
    EXPECT_FALSE(apply_chat_template(fallback_chat_template(), nlohmann::ordered_json::parse("[1, 2]")).is_ok());
    EXPECT_FALSE(apply_chat_template("{% for %}", nlohmann::ordered_json::array()).is_ok());
}

}  // namespace
}  // namespace mvllm
