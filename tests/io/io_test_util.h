// Shared helpers for the io tests: a scratch folder, file byte I/O, and a raw GGUF byte builder
// that can express malformed files the writer refuses to produce.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mvllm::test {

// A fresh folder under the system temp dir, removed with its contents on destruction.
class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = "mvllm_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
        if (info != nullptr) name += std::string("_") + info->name();
        for (char& c : name)
            if (c == '/') c = '_';
        path_ = base_dir() / name;
        std::filesystem::remove_all(path_);
        std::filesystem::create_directories(path_);
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path_, ec);
    }
    std::string file(std::string_view name) const { return (path_ / name).string(); }
    std::string path() const { return path_.string(); }

private:
    // $TMPDIR when set, else /dev/shm when present (the loop tests write thousands of small files),
    // else the system temp dir.
    static std::filesystem::path base_dir() {
        std::error_code ec;
        if (std::getenv("TMPDIR") == nullptr && std::filesystem::is_directory("/dev/shm", ec) &&
            ::access("/dev/shm", W_OK) == 0)
            return "/dev/shm";
        return std::filesystem::temp_directory_path();
    }

    std::filesystem::path path_;
};

inline void write_file(const std::string& path, const void* data, size_t n) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    ASSERT_TRUE(out.good()) << path;
}
inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    write_file(path, bytes.data(), bytes.size());
}
inline void write_file(const std::string& path, std::string_view text) {
    write_file(path, text.data(), text.size());
}

inline std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Deterministic filler bytes.
inline std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed) {
    std::vector<uint8_t> out(n);
    uint32_t x = seed * 2654435761u + 12345u;
    for (auto& b : out) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b = static_cast<uint8_t>(x);
    }
    return out;
}

// Little-endian byte accumulator.
struct Bytes {
    std::vector<uint8_t> b;
    template <typename T>
    Bytes& put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + sizeof(T));
        return *this;
    }
    Bytes& str(std::string_view s) {
        put<uint64_t>(s.size());
        b.insert(b.end(), s.begin(), s.end());
        return *this;
    }
    Bytes& raw(const std::vector<uint8_t>& v) {
        b.insert(b.end(), v.begin(), v.end());
        return *this;
    }
};

// One encoded key/value: key string, u32 type, then the payload bytes as given.
inline std::vector<uint8_t> raw_kv(std::string_view key, uint32_t type, const std::vector<uint8_t>& payload) {
    Bytes out;
    out.str(key).put<uint32_t>(type).raw(payload);
    return out.b;
}
inline std::vector<uint8_t> kv_u32(std::string_view key, uint32_t v) {
    return raw_kv(key, 4, Bytes().put<uint32_t>(v).b);
}
inline std::vector<uint8_t> kv_str(std::string_view key, std::string_view v) {
    return raw_kv(key, 8, Bytes().str(v).b);
}

struct RawTensor {
    std::string name;
    uint32_t n_dims = 1;
    std::vector<uint64_t> ne;
    uint32_t type = 0;
    uint64_t offset = 0;
};

// A GGUF file described field by field; build() lays it out exactly as described (counts may be
// overridden to disagree with the lists).
struct RawGguf {
    std::string magic = "GGUF";
    uint32_t version = 3;
    std::optional<uint64_t> n_tensors;
    std::optional<uint64_t> n_kv;
    std::vector<std::vector<uint8_t>> kvs;
    std::vector<RawTensor> tensors;
    uint64_t alignment = 32;  // padding used before the data section
    uint64_t data_size = 0;   // filler bytes appended as tensor data

    std::vector<uint8_t> build() const {
        Bytes out;
        out.b.insert(out.b.end(), magic.begin(), magic.end());
        out.put<uint32_t>(version);
        out.put<uint64_t>(n_tensors.value_or(tensors.size()));
        out.put<uint64_t>(n_kv.value_or(kvs.size()));
        for (const auto& kv : kvs) out.raw(kv);
        for (const auto& t : tensors) {
            out.str(t.name).put<uint32_t>(t.n_dims);
            for (uint64_t d : t.ne) out.put<uint64_t>(d);
            out.put<uint32_t>(t.type).put<uint64_t>(t.offset);
        }
        while (out.b.size() % alignment != 0) out.b.push_back(0);
        out.raw(pattern_bytes(data_size, 7));
        return out.b;
    }
};

// A small valid file: two metadata keys and two tensors (f32 [8, 2] at 0, q8_0 [32] at 64).
inline RawGguf small_valid_gguf() {
    RawGguf g;
    g.kvs.push_back(kv_str("general.architecture", "llama"));
    g.kvs.push_back(kv_u32("llama.block_count", 2));
    g.tensors.push_back({"a", 2, {8, 2}, 0, 0});
    g.tensors.push_back({"b", 1, {32}, 8, 64});
    g.data_size = 64 + 34;
    return g;
}

}  // namespace mvllm::test
