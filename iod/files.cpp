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
// Pieces smaller than this go through the page cache even when aligned: each
// O_DIRECT write waits for the device, and a strided view's thousands of
// small runs would each wait (a 256 MiB subarray write of 32 KiB runs took
// 3x MPI-IO's time until durable); buffered, the fsync writes them merged.
constexpr std::uint64_t direct_min = 1 << 20;

// Writes a forwarded write straight into the file; nothing to commit (the
// file is the application's, durable at the next fsync). The write's stream
// of bytes goes to its runs in order. Whole aligned blocks of a large piece
// go with O_DIRECT from the staging slot (no copy into the page cache: that copy was most of
// the daemon's CPU on the versioned path); the rest through the page cache.
// The kernel keeps the two coherent.
class file_runs_writer final : public store::object_writer {
public:
    file_runs_writer(std::shared_ptr<const forwarded_file::descriptors> fds,
                     forwarded_file::runs runs)
        : fds_(std::move(fds)), runs_(std::move(runs))
    {
        starts_.reserve(runs_->size());
        std::uint64_t at = 0;
        for (const auto& r : *runs_) {
            starts_.push_back(at);
            at += r.length;
        }
    }
    std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) override
    {
        return scatter(data, offset, false);
    }
    std::error_code write_staged(std::span<const std::byte> data, std::uint64_t offset,
                                 std::uint64_t) override
    {
        return scatter(data, offset, true);
    }
    // Nothing keeps a checksum of a forwarded file's bytes (the file is the
    // application's): reading them once more for one would only take CPU
    // from the pulls the rank waits for (20 ms per 256 MiB here).
    std::error_code write_checksummed(std::span<const std::byte> data, std::uint64_t offset,
                                      std::uint64_t, std::uint32_t& crc) override
    {
        crc = 0;
        return scatter(data, offset, true);
    }
    std::error_code commit() override { return {}; }

private:
    // Stream bytes [offset, offset + data.size()) to their runs.
    std::error_code scatter(std::span<const std::byte> data, std::uint64_t offset, bool staged)
    {
        // The run that holds stream byte `offset`: the last one starting at or before it.
        auto i = static_cast<std::size_t>(
            std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin());
        i = i == 0 ? 0 : i - 1;
        while (!data.empty()) {
            if (i >= runs_->size())
                return make_error_code(errc::invalid_argument);  // past the runs: a bug
            const auto& r = (*runs_)[i];
            const std::uint64_t within = offset - starts_[i];
            if (within >= r.length)
                return make_error_code(errc::invalid_argument);  // past the runs: a bug
            const std::uint64_t n = std::min<std::uint64_t>(data.size(), r.length - within);
            const auto piece = data.first(static_cast<std::size_t>(n));
            if (auto ec = staged ? direct(piece, r.offset + within) : buffered(piece, r.offset + within))
                return ec;
            data = data.subspan(static_cast<std::size_t>(n));
            offset += n;
            ++i;
        }
        return {};
    }
    std::error_code direct(std::span<const std::byte> data, std::uint64_t at)
    {
        const std::uint64_t whole = data.size() / direct_align * direct_align;
        if (!fds_->direct || at % direct_align != 0 || whole < direct_min ||
            reinterpret_cast<std::uintptr_t>(data.data()) % direct_align != 0)
            return buffered(data, at);
        if (sys::pwrite_all(fds_->direct.get(), data.data(), whole, static_cast<off_t>(at)) != 0)
            return last_system_error();
        return buffered(data.subspan(whole), at + whole);
    }
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
    forwarded_file::runs runs_;
    std::vector<std::uint64_t> starts_;  // stream offset of each run's first byte
};

// Whether two sorted, disjoint run lists share a byte.
bool share_a_byte(const std::vector<proto::file_run>& a, const std::vector<proto::file_run>& b)
{
    if (a.empty() || b.empty())
        return false;
    // Outside each other's span: no need to walk.
    if (a.back().offset + a.back().length <= b.front().offset ||
        b.back().offset + b.back().length <= a.front().offset)
        return false;
    std::size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        const auto a_end = a[i].offset + a[i].length;
        const auto b_end = b[j].offset + b[j].length;
        if (a[i].offset < b_end && b[j].offset < a_end)
            return true;
        (a_end <= b_end) ? ++i : ++j;
    }
    return false;
}

}  // namespace

bool forwarded_file::through_page_cache(const std::vector<proto::file_run>& r)
{
    return std::any_of(r.begin(), r.end(), [](const proto::file_run& run) {
        return run.length < direct_min || run.offset % direct_align != 0;
    });
}

forwarded_file::runs forwarded_file::one_run(std::uint64_t offset, std::uint64_t length)
{
    return std::make_shared<const std::vector<proto::file_run>>(
        std::vector<proto::file_run>{{offset, length}});
}

bool forwarded_file::overlaps(const runs& r) const
{
    return std::any_of(in_flight_.begin(), in_flight_.end(),
                       [&](const runs& o) { return share_a_byte(*r, *o); });
}

void forwarded_file::submit(runs r, std::function<void()> start)
{
    // Behind anything already waiting too: waiting writes keep their order.
    if (overlaps(r) || !deferred_.empty()) {
        deferred_.push_back({std::move(r), std::move(start)});
        return;
    }
    in_flight_.push_back(std::move(r));
    start();
}

void forwarded_file::finished(const runs& r)
{
    if (const auto it = std::find(in_flight_.begin(), in_flight_.end(), r); it != in_flight_.end())
        in_flight_.erase(it);
    run_ready();
}

void forwarded_file::run_ready()
{
    while (!deferred_.empty() && !overlaps(deferred_.front().r)) {
        auto w = std::move(deferred_.front());
        deferred_.pop_front();
        in_flight_.push_back(std::move(w.r));
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

std::unique_ptr<store::object_writer> forwarded_file::writer(runs r) const
{
    return std::make_unique<file_runs_writer>(fds_, std::move(r));
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
