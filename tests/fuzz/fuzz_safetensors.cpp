// Fuzz target: safetensors from arbitrary bytes. Selector byte (low bit):
//   0: the rest is a single .safetensors file;
//   1: the rest is model.safetensors.index.json, in a folder that also holds two valid shards
//      (a.safetensors with "x", b.safetensors with "y"), so weight_map entries can resolve.
// Whatever the reader accepts must lie inside its file (every tensor is read end to end).
#include <cstring>
#include <filesystem>

#include "fuzz_util.h"
#include "io/safetensors.h"

using namespace mvllm;

namespace {

// A valid one-tensor shard: {name: F32 [2]} with 8 bytes of data.
std::string make_shard(const std::string& name) {
    const std::string header = "{\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    std::string file(8, '\0');
    const uint64_t n = header.size();
    std::memcpy(file.data(), &n, 8);
    return file + header + std::string(8, '\x01');
}

const std::string& index_dir() {
    static const std::string dir = [] {
        const std::string d = fuzz::scratch_dir() + "/safetensors-index";
        std::filesystem::create_directories(d);
        fuzz::write_file(d + "/a.safetensors", make_shard("x"));
        fuzz::write_file(d + "/b.safetensors", make_shard("y"));
        return d;
    }();
    return dir;
}

void check(const SafetensorsCheckpoint& ckpt) {
    volatile uint8_t sink = 0;
    for (const SafetensorInfo& t : ckpt.tensors()) {
        FUZZ_REQUIRE(t.n_dims >= 1 && t.n_dims <= 4, "dims in range");
        const size_t n = t.view.n_bytes();
        if (n == 0) continue;
        const auto* bytes = static_cast<const uint8_t*>(t.view.data);
        sink = sink + bytes[0] + bytes[n - 1];
        FUZZ_REQUIRE(ckpt.find(t.name) != nullptr, "every tensor can be found by name");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static fuzz::MemFile file;
    fuzz::Input in(data, size);
    const bool index = in.byte() & 1;
    const std::string_view rest = in.rest();
    if (!index) {
        auto ckpt = SafetensorsCheckpoint::open(file.write(rest.data(), rest.size()));
        if (ckpt) check(**ckpt);
        return 0;
    }
    const std::string path = index_dir() + "/model.safetensors.index.json";
    fuzz::write_file(path, rest);
    auto ckpt = SafetensorsCheckpoint::open(path);
    if (ckpt) check(**ckpt);
    return 0;
}
