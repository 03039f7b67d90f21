// GGUF reader and writer (format summary in io/gguf.h).
//
// Reader shape: map the file, walk it with a bounds-checked cursor, and check every count against
// the bytes that remain before allocating anything for it. Tensor infos are validated as a whole
// (shape, type, byte size, alignment, range, overlap) before the file is handed out.
#include "io/gguf.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_set>
#include <utility>

#include "io/mmap_file.h"

namespace mvllm {

static_assert(std::endian::native == std::endian::little, "GGUF I/O assumes a little-endian host");

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 16;
// Upper bound on the number of metadata values (array elements included) in one file, so that
// a hostile file cannot make the reader hold tens of bytes of GgufValue per byte of input.
constexpr uint64_t kMaxMetadataValues = uint64_t{1} << 25;
constexpr size_t kHeaderSize = 4 + 4 + 8 + 8;
// Smallest possible encodings, used to reject counts the remaining bytes cannot hold.
constexpr size_t kMinKvSize = 8 + 4 + 1;                 // empty key, type, 1-byte value
constexpr size_t kMinTensorInfoSize = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, ne[0], type, offset

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

// Encoded size of one value of a fixed-size type, 0 for STRING and ARRAY.
size_t fixed_size(GgufType t) {
    switch (t) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
        case GgufType::UINT16: case GgufType::INT16: return 2;
        case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
        case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
        case GgufType::STRING: case GgufType::ARRAY: return 0;
    }
    return 0;
}

// Smallest encoded size of one array element of type t.
size_t min_element_size(GgufType t) {
    if (t == GgufType::STRING) return 8;     // length
    if (t == GgufType::ARRAY) return 4 + 8;  // element type + count
    return fixed_size(t);
}

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

uint64_t align_up(uint64_t x, uint64_t alignment) { return (x + alignment - 1) / alignment * alignment; }

// Bytes of a tensor, validating the type and shape first (dimensions beyond n_dims must be 1).
Status tensor_bytes(DType type, const std::array<int64_t, 4>& ne, int n_dims, size_t* out) {
    const TypeTraits* traits = find_type_traits(static_cast<uint32_t>(type));
    if (traits == nullptr) return make_error("unknown tensor type id ", static_cast<uint32_t>(type));
    if (!traits->storable) return make_error("type ", traits->name, " cannot be stored in a file");
    if (n_dims < 1 || n_dims > kMaxDims) return make_error("n_dims ", n_dims, " is not in 1..", kMaxDims);
    int64_t n_elements = 1;
    for (int i = 0; i < kMaxDims; ++i) {
        if (i >= n_dims && ne[i] != 1)
            return make_error("ne[", i, "] = ", ne[i], " beyond n_dims ", n_dims, " must be 1");
        if (ne[i] <= 0) return make_error("dimension ne[", i, "] = ", ne[i], " is not positive");
        if (__builtin_mul_overflow(n_elements, ne[i], &n_elements))
            return make_error("shape ", shape_string(ne), " overflows the element count");
    }
    if (ne[0] % traits->block_size != 0)
        return make_error("ne[0] = ", ne[0], " is not a multiple of the ", traits->name, " block size ",
                          traits->block_size, ", so the byte size of type x shape is not whole");
    const uint64_t blocks = static_cast<uint64_t>(ne[0] / traits->block_size);
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->type_size), &bytes) ||
        __builtin_mul_overflow(bytes, static_cast<uint64_t>(ne[1] * ne[2] * ne[3]), &bytes) ||
        bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return make_error("shape ", shape_string(ne), " of type ", traits->name, " overflows the byte size");
    *out = static_cast<size_t>(bytes);
    return Status::ok();
}

