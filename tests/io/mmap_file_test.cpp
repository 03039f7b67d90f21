// MappedFile: contents, empty files, missing paths and folders.
#include "io/mmap_file.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io_test_util.h"

namespace mvllm {
namespace {

TEST(MappedFile, MapsContents) {
    test::TempDir dir;
    const std::string path = dir.file("f.bin");
    const std::vector<uint8_t> bytes = test::pattern_bytes(10000, 3);
    test::write_file(path, bytes);
    auto r = MappedFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r.value()->path(), path);
    ASSERT_EQ(r.value()->size(), bytes.size());
    EXPECT_EQ(std::memcmp(r.value()->data(), bytes.data(), bytes.size()), 0);
}

TEST(MappedFile, EmptyFileMapsToNothing) {
    test::TempDir dir;
    const std::string path = dir.file("empty.bin");
    test::write_file(path, std::vector<uint8_t>{});
    auto r = MappedFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r.value()->size(), 0u);
    EXPECT_EQ(r.value()->data(), nullptr);
}

TEST(MappedFile, ErrorsNameThePath) {
    test::TempDir dir;
    auto missing = MappedFile::open(dir.file("missing.bin"));
    ASSERT_FALSE(missing.is_ok());
    EXPECT_NE(missing.status().message().find(dir.file("missing.bin")), std::string::npos);
    auto folder = MappedFile::open(dir.path());
    ASSERT_FALSE(folder.is_ok());
    EXPECT_NE(folder.status().message().find("not a regular file"), std::string::npos)
        << folder.status().message();
}

TEST(MappedFile, ReleaseHandsOverTheMapping) {
    test::TempDir dir;
    const std::string path = dir.file("f.bin");
    test::write_file(path, std::vector<uint8_t>{1, 2, 3});
    auto r = MappedFile::open(path);
    ASSERT_TRUE(r.is_ok());
    const size_t size = r.value()->size();
    void* addr = r.value()->release();
    EXPECT_EQ(r.value()->data(), nullptr);
    EXPECT_EQ(static_cast<const uint8_t*>(addr)[2], 3);
    unmap_region(addr, size);
}

}  // namespace
}  // namespace mvllm
