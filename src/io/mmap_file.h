// A read-only memory mapping of a whole file (RAII). An empty file maps to {nullptr, 0}.
//
// Errors (missing file, not a regular file, mmap failure) are returned as Status naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace mvllm {

class MappedFile {
public:
    static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return path_; }
    const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
    size_t size() const { return size_; }

    // Gives up ownership of the mapping; the caller unmaps it with unmap_region(addr, size).
    void* release();

private:
    MappedFile() = default;
    std::string path_;
    void* addr_ = nullptr;
    size_t size_ = 0;
};

// Unmaps a region obtained from MappedFile::release(); a null address is ignored.
void unmap_region(void* addr, size_t size);

}  // namespace mvllm
