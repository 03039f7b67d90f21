#include "fuzz_util.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace mvllm::fuzz {
namespace fs = std::filesystem;

namespace {
struct ScratchDir {
    std::string path;
    ScratchDir() {
        std::string pattern = (fs::temp_directory_path() / "mvllm-fuzz-XXXXXX").string();
        if (mkdtemp(pattern.data()) == nullptr) {
            std::perror("mkdtemp");
            std::abort();
        }
        path = pattern;
    }
    ~ScratchDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

const std::string& scratch_dir() {
    static ScratchDir dir;
    return dir.path;
}

void write_file(const std::string& path, std::string_view bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        std::abort();
    }
}

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "fuzz fixture missing: %s\n", path.c_str());
        std::abort();
    }
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace mvllm::fuzz