// A bounds-checked reader over the mapped bytes.
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }

    Status read_bytes(void* dst, size_t n, const char* what) {
        if (n > remaining())
            return make_error("truncated file: ", what, " at offset ", pos_, " needs ", n,
                              " bytes but only ", remaining(), " remain");
        if (n > 0) std::memcpy(dst, data_ + pos_, n);
        pos_ += n;
        return Status::ok();
    }
    template <typename T>
    Status read(T* out, const char* what) { return read_bytes(out, sizeof(T), what); }

    Status read_string(std::string* out, const char* what) {
        uint64_t len = 0;
        MVLLM_TRY(read(&len, what));
        if (len > remaining())
            return make_error("truncated file or absurd string length: ", what, " at offset ", pos_ - 8,
                              " has length ", len, " but only ", remaining(), " bytes remain");
        out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
        pos_ += static_cast<size_t>(len);
        return Status::ok();
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

// Output buffer for the writer's header.
struct ByteSink {
    std::vector<uint8_t> bytes;
    template <typename T>
    void put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        bytes.insert(bytes.end(), p, p + sizeof(T));
    }
    void put_string(std::string_view s) {
        put<uint64_t>(s.size());
        bytes.insert(bytes.end(), s.begin(), s.end());
    }
};

// Writes an integer value as T, accepting either integer alternative when it fits.
template <typename T>
Status put_int(ByteSink& out, const GgufValue& value) {
    if (const auto* u = std::get_if<uint64_t>(&value.v)) {
        if (!std::in_range<T>(*u)) return make_error("value ", *u, " does not fit in ", gguf_type_name(value.type));
        out.put<T>(static_cast<T>(*u));
        return Status::ok();
    }
    if (const auto* i = std::get_if<int64_t>(&value.v)) {
        if (!std::in_range<T>(*i)) return make_error("value ", *i, " does not fit in ", gguf_type_name(value.type));
        out.put<T>(static_cast<T>(*i));
        return Status::ok();
    }
    return make_error("a ", gguf_type_name(value.type), " value does not hold an integer");
}

// Writes the payload of a value (no type tag), checking it against its declared type.
Status put_value(ByteSink& out, const GgufValue& value, int depth) {
    const auto mismatch = [&](const char* held) {
        return make_error("a ", gguf_type_name(value.type), " value does not hold ", held);
    };
    switch (value.type) {
        case GgufType::UINT8: return put_int<uint8_t>(out, value);
        case GgufType::INT8: return put_int<int8_t>(out, value);
        case GgufType::UINT16: return put_int<uint16_t>(out, value);
        case GgufType::INT16: return put_int<int16_t>(out, value);
        case GgufType::UINT32: return put_int<uint32_t>(out, value);
        case GgufType::INT32: return put_int<int32_t>(out, value);
        case GgufType::UINT64: return put_int<uint64_t>(out, value);
        case GgufType::INT64: return put_int<int64_t>(out, value);
        case GgufType::FLOAT32:
        case GgufType::FLOAT64: {
            const auto* d = std::get_if<double>(&value.v);
            if (d == nullptr) return mismatch("a float");
            if (value.type == GgufType::FLOAT32) out.put<float>(static_cast<float>(*d));
            else out.put<double>(*d);
            return Status::ok();
        }
        case GgufType::BOOL: {
            const auto* b = std::get_if<bool>(&value.v);
            if (b == nullptr) return mismatch("a bool");
            out.put<uint8_t>(*b ? 1 : 0);
            return Status::ok();
        }
        case GgufType::STRING: {
            const auto* s = std::get_if<std::string>(&value.v);
            if (s == nullptr) return mismatch("a string");
            out.put_string(*s);
            return Status::ok();
        }
        case GgufType::ARRAY: {
            const auto* a = std::get_if<GgufArray>(&value.v);
            if (a == nullptr) return mismatch("an array");
            if (!valid_value_type(static_cast<uint32_t>(a->elem_type)))
                return make_error("array element type ", static_cast<uint32_t>(a->elem_type), " is unknown");
            if (a->elem_type == GgufType::ARRAY && depth + 1 >= kMaxArrayDepth)
                return make_error("arrays nested deeper than ", kMaxArrayDepth);
            out.put<uint32_t>(static_cast<uint32_t>(a->elem_type));
            out.put<uint64_t>(a->items.size());
            for (size_t i = 0; i < a->items.size(); ++i) {
                const GgufValue& item = a->items[i];
                if (item.type != a->elem_type)
                    return make_error("array item ", i, " has type ", gguf_type_name(item.type),
                                      " but the array holds ", gguf_type_name(a->elem_type));
                Status st = put_value(out, item, depth + 1);
                if (!st) return st.with_context("array item " + std::to_string(i));
            }
            return Status::ok();
        }
    }
    return make_error("unknown value type ", static_cast<uint32_t>(value.type));
}

}  // namespace

