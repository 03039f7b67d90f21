// Helpers shared by the fuzz targets (tests/fuzz/fuzz_*.cpp).
//
// Every target defines LLVMFuzzerTestOneInput(data, size). It is linked two ways:
//   * with libFuzzer (-DMVLLM_FUZZ=ON, clang, ASan + UBSan): `fuzz_<name>` explores inputs;
//   * with replay_main.cpp (any compiler): `replay_<name> FILE_OR_DIR...` runs the target once
//     per file, which is how CTest replays tests/fuzz/regressions/<name>/ in every build.
// A target returns normally for every input; a crash, a sanitizer report, an MVLLM_CHECK failure
// or FUZZ_REQUIRE failing is a finding.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#ifndef MVLLM_TEST_DATA_DIR
#error "MVLLM_TEST_DATA_DIR must point at tests/data"
#endif
#ifndef MVLLM_SOURCE_DIR
#error "MVLLM_SOURCE_DIR must point at the source tree"
#endif

namespace mvllm::fuzz {

// A property of the code under test that must hold for every input (not an input check).
#define FUZZ_REQUIRE(cond, what)                                                                 \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            std::fprintf(stderr, "%s:%d: fuzz property failed: %s (%s)\n", __FILE__, __LINE__,   \
                         #cond, what);                                                           \
            std::abort();                                                                        \
        }                                                                                        \
    } while (0)

// Reads the input front to back: a selector byte, then the rest split at a separator.
class Input {
public:
    Input(const uint8_t* data, size_t size) : text_(reinterpret_cast<const char*>(data), size) {}
    // The next byte (0 once the input is used up).
    uint8_t byte() {
        if (pos_ >= text_.size()) return 0;
        return static_cast<uint8_t>(text_[pos_++]);
    }
    // Everything up to `separator` (or the end), consuming the separator.
    std::string_view until(std::string_view separator) {
        const std::string_view rest = text_.substr(pos_);
        const size_t at = rest.find(separator);
        if (at == std::string_view::npos) {
            pos_ = text_.size();
            return rest;
        }
        pos_ += at + separator.size();
        return rest.substr(0, at);
    }
    std::string_view rest() {
        const std::string_view r = text_.substr(pos_);
        pos_ = text_.size();
        return r;
    }

private:
    std::string_view text_;
    size_t pos_ = 0;
};

// Separates the parts of a multi-part input (template | messages, tokenizer.json | config).
inline constexpr std::string_view kSeparator = "\n#--mvllm-fuzz-part--#\n";

// An anonymous in-memory file whose path (/proc/self/fd/N) the file readers can open: inputs are
// handed to the real path-based readers without touching the disk.
class MemFile {
public:
    MemFile() {
        fd_ = memfd_create("mvllm-fuzz", 0);
        if (fd_ < 0) {
            std::perror("memfd_create");
            std::abort();
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    ~MemFile() { close(fd_); }
    MemFile(const MemFile&) = delete;
    MemFile& operator=(const MemFile&) = delete;

    const std::string& write(const void* data, size_t size) {
        if (ftruncate(fd_, 0) != 0 || pwrite_all(data, size) != size) {
            std::perror("memfd write");
            std::abort();
        }
        return path_;
    }

private:
    size_t pwrite_all(const void* data, size_t size) {
        size_t done = 0;
        while (done < size) {
            const ssize_t n = pwrite(fd_, static_cast<const char*>(data) + done, size - done, static_cast<off_t>(done));
            if (n <= 0) return done;
            done += static_cast<size_t>(n);
        }
        return done;
    }
    int fd_ = -1;
    std::string path_;
};

// A private scratch folder for readers that take a folder (tokenizer.json + tokenizer_config.json,
// a sharded safetensors index), removed at exit.
const std::string& scratch_dir();
void write_file(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);  // aborts when missing: the fixtures are required

inline std::string data_path(const std::string& relative) { return std::string(MVLLM_TEST_DATA_DIR) + "/" + relative; }
inline std::string source_path(const std::string& relative) { return std::string(MVLLM_SOURCE_DIR) + "/" + relative; }

}  // namespace mvllm::fuzz
