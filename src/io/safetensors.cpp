// safetensors reader (format summary in io/safetensors.h).
//
// Shape: resolve the path to a list of shard files, map each one, validate its JSON header against
// the file (dtype, shape, offsets, size, overlap), then cross-check the index's weight_map.
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "io/mmap_file.h"

namespace mvllm {

namespace fs = std::filesystem;
using nlohmann::json;

struct SafetensorsCheckpoint::Mapping {
    std::unique_ptr<MappedFile> file;
};

namespace {

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kMetadataKey = "__metadata__";
constexpr int kMaxDims = 4;

struct DTypeInfo {
    const char* name;
    DType type;
    uint64_t size;
};
constexpr DTypeInfo kDTypes[] = {{"F32", DType::F32, 4}, {"F16", DType::F16, 2}, {"BF16", DType::BF16, 2}};

const DTypeInfo* find_dtype(std::string_view name) {
    for (const auto& d : kDTypes)
        if (name == d.name) return &d;
    return nullptr;
}

// Parses JSON text, reporting a syntax error as a Status.
Result<json> parse_json(const char* begin, const char* end, const std::string& what) {
    try {
        return json::parse(begin, end);
    } catch (const json::exception& e) {
        return make_error(what, " is not valid JSON: ", e.what());
    }
}

// A shard-relative file name from an index must stay inside the checkpoint folder.
bool safe_relative_name(const std::string& name) {
    if (name.empty()) return false;
    const fs::path p(name);
    if (p.is_absolute()) return false;
    for (const auto& part : p)
        if (part == "..") return false;
    return true;
}

struct Entry {
    SafetensorInfo info;
    uint64_t begin = 0;
    uint64_t end = 0;
};

// Validates one tensor entry of a header; `data_size` is the bytes after the header.
Status parse_entry(const std::string& name, const json& j, uint64_t data_size, Entry* out) {
    const auto fail = [&](auto&&... args) { return make_error("tensor '", name, "': ", args...); };
    if (!j.is_object()) return fail("entry is not a JSON object");
    const auto dtype_it = j.find("dtype");
    const auto shape_it = j.find("shape");
    const auto offsets_it = j.find("data_offsets");
    if (dtype_it == j.end() || !dtype_it->is_string()) return fail("missing or non-string \"dtype\"");
    if (shape_it == j.end() || !shape_it->is_array()) return fail("missing or non-array \"shape\"");
    if (offsets_it == j.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
        return fail("\"data_offsets\" is not a pair of non-negative integers");

    const std::string dtype_name = dtype_it->get<std::string>();
    const DTypeInfo* dtype = find_dtype(dtype_name);
    if (dtype == nullptr) return fail("unsupported dtype '", dtype_name, "' (supported: F32, F16, BF16)");

    const json& shape = *shape_it;
    if (shape.size() > static_cast<size_t>(kMaxDims))
        return fail("shape has ", shape.size(), " dimensions; at most ", kMaxDims, " are supported");
    Entry e;
    e.info.name = name;
    e.info.view.type = dtype->type;
    e.info.view.ne = {1, 1, 1, 1};
    e.info.n_dims = std::max<int>(1, static_cast<int>(shape.size()));
    uint64_t n_elements = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (!shape[i].is_number_unsigned()) return fail("shape entry ", i, " is not a non-negative integer");
        const uint64_t dim = shape[i].get<uint64_t>();
        if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
            __builtin_mul_overflow(n_elements, dim, &n_elements))
            return fail("shape overflows the element count");
        // Row-major shape, outermost first; ne[0] is the innermost dimension.
        e.info.view.ne[shape.size() - 1 - i] = static_cast<int64_t>(dim);
    }
    uint64_t n_bytes = 0;
    if (__builtin_mul_overflow(n_elements, dtype->size, &n_bytes)) return fail("shape overflows the byte size");

    e.begin = (*offsets_it)[0].get<uint64_t>();
    e.end = (*offsets_it)[1].get<uint64_t>();
    if (e.begin > e.end) return fail("data_offsets [", e.begin, ", ", e.end, "] are reversed");
    if (e.end > data_size)
        return fail("data_offsets [", e.begin, ", ", e.end, "] extend past the end of the file (data holds ",
                    data_size, " bytes)");
    if (e.end - e.begin != n_bytes)
        return fail("data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin, " bytes but ", dtype_name,
                    " x shape ", shape.dump(), " needs ", n_bytes);
    *out = std::move(e);
    return Status::ok();
}

}  // namespace

class SafetensorsParser {
public:
    static Result<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& path) {
        std::error_code ec;
        if (fs::is_directory(path, ec)) {
            const fs::path dir(path);
            if (fs::exists(dir / kIndexName, ec)) return open_index((dir / kIndexName).string());
            if (fs::exists(dir / kSingleName, ec)) return open_single((dir / kSingleName).string());
            return make_error(path, ": folder holds neither ", kSingleName, " nor ", kIndexName);
        }
        const std::string_view p(path);
        if (p.size() >= 5 && p.substr(p.size() - 5) == ".json") return open_index(path);
        return open_single(path);
    }

