// GGUF (versions 2 and 3): the llama.cpp model file format.
//
// Layout, little endian:
//   magic "GGUF" (4 bytes) | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x  { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (each offset relative to this start,
//   a multiple of the alignment)
// where string = u64 length + bytes (no terminator) and an array value = u32 element type +
// u64 count + elements (arrays may nest). Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32,
// 6 f32, 7 bool, 8 string, 9 array, 10 u64, 11 i64, 12 f64.
//
// The reader validates everything before use (sizes, counts, offsets, alignment, overlap, types)
// and maps the data read-only; a malformed file yields an error naming the file and the problem.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace mvllm {

enum class GgufType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* gguf_type_name(GgufType type);

struct GgufValue;
struct GgufArray {
    GgufType elem_type = GgufType::UINT8;
    std::vector<GgufValue> items;
};

// One metadata value. Integers of every width are held as int64_t / uint64_t, floats as double;
// `type` remembers the type written in (or to be written to) the file.
struct GgufValue {
    GgufType type = GgufType::UINT32;
    std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> v = uint64_t{0};

    static GgufValue u32(uint32_t x) { return {GgufType::UINT32, uint64_t{x}}; }
    static GgufValue i32(int32_t x) { return {GgufType::INT32, int64_t{x}}; }
    static GgufValue u64(uint64_t x) { return {GgufType::UINT64, x}; }
    static GgufValue f32(float x) { return {GgufType::FLOAT32, double{x}}; }
    static GgufValue boolean(bool x) { return {GgufType::BOOL, x}; }
    static GgufValue str(std::string x) { return {GgufType::STRING, std::move(x)}; }
    static GgufValue array(GgufType elem_type, std::vector<GgufValue> items) {
        return {GgufType::ARRAY, GgufArray{elem_type, std::move(items)}};
    }
    static GgufValue string_array(const std::vector<std::string>& items);

    bool is_integer() const;  // any integer type
    bool is_float() const;    // FLOAT32 or FLOAT64
    // Conversions; nullopt when the value's type does not fit (a string as an int, say).
    std::optional<int64_t> as_int() const;
    std::optional<double> as_float() const;  // integers convert too
    std::optional<bool> as_bool() const;
    const std::string* as_string() const;
    const GgufArray* as_array() const;
};

struct GgufTensorInfo {
    std::string name;
    DType type = DType::F32;
    std::array<int64_t, 4> ne = {1, 1, 1, 1};
    int n_dims = 1;
    uint64_t offset = 0;  // relative to the start of the data section
    size_t n_bytes = 0;
};

class GgufFile {
public:
    // Opens, validates and maps the file. Errors name the file and the problem.
    static Result<std::unique_ptr<GgufFile>> open(const std::string& path);
    ~GgufFile();

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    uint64_t alignment() const { return alignment_; }
    size_t file_size() const { return file_size_; }

    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
    const GgufValue* find(std::string_view key) const;
    // Typed getters: an error names the key when it is missing or of another type.
    Result<std::string> get_string(std::string_view key) const;
    Result<int64_t> get_int(std::string_view key) const;
    Result<double> get_float(std::string_view key) const;
    // Optional variants: the default when absent, an error only when present with a wrong type.
    Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
    Result<double> get_float_or(std::string_view key, double fallback) const;
    Result<bool> get_bool_or(std::string_view key, bool fallback) const;

    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
    const GgufTensorInfo* find_tensor(std::string_view name) const;
    // A view into the mapped data.
    TensorView view(const GgufTensorInfo& info) const;

private:
    GgufFile() = default;
    friend class GgufParser;
    std::string path_;
    uint32_t version_ = 0;
    uint64_t alignment_ = 32;
    size_t file_size_ = 0;
    void* map_ = nullptr;  // whole file, read-only
    const uint8_t* data_ = nullptr;  // start of the tensor data section
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<GgufTensorInfo> tensors_;
};

// Writes a GGUF v3 file. Tensor data is produced by a callback at write time so that multi-GB
// models are written without holding them in memory twice.
class GgufWriter {
public:
    void set(std::string key, GgufValue value);  // replaces an existing key
    // fill(dst) must write exactly row_size(type, ne[0]) * rows bytes.
    void add_tensor(std::string name, DType type, std::array<int64_t, 4> ne, int n_dims,
                    std::function<void(void* dst)> fill);
    // Convenience: copies the bytes now.
    void add_tensor_copy(std::string name, const TensorView& view, int n_dims);
    Status write(const std::string& path) const;

    uint64_t alignment = 32;

private:
    struct Pending {
        std::string name;
        DType type;
        std::array<int64_t, 4> ne;
        int n_dims;
        std::function<void(void*)> fill;
    };
    std::vector<std::pair<std::string, GgufValue>> metadata_;
    std::vector<Pending> tensors_;
};

}  // namespace mvllm