// ---- values --------------------------------------------------------------------------------------

const char* gguf_type_name(GgufType type) {
    switch (type) {
        case GgufType::UINT8: return "u8";
        case GgufType::INT8: return "i8";
        case GgufType::UINT16: return "u16";
        case GgufType::INT16: return "i16";
        case GgufType::UINT32: return "u32";
        case GgufType::INT32: return "i32";
        case GgufType::FLOAT32: return "f32";
        case GgufType::BOOL: return "bool";
        case GgufType::STRING: return "string";
        case GgufType::ARRAY: return "array";
        case GgufType::UINT64: return "u64";
        case GgufType::INT64: return "i64";
        case GgufType::FLOAT64: return "f64";
    }
    return "unknown";
}

GgufValue GgufValue::string_array(const std::vector<std::string>& items) {
    std::vector<GgufValue> values;
    values.reserve(items.size());
    for (const auto& s : items) values.push_back(str(s));
    return array(GgufType::STRING, std::move(values));
}

bool GgufValue::is_integer() const {
    switch (type) {
        case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
        case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64:
            return true;
        default:
            return false;
    }
}

bool GgufValue::is_float() const { return type == GgufType::FLOAT32 || type == GgufType::FLOAT64; }

std::optional<int64_t> GgufValue::as_int() const {
    if (!is_integer()) return std::nullopt;
    if (const auto* i = std::get_if<int64_t>(&v)) return *i;
    if (const auto* u = std::get_if<uint64_t>(&v)) {
        if (!std::in_range<int64_t>(*u)) return std::nullopt;
        return static_cast<int64_t>(*u);
    }
    return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
    if (is_float()) {
        if (const auto* d = std::get_if<double>(&v)) return *d;
        return std::nullopt;
    }
    if (!is_integer()) return std::nullopt;
    if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
    if (const auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
    return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
    if (type != GgufType::BOOL) return std::nullopt;
    if (const auto* b = std::get_if<bool>(&v)) return *b;
    return std::nullopt;
}

const std::string* GgufValue::as_string() const {
    return type == GgufType::STRING ? std::get_if<std::string>(&v) : nullptr;
}

const GgufArray* GgufValue::as_array() const {
    return type == GgufType::ARRAY ? std::get_if<GgufArray>(&v) : nullptr;
}

// ---- reader --------------------------------------------------------------------------------------

class GgufParser {
public:
    GgufParser(GgufFile& file, const uint8_t* data, size_t size) : f_(file), cur_(data, size), size_(size) {}

    Status parse() {
        MVLLM_TRY(parse_header());
        MVLLM_TRY(parse_metadata());
        MVLLM_TRY(parse_alignment());
        MVLLM_TRY(parse_tensor_infos());
        return check_tensor_layout();
    }
    // Offset of the tensor data section (valid after parse() when the file has tensors).
    uint64_t data_start() const { return data_start_; }

private:
    Status parse_header() {
        char magic[4];
        MVLLM_TRY(cur_.read_bytes(magic, 4, "magic"));
        if (std::memcmp(magic, kMagic, 4) != 0) {
            std::string shown;
            for (char c : magic) shown += (c >= 32 && c < 127) ? c : '?';
            return make_error("bad magic \"", shown, "\" (not a GGUF file)");
        }
        MVLLM_TRY(cur_.read(&f_.version_, "version"));
        if (f_.version_ != 2 && f_.version_ != 3)
            return make_error("unsupported GGUF version ", f_.version_, " (only versions 2 and 3 are read)");
        MVLLM_TRY(cur_.read(&n_tensors_, "tensor count"));
        MVLLM_TRY(cur_.read(&n_kv_, "metadata kv count"));
        if (n_kv_ > cur_.remaining() / kMinKvSize)
            return make_error("absurd metadata kv count ", n_kv_, " (file truncated?): the remaining ", cur_.remaining(),
                              " bytes cannot hold that many entries");
        if (n_tensors_ > cur_.remaining() / kMinTensorInfoSize)
            return make_error("absurd tensor count ", n_tensors_, " (file truncated?): the remaining ", cur_.remaining(),
                              " bytes cannot hold that many tensor infos");
        return Status::ok();
    }

    Status parse_metadata() {
        f_.metadata_.reserve(static_cast<size_t>(n_kv_));
        std::unordered_set<std::string> seen;
        for (uint64_t i = 0; i < n_kv_; ++i) {
            std::string key;
            MVLLM_TRY(cur_.read_string(&key, "metadata key"));
            if (!seen.insert(key).second) return make_error("duplicate metadata key '", key, "'");
            uint32_t type = 0;
            MVLLM_TRY(cur_.read(&type, "metadata value type"));
            GgufValue value;
            Status st = read_value(type, 0, &value);
            if (!st) return st.with_context("metadata key '" + key + "'");
            f_.metadata_.emplace_back(std::move(key), std::move(value));
        }
        return Status::ok();
    }

    Status read_value(uint32_t type_id, int depth, GgufValue* out) {
        if (!valid_value_type(type_id)) return make_error("unknown value type ", type_id);
        if (++n_values_ > kMaxMetadataValues)
            return make_error("more than ", kMaxMetadataValues, " metadata values");
        const auto type = static_cast<GgufType>(type_id);
        out->type = type;
        switch (type) {
            case GgufType::UINT8: return read_as<uint8_t, uint64_t>(out);
            case GgufType::INT8: return read_as<int8_t, int64_t>(out);
            case GgufType::UINT16: return read_as<uint16_t, uint64_t>(out);
            case GgufType::INT16: return read_as<int16_t, int64_t>(out);
            case GgufType::UINT32: return read_as<uint32_t, uint64_t>(out);
            case GgufType::INT32: return read_as<int32_t, int64_t>(out);
            case GgufType::UINT64: return read_as<uint64_t, uint64_t>(out);
            case GgufType::INT64: return read_as<int64_t, int64_t>(out);
            case GgufType::FLOAT32: return read_as<float, double>(out);
            case GgufType::FLOAT64: return read_as<double, double>(out);
            case GgufType::BOOL: {
                uint8_t b = 0;
                MVLLM_TRY(cur_.read(&b, "bool value"));
                if (b > 1) return make_error("bool value ", int{b}, " at offset ", cur_.pos() - 1, " is not 0 or 1");
                out->v = b == 1;
                return Status::ok();
            }
            case GgufType::STRING: {
                std::string s;
                MVLLM_TRY(cur_.read_string(&s, "string value"));
                out->v = std::move(s);
                return Status::ok();
            }
            case GgufType::ARRAY: return read_array(depth, out);
        }
        return make_error("unknown value type ", type_id);
    }

    template <typename Raw, typename Held>
    Status read_as(GgufValue* out) {
        Raw raw{};
        MVLLM_TRY(cur_.read(&raw, gguf_type_name(out->type)));
        out->v = static_cast<Held>(raw);
        return Status::ok();
    }

    Status read_array(int depth, GgufValue* out) {
        uint32_t elem = 0;
        uint64_t count = 0;
        MVLLM_TRY(cur_.read(&elem, "array element type"));
        if (!valid_value_type(elem)) return make_error("unknown array element type ", elem);
        MVLLM_TRY(cur_.read(&count, "array length"));
        const auto elem_type = static_cast<GgufType>(elem);
        if (count > cur_.remaining() / min_element_size(elem_type))
            return make_error("absurd array length ", count, " of ", gguf_type_name(elem_type), " at offset ",
                              cur_.pos() - 8, " (file truncated?): only ", cur_.remaining(), " bytes remain");
        if (count > kMaxMetadataValues - n_values_)
            return make_error("array length ", count, " exceeds the limit of ", kMaxMetadataValues,
                              " metadata values");
        if (elem_type == GgufType::ARRAY && depth + 1 >= kMaxArrayDepth)
            return make_error("arrays nested deeper than ", kMaxArrayDepth);
        GgufArray array;
        array.elem_type = elem_type;
        array.items.resize(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) {
            Status st = read_value(elem, depth + 1, &array.items[i]);
            if (!st) return st.with_context("array item " + std::to_string(i));
        }
        out->v = std::move(array);
        return Status::ok();
    }

    Status parse_alignment() {
        const GgufValue* v = f_.find(kAlignmentKey);
        if (v == nullptr) return Status::ok();
        if (v->type != GgufType::UINT32)
            return make_error(kAlignmentKey, " has type ", gguf_type_name(v->type), ", expected u32");
        const auto* held = std::get_if<uint64_t>(&v->v);
        const uint64_t a = held != nullptr ? *held : 0;
        if (!is_power_of_two(a)) return make_error(kAlignmentKey, " = ", a, " is not a power of 2");
        f_.alignment_ = a;
        return Status::ok();
    }

    Status parse_tensor_infos() {
        if (n_tensors_ > cur_.remaining() / kMinTensorInfoSize)
            return make_error("absurd tensor count ", n_tensors_, " (file truncated?): the remaining ", cur_.remaining(),
                              " bytes cannot hold that many tensor infos");
        f_.tensors_.reserve(static_cast<size_t>(n_tensors_));
        std::unordered_set<std::string> seen;
        for (uint64_t i = 0; i < n_tensors_; ++i) {
            GgufTensorInfo info;
            MVLLM_TRY(cur_.read_string(&info.name, "tensor name"));
            if (!seen.insert(info.name).second) return make_error("duplicate tensor name '", info.name, "'");
            Status st = read_tensor_info(&info);
            if (!st) return st.with_context("tensor '" + info.name + "'");
            f_.tensors_.push_back(std::move(info));
        }
        return Status::ok();
    }

    Status read_tensor_info(GgufTensorInfo* info) {
        uint32_t n_dims = 0;
        MVLLM_TRY(cur_.read(&n_dims, "n_dims"));
        if (n_dims < 1 || n_dims > kMaxDims) return make_error("n_dims ", n_dims, " is not in 1..", kMaxDims);
        info->n_dims = static_cast<int>(n_dims);
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t raw = 0;
            MVLLM_TRY(cur_.read(&raw, "dimension"));
            info->ne[d] = static_cast<int64_t>(raw);  // > INT64_MAX shows up as negative
        }
        uint32_t type_id = 0;
        MVLLM_TRY(cur_.read(&type_id, "tensor type"));
        if (find_type_traits(type_id) == nullptr)
            return make_error("unknown tensor type id ", type_id,
                              " (mvllm reads f32, f16, bf16, q4_0, q8_0, q4_K, q5_K, q6_K)");
        info->type = static_cast<DType>(type_id);
        MVLLM_TRY(cur_.read(&info->offset, "tensor offset"));
        return tensor_bytes(info->type, info->ne, info->n_dims, &info->n_bytes);
    }

    // Data section start, then each tensor's alignment, range and overlap with its neighbour.
    Status check_tensor_layout() {
        const uint64_t data_start = align_up(cur_.pos(), f_.alignment_);
        if (f_.tensors_.empty()) {
            if (data_start <= size_) f_.data_ = nullptr;
            return Status::ok();
        }
        if (data_start > size_)
            return make_error("truncated file: the tensor data section starts at offset ", data_start,
                              " but the file has ", size_, " bytes");
        const uint64_t data_size = size_ - data_start;
        data_start_ = data_start;
        std::vector<const GgufTensorInfo*> sorted;
        sorted.reserve(f_.tensors_.size());
        for (const GgufTensorInfo& t : f_.tensors_) {
            if (t.offset % f_.alignment_ != 0)
                return make_error("tensor '", t.name, "' has misaligned offset ", t.offset, " (alignment ",
                                  f_.alignment_, ")");
            if (t.offset > data_size || t.n_bytes > data_size - t.offset)
                return make_error("tensor '", t.name, "' data [", t.offset, ", ", t.offset + t.n_bytes,
                                  ") extends past the end of the file (data section holds ", data_size,
                                  " bytes; file truncated?)");
            sorted.push_back(&t);
        }
        std::sort(sorted.begin(), sorted.end(),
                  [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
        for (size_t i = 1; i < sorted.size(); ++i) {
            const GgufTensorInfo& a = *sorted[i - 1];
            const GgufTensorInfo& b = *sorted[i];
            if (a.offset + a.n_bytes > b.offset)
                return make_error("tensors '", a.name, "' [", a.offset, ", ", a.offset + a.n_bytes, ") and '",
                                  b.name, "' [", b.offset, ", ", b.offset + b.n_bytes, ") overlap");
        }
        return Status::ok();
    }

    GgufFile& f_;
    Cursor cur_;
    size_t size_;
    uint64_t n_tensors_ = 0;
    uint64_t n_kv_ = 0;
    uint64_t n_values_ = 0;
    uint64_t data_start_ = 0;
};

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
    MVLLM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::open(path));
    if (mapped->size() < kHeaderSize)
        return make_error(path, ": truncated file: ", mapped->size(), " bytes is shorter than the ",
                          kHeaderSize, "-byte GGUF header");
    std::unique_ptr<GgufFile> file(new GgufFile());
    file->path_ = path;
    GgufParser parser(*file, mapped->data(), mapped->size());
    Status st = parser.parse();
    if (!st) return st.with_context(path);
    file->file_size_ = mapped->size();
    const uint8_t* base = mapped->data();
    file->map_ = mapped->release();
    if (!file->tensors_.empty()) file->data_ = base + parser.data_start();
    return file;
}