private:
    static Result<std::unique_ptr<SafetensorsCheckpoint>> open_single(const std::string& path) {
        std::unique_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
        MVLLM_TRY(add_shard(*ckpt, path, nullptr));
        return ckpt;
    }

    static Result<std::unique_ptr<SafetensorsCheckpoint>> open_index(const std::string& index_path) {
        MVLLM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> index_file, MappedFile::open(index_path));
        const auto* text = reinterpret_cast<const char*>(index_file->data());
        MVLLM_ASSIGN_OR_RETURN(json index, parse_json(text, text + index_file->size(), index_path + ": index"));
        const auto wm = index.is_object() ? index.find("weight_map") : index.end();
        if (!index.is_object() || wm == index.end() || !wm->is_object())
            return make_error(index_path, ": index has no \"weight_map\" object");

        // tensor -> shard name, and the shards in sorted order (std::map keeps it deterministic)
        std::map<std::string, std::vector<std::string>> shards;
        for (const auto& [name, shard] : wm->items()) {
            if (!shard.is_string())
                return make_error(index_path, ": weight_map entry for tensor '", name, "' is not a file name");
            const std::string file = shard.get<std::string>();
            if (!safe_relative_name(file))
                return make_error(index_path, ": shard name '", file, "' for tensor '", name,
                                  "' is not a relative path inside the checkpoint folder");
            shards[file].push_back(name);
        }
        if (shards.empty()) return make_error(index_path, ": weight_map is empty");

        std::unique_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
        const fs::path dir = fs::path(index_path).parent_path();
        for (const auto& [file, names] : shards) {
            const std::string shard_path = (dir / file).string();
            Status st = add_shard(*ckpt, shard_path, &names);
            if (!st) return st.with_context(index_path + ": shard '" + file + "'");
        }
        return ckpt;
    }

    // Maps and validates one shard and appends its tensors. `expected` (sharded checkpoints) lists
    // the tensors the index places in this shard; each must be present.
    static Status add_shard(SafetensorsCheckpoint& ckpt, const std::string& path,
                            const std::vector<std::string>* expected) {
        MVLLM_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::open(path));
        std::vector<Entry> entries;
        Status st = parse_header(*file, &entries);
        if (!st) return st.with_context(path);

        std::unordered_map<std::string_view, size_t> existing;
        for (size_t i = 0; i < ckpt.tensors_.size(); ++i) existing.emplace(ckpt.tensors_[i].name, i);
        for (const Entry& e : entries) {
            if (const auto it = existing.find(e.info.name); it != existing.end())
                return make_error(path, ": tensor '", e.info.name, "' is also in ", ckpt.tensors_[it->second].file);
        }
        if (expected != nullptr) {
            std::unordered_map<std::string_view, int> held;
            for (const Entry& e : entries) held.emplace(e.info.name, 0);
            for (const std::string& name : *expected)
                if (!held.count(name))
                    return make_error(path, ": the index names tensor '", name,
                                      "' in this shard but the shard does not hold it");
        }
        const uint8_t* data = file->data() + (file->size() - data_size_of(*file));
        for (Entry& e : entries) {
            e.info.view.data = const_cast<uint8_t*>(data + e.begin);  // read-only mapping
            e.info.file = path;
            ckpt.tensors_.push_back(std::move(e.info));
        }
        auto mapping = std::make_unique<SafetensorsCheckpoint::Mapping>();
        mapping->file = std::move(file);
        ckpt.mappings_.push_back(std::move(mapping));
        return Status::ok();
    }

    // Bytes after the header of an already validated file.
    static uint64_t data_size_of(const MappedFile& file) {
        uint64_t n = 0;
        std::memcpy(&n, file.data(), 8);
        return file.size() - 8 - n;
    }

    static Status parse_header(const MappedFile& file, std::vector<Entry>* out) {
        if (file.size() < 8)
            return make_error("truncated file: ", file.size(), " bytes cannot hold the 8-byte header length");
        uint64_t header_len = 0;
        std::memcpy(&header_len, file.data(), 8);
        if (header_len > file.size() - 8)
            return make_error("bad header length ", header_len, ": exceeds the ", file.size() - 8,
                              " bytes after the length field");
        const auto* text = reinterpret_cast<const char*>(file.data() + 8);
        MVLLM_ASSIGN_OR_RETURN(json header, parse_json(text, text + header_len, "header"));
        if (!header.is_object()) return make_error("header JSON is not an object");
        const uint64_t data_size = file.size() - 8 - header_len;

        std::vector<Entry> entries;
        entries.reserve(header.size());
        for (const auto& [name, value] : header.items()) {
            if (name == kMetadataKey) continue;
            Entry e;
            MVLLM_TRY(parse_entry(name, value, data_size, &e));
            entries.push_back(std::move(e));
        }
        // File order, and no two non-empty tensors may share bytes.
        std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
            return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
        });
        const Entry* prev = nullptr;
        for (const Entry& e : entries) {
            if (e.begin == e.end) continue;
            if (prev != nullptr && prev->end > e.begin)
                return make_error("tensors '", prev->info.name, "' [", prev->begin, ", ", prev->end, ") and '",
                                  e.info.name, "' [", e.begin, ", ", e.end, ") overlap");
            prev = &e;
        }
        *out = std::move(entries);
        return Status::ok();
    }
};

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open(const std::string& path) {
    return SafetensorsParser::open(path);
}

SafetensorsCheckpoint::~SafetensorsCheckpoint() = default;

const SafetensorInfo* SafetensorsCheckpoint::find(std::string_view name) const {
    for (const SafetensorInfo& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

}  // namespace mvllm
