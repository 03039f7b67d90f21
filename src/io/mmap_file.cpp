#include "io/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mvllm {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error(path, ": cannot open: ", std::strerror(errno));
    struct stat st{};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        return make_error(path, ": cannot stat: ", std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return make_error(path, ": not a regular file");
    }
    std::unique_ptr<MappedFile> file(new MappedFile());
    file->path_ = path;
    file->size_ = static_cast<size_t>(st.st_size);
    if (file->size_ > 0) {
        void* addr = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (addr == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            return make_error(path, ": mmap of ", file->size_, " bytes failed: ", std::strerror(err));
        }
        file->addr_ = addr;
    }
    ::close(fd);  // the mapping keeps the file alive
    return file;
}

MappedFile::~MappedFile() { unmap_region(addr_, size_); }

void* MappedFile::release() {
    void* addr = addr_;
    addr_ = nullptr;
    size_ = 0;
    return addr;
}

void unmap_region(void* addr, size_t size) {
    if (addr != nullptr && size > 0) ::munmap(addr, size);
}

}  // namespace mvllm