GgufFile::~GgufFile() { unmap_region(map_, file_size_); }

const GgufValue* GgufFile::find(std::string_view key) const {
    for (const auto& [k, v] : metadata_)
        if (k == key) return &v;
    return nullptr;
}

Result<std::string> GgufFile::get_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return make_error(path_, ": metadata key '", key, "' is missing");
    if (const std::string* s = v->as_string()) return *s;
    return make_error(path_, ": metadata key '", key, "' has type ", gguf_type_name(v->type), ", expected string");
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return make_error(path_, ": metadata key '", key, "' is missing");
    if (auto i = v->as_int()) return *i;
    if (v->is_integer()) return make_error(path_, ": metadata key '", key, "' does not fit in int64");
    return make_error(path_, ": metadata key '", key, "' has type ", gguf_type_name(v->type), ", expected an integer");
}

Result<double> GgufFile::get_float(std::string_view key) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return make_error(path_, ": metadata key '", key, "' is missing");
    if (auto d = v->as_float()) return *d;
    return make_error(path_, ": metadata key '", key, "' has type ", gguf_type_name(v->type), ", expected a number");
}

Result<int64_t> GgufFile::get_int_or(std::string_view key, int64_t fallback) const {
    if (find(key) == nullptr) return fallback;
    return get_int(key);
}

