#include "files.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include <fmt/format.h>

#include "errors.hpp"
#include "sys.hpp"

namespace iofwd::iod {
namespace {

constexpr std::uint64_t direct_align = 4096;

// Writes a forwarded range straight into the file; nothing to commit (the
// file is the application's, durable at the next fsync). Whole aligned blocks
// go with O_DIRECT from the staging slot (no copy into the page cache: that
// copy was most of the daemon's CPU on the versioned path); the rest through
// the page cache. The kernel keeps the two coherent.
class file_range_writer final : public store::object_writer {
public:
    file_range_writer(std::shared_ptr<const forwarded_file::descriptors> fds, std::uint64_t base)
        : fds_(std::move(fds)), base_(base)
    {
    }
    std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) override
    {
        return buffered(data, base_ + offset);
    }
    std::error_code write_staged(std::span<const std::byte> data, std::uint64_t offset,
                                 std::uint64_t) override
    {
        const std::uint64_t at = base_ + offset;
        const std::uint64_t whole = data.size() / direct_align * direct_align;
        if (!fds_->direct || at % direct_align != 0 || whole == 0 ||
            reinterpret_cast<std::uintptr_t>(data.data()) % direct_align != 0)
            return buffered(data, at);
        if (sys::pwrite_all(fds_->direct.get(), data.data(), whole, static_cast<off_t>(at)) != 0)
            return last_system_error();
        return buffered(data.subspan(whole), at + whole);
    }
    std::error_code commit() override { return {}; }

private:
    std::error_code buffered(std::span<const std::byte> data, std::uint64_t at)
    {
        if (data.empty())
            return {};
        if (sys::pwrite_all(fds_->buffered.get(), data.data(), data.size(),
                            static_cast<off_t>(at)) != 0)
            return last_system_error();
        return {};
    }

    std::shared_ptr<const forwarded_file::descriptors> fds_;
    std::uint64_t base_;
};

}  // namespace

bool forwarded_file::overlaps(range r) const
{
    return std::any_of(ranges_.begin(), ranges_.end(),
                       [&](const range& o) { return r.begin < o.end && o.begin < r.end; });
}

void forwarded_file::submit(std::uint64_t offset, std::uint64_t length,
                            std::function<void()> start)
{
    const range r{offset, offset + length};
    // Behind anything already waiting too: waiting writes keep their order.
    if (overlaps(r) || !deferred_.empty()) {
        deferred_.push_back({r, std::move(start)});
        return;
    }
    ranges_.push_back(r);
    start();
}

void forwarded_file::finished(std::uint64_t offset, std::uint64_t length)
{
    const range r{offset, offset + length};
    const auto it = std::find_if(ranges_.begin(), ranges_.end(), [&](const range& o) {
        return o.begin == r.begin && o.end == r.end;
    });
    if (it != ranges_.end())
        ranges_.erase(it);
    run_ready();
}

void forwarded_file::run_ready()
{
    while (!deferred_.empty() && !overlaps(deferred_.front().r)) {
        auto w = std::move(deferred_.front());
        deferred_.pop_front();
        ranges_.push_back(w.r);
        w.start();
    }
    if (!idle())
        return;
    auto waiters = std::move(idle_waiters_);
    idle_waiters_.clear();
    for (auto& fn : waiters)
        fn();
}

void forwarded_file::when_idle(std::function<void()> fn)
{
    if (idle()) {
        fn();
        return;
    }
    idle_waiters_.push_back(std::move(fn));
}

std::unique_ptr<store::object_writer> forwarded_file::writer(std::uint64_t base) const
{
    return std::make_unique<file_range_writer>(fds_, base);
}

std::error_code forwarded_file::sync() const
{
    if (sys::fsync(fds_->buffered.get()) != 0)
        return last_system_error();
    return {};
}

std::error_code file_table::open(const std::string& path, std::shared_ptr<forwarded_file>& out,
                                 std::string& why)
{
    if (auto it = files_.find(path); it != files_.end()) {
        ++it->second->handles;
        out = it->second;
        return {};
    }
    unique_fd fd(sys::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) {
        const auto ec = last_system_error();
        why = fmt::format("the daemon cannot open {} for writing: {}", path, ec.message());
        return ec;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        why = fmt::format("{} is not a regular file; only regular files are forwarded", path);
        return make_error_code(errc::invalid_argument);
    }
    // Where the file system has no O_DIRECT (tmpfs), everything is buffered.
    unique_fd direct(::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
    auto f = std::make_shared<forwarded_file>(path, std::move(fd), std::move(direct));
    f->handles = 1;
    files_[path] = f;
    out = std::move(f);
    return {};
}

void file_table::release(const std::shared_ptr<forwarded_file>& f)
{
    if (f->handles > 0)
        --f->handles;
    if (f->handles > 0)
        return;
    // Forgotten once idle; the writers in flight hold the descriptor meanwhile.
    f->when_idle([this, f] {
        if (f->handles == 0)
            if (auto it = files_.find(f->path()); it != files_.end() && it->second == f)
                files_.erase(it);
    });
}

std::shared_ptr<forwarded_file> file_table::find(const std::string& path) const
{
    const auto it = files_.find(path);
    return it == files_.end() ? nullptr : it->second;
}

}  // namespace iofwd::iod
