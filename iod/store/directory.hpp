#pragma once
// The directory backend: objects are files under a root directory (a local
// disk or a parallel file system mount). An object is written under a hidden
// temporary name; commit renames it to its final name, then fsyncs the file
// and the directories on its path (see file_writer::commit for the order).
#include <memory>
#include <string>
#include <system_error>

#include "backend.hpp"

namespace iofwd::store {

// Which directories above an object this process has made durable
// (directory.cpp).
struct durable_dirs;

class directory_backend final : public backend {
public:
    explicit directory_backend(std::string root);

    // Creates the root if missing and checks it is writable; a relative path
    // is taken from the current directory.
    static std::error_code open(std::string path, std::unique_ptr<backend>& out,
                                std::string& why);

    std::string describe() const override;
    std::string location() const override { return "dir:" + root_; }
    std::error_code create(const std::string& name, std::uint64_t size,
                           std::unique_ptr<object_writer>& out) override;
    std::error_code read(const std::string& name, std::uint64_t offset,
                         std::span<std::byte> out) override;
    std::error_code size(const std::string& name, std::uint64_t& out) override;
    std::error_code list(const std::string& prefix, std::vector<std::string>& out) override;
    std::error_code remove(const std::string& name) override;
    std::error_code claim_job(const std::string& job, const std::string& node,
                              std::unique_ptr<claim>& out) override;

    const std::string& root() const noexcept { return root_; }

private:
    std::string root_;
    std::shared_ptr<durable_dirs> dirs_;
};

}  // namespace iofwd::store