Result<double> GgufFile::get_float_or(std::string_view key, double fallback) const {
    if (find(key) == nullptr) return fallback;
    return get_float(key);
}

Result<bool> GgufFile::get_bool_or(std::string_view key, bool fallback) const {
    const GgufValue* v = find(key);
    if (v == nullptr) return fallback;
    if (auto b = v->as_bool()) return *b;
    return make_error(path_, ": metadata key '", key, "' has type ", gguf_type_name(v->type), ", expected bool");
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
    for (const GgufTensorInfo& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

TensorView GgufFile::view(const GgufTensorInfo& info) const {
    TensorView v;
    v.type = info.type;
    v.ne = info.ne;
    // The mapping is read-only; the view's pointer is non-const only because TensorView is.
    v.data = const_cast<uint8_t*>(data_ + info.offset);
    return v;
}

// ---- writer --------------------------------------------------------------------------------------

void GgufWriter::set(std::string key, GgufValue value) {
    for (auto& [k, v] : metadata_) {
        if (k == key) {
            v = std::move(value);
            return;
        }
    }
    metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::add_tensor(std::string name, DType type, std::array<int64_t, 4> ne, int n_dims,
                            std::function<void(void* dst)> fill) {
    tensors_.push_back({std::move(name), type, ne, n_dims, std::move(fill)});
}

void GgufWriter::add_tensor_copy(std::string name, const TensorView& view, int n_dims) {
    // An invalid shape is reported by write(); copy nothing for it.
    size_t n_bytes = 0;
    auto bytes = std::make_shared<std::vector<uint8_t>>();
    if (tensor_bytes(view.type, view.ne, n_dims, &n_bytes).is_ok() && view.data != nullptr) {
        const auto* src = static_cast<const uint8_t*>(view.data);
        bytes->assign(src, src + n_bytes);
    }
    add_tensor(std::move(name), view.type, view.ne, n_dims, [bytes](void* dst) {
        if (!bytes->empty()) std::memcpy(dst, bytes->data(), bytes->size());
    });
}

namespace {

// Writes everything or reports the failing path.
class FileOut {
public:
    explicit FileOut(std::string path) : path_(std::move(path)), f_(std::fopen(path_.c_str(), "wb")) {}
    ~FileOut() {
        if (f_ != nullptr) std::fclose(f_);
    }
    bool is_open() const { return f_ != nullptr; }
    Status write(const void* data, size_t n) {
        if (n > 0 && std::fwrite(data, 1, n, f_) != n)
            return make_error(path_, ": write failed: ", std::strerror(errno));
        return Status::ok();
    }
    Status pad_to(uint64_t pos, uint64_t alignment) {
        static const uint8_t zeros[256] = {};
        uint64_t pad = align_up(pos, alignment) - pos;
        while (pad > 0) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(pad, sizeof(zeros)));
            MVLLM_TRY(write(zeros, n));
            pad -= n;
        }
        return Status::ok();
    }
    Status close() {
        const int rc = std::fclose(f_);
        f_ = nullptr;
        if (rc != 0) return make_error(path_, ": close failed: ", std::strerror(errno));
        return Status::ok();
    }

private:
    std::string path_;
    std::FILE* f_;
};

}  // namespace

Status GgufWriter::write(const std::string& path) const {
    if (!is_power_of_two(alignment) || alignment > std::numeric_limits<uint32_t>::max())
        return make_error(path, ": alignment ", alignment, " is not a power of 2 that fits in u32");

    // general.alignment always describes the layout actually written.
    std::vector<std::pair<std::string, GgufValue>> metadata = metadata_;
    bool has_alignment_key = false;
    for (auto& [k, v] : metadata) {
        if (k == kAlignmentKey) {
            v = GgufValue::u32(static_cast<uint32_t>(alignment));
            has_alignment_key = true;
        }
    }
    if (!has_alignment_key && alignment != kDefaultAlignment)
        metadata.emplace_back(kAlignmentKey, GgufValue::u32(static_cast<uint32_t>(alignment)));

    ByteSink header;
    header.bytes.insert(header.bytes.end(), kMagic, kMagic + 4);
    header.put<uint32_t>(3);
    header.put<uint64_t>(tensors_.size());
    header.put<uint64_t>(metadata.size());
    for (const auto& [key, value] : metadata) {
        header.put_string(key);
        header.put<uint32_t>(static_cast<uint32_t>(value.type));
        Status st = put_value(header, value, 0);
        if (!st) return st.with_context(path + ": metadata key '" + key + "'");
    }

    std::vector<size_t> n_bytes(tensors_.size());
    std::unordered_set<std::string_view> names;
    uint64_t offset = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
        const Pending& t = tensors_[i];
        if (!names.insert(t.name).second) return make_error(path, ": duplicate tensor name '", t.name, "'");
        Status st = tensor_bytes(t.type, t.ne, t.n_dims, &n_bytes[i]);
        if (!st) return st.with_context(path + ": tensor '" + t.name + "'");
        header.put_string(t.name);
        header.put<uint32_t>(static_cast<uint32_t>(t.n_dims));
        for (int d = 0; d < t.n_dims; ++d) header.put<uint64_t>(static_cast<uint64_t>(t.ne[d]));
        header.put<uint32_t>(static_cast<uint32_t>(t.type));
        header.put<uint64_t>(offset);
        offset = align_up(offset + n_bytes[i], alignment);
    }

    // Write to a temporary name and rename, so a failed write never leaves a half file at path.
    const std::string tmp = path + ".tmp";
    const auto write_all = [&]() -> Status {
        FileOut out(tmp);
        if (!out.is_open()) return make_error(tmp, ": cannot create: ", std::strerror(errno));
        MVLLM_TRY(out.write(header.bytes.data(), header.bytes.size()));
        MVLLM_TRY(out.pad_to(header.bytes.size(), alignment));
        std::vector<uint8_t> buffer;
        for (size_t i = 0; i < tensors_.size(); ++i) {
            buffer.assign(n_bytes[i], 0);
            if (tensors_[i].fill) tensors_[i].fill(buffer.data());
            MVLLM_TRY(out.write(buffer.data(), buffer.size()));
            MVLLM_TRY(out.pad_to(buffer.size(), alignment));
        }
        return out.close();
    };
    Status st = write_all();
    if (st.is_ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
        st = make_error(path, ": cannot rename ", tmp, ": ", std::strerror(errno));
    if (!st) std::remove(tmp.c_str());
    return st;
}

}  // namespace mvllm
