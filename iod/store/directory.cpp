#include "directory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "errors.hpp"
#include "fd.hpp"
#include "sys.hpp"

namespace iofwd::store {

// The directories under the root whose own entry this process has made
// durable, so that a commit fsyncs the directories above its object once,
// not every time. Shared by the backend and its writers (flusher threads).
struct durable_dirs {
    explicit durable_dirs(std::string r) : root(std::move(r)) {}

    // Makes `dir`'s entries durable, and every directory above it up to the
    // root that is not known to be.
    std::error_code sync(const std::string& dir);
    void forget(const std::string& dir);

    const std::string root;

private:
    std::mutex mutex_;
    std::set<std::string> known_;
};

namespace {

std::string parent_of(const std::string& path)
{
    const auto slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::error_code fsync_dir(const std::string& dir)
{
    unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd)
        return last_system_error();
    if (sys::fsync(fd.get()) != 0)
        return last_system_error();
    return {};
}

// mkdir -p. `sync`: every directory it creates is made durable in its parent
// at once; without it the caller makes them durable later (a commit does, see
// directory_backend::dirs).
std::error_code make_dirs(const std::string& dir, bool sync)
{
    struct stat st {};
    if (::stat(dir.c_str(), &st) == 0)
        return S_ISDIR(st.st_mode) ? std::error_code{}
                                   : std::error_code(ENOTDIR, std::system_category());
    const std::string parent = parent_of(dir);
    if (parent != dir && !parent.empty())
        if (auto ec = make_dirs(parent, sync))
            return ec;
    if (::mkdir(dir.c_str(), 0755) != 0) {
        if (errno == EEXIST)
            return {};
        return last_system_error();
    }
    return sync ? fsync_dir(parent) : std::error_code{};
}

std::atomic<std::uint64_t> temp_counter{0};

constexpr std::uint64_t direct_align = 4096;

class file_writer final : public object_writer {
public:
    file_writer(unique_fd fd, unique_fd direct, std::string temp, std::string final_path,
                std::uint64_t size, std::shared_ptr<durable_dirs> dirs)
        : fd_(std::move(fd)), direct_(std::move(direct)), temp_(std::move(temp)),
          final_(std::move(final_path)), size_(size), dirs_(std::move(dirs))
    {
    }
    ~file_writer() override
    {
        if (!committed_)
            ::unlink(temp_.c_str());
    }

    std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) override
    {
        if (sys::pwrite_all(fd_.get(), data.data(), data.size(), static_cast<off_t>(offset)) != 0)
            return last_system_error();
        return {};
    }

    // Staged chunks go to the disk without a copy into the page cache (which
    // costs a core's worth of memcpy at disk speed): whole 4 KiB blocks with
    // O_DIRECT, the last block padded from the slot and trimmed at commit.
    std::error_code write_staged(std::span<const std::byte> data, std::uint64_t offset,
                                 std::uint64_t capacity) override
    {
        const std::uint64_t padded = (data.size() + direct_align - 1) / direct_align * direct_align;
        if (!direct_ || offset % direct_align != 0 || padded > capacity ||
            reinterpret_cast<std::uintptr_t>(data.data()) % direct_align != 0)
            return write_at(data, offset);
        if (sys::pwrite_all(direct_.get(), data.data(), padded, static_cast<off_t>(offset)) != 0)
            return last_system_error();
        return {};
    }

    // Every change to the namespace comes first, every fsync after: on a
    // journalling file system the file's fsync then commits the rename and
    // the directories created for it in the same journal transaction, and
    // the directory fsyncs that POSIX asks for find nothing left to write.
    // A new name is taken with RENAME_NOREPLACE, so that if the fsync fails
    // the name is ours to take back. An existing name (two daemons writing
    // the same COMPLETE record) is replaced only by bytes already durable.
    std::error_code commit() override { return commit(false); }
    std::error_code commit_exclusive() override { return commit(true); }

private:
    std::error_code commit(bool exclusive)
    {
        direct_.reset();
        struct stat st {};
        if (::fstat(fd_.get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) > size_ &&
            ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0)
            return last_system_error();
        int rc = sys::rename(temp_.c_str(), final_.c_str(), false);
        if (rc != 0 && errno == EINVAL && exclusive) {
            // No RENAME_NOREPLACE here: link() takes a name just as atomically.
            rc = ::link(temp_.c_str(), final_.c_str());
            if (rc == 0)
                ::unlink(temp_.c_str());
        }
        if (rc == 0) {
            committed_ = true;
            std::error_code ec;
            if (sys::fsync(fd_.get()) != 0 || ::close(fd_.release()) != 0)
                ec = last_system_error();
            else
                ec = dirs_->sync(parent_of(final_));
            if (ec)
                ::unlink(final_.c_str());  // not durable: not there
            return ec;
        }
        if (exclusive && errno == EEXIST)
            return make_error_code(errc::exists);
        if (errno != EEXIST && errno != EINVAL)
            return last_system_error();
        if (sys::fsync(fd_.get()) != 0)
            return last_system_error();
        if (::close(fd_.release()) != 0)
            return last_system_error();
        if (sys::rename(temp_.c_str(), final_.c_str()) != 0)
            return last_system_error();
        committed_ = true;
        return dirs_->sync(parent_of(final_));
    }

    unique_fd fd_;
    unique_fd direct_;  // the same file opened O_DIRECT; empty where unsupported
    std::string temp_;
    std::string final_;
    std::uint64_t size_;
    std::shared_ptr<durable_dirs> dirs_;
    bool committed_ = false;
};

}  // namespace

std::error_code durable_dirs::sync(const std::string& dir)
{
    // The object's own directory always: its new entry.
    if (auto ec = fsync_dir(dir))
        return ec;
    // Then up to the root, each directory whose own entry is not known to
    // be durable yet (created by create() without a sync, or found on disk
    // and perhaps left unsynced by a daemon that crashed).
    for (std::string d = dir; d.size() > root.size() && d.starts_with(root);) {
        {
            std::lock_guard lock(mutex_);
            if (known_.contains(d))
                return {};
        }
        const std::string parent = parent_of(d);
        if (auto ec = fsync_dir(parent))
            return ec;
        std::lock_guard lock(mutex_);
        known_.insert(d);
        d = parent;
    }
    return {};
}

void durable_dirs::forget(const std::string& dir)
{
    std::lock_guard lock(mutex_);
    known_.erase(dir);
}

directory_backend::directory_backend(std::string root)
    : root_(std::move(root)), dirs_(std::make_shared<durable_dirs>(root_))
{
}

std::error_code directory_backend::open(std::string path, std::unique_ptr<backend>& out,
                                        std::string& why)
{
    if (path.empty()) {
        why = "empty store path";
        return make_error_code(errc::invalid_argument);
    }
    if (path[0] != '/') {
        char cwd[4096];
        if (!::getcwd(cwd, sizeof cwd)) {
            why = "cannot resolve the relative store path: getcwd failed";
            return last_system_error();
        }
        path = std::string(cwd) + "/" + path;
    }
    while (path.size() > 1 && path.back() == '/')
        path.pop_back();
    if (auto ec = make_dirs(path, true)) {
        why = fmt::format("cannot create store directory {}: {}", path, ec.message());
        return ec;
    }
    if (::access(path.c_str(), W_OK | X_OK) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("store directory {} is not writable: {}", path, ec.message());
        return ec;
    }
    out = std::make_unique<directory_backend>(path);
    return {};
}

std::string directory_backend::describe() const
{
    return "directory " + root_;
}

std::error_code directory_backend::create(const std::string& name, std::uint64_t size,
                                          std::unique_ptr<object_writer>& out)
{
    const std::string path = root_ + "/" + name;
    const std::string dir = parent_of(path);
    // Made durable by the commit, together with the object.
    if (auto ec = make_dirs(dir, false))
        return ec;
    const auto slash = path.rfind('/');
    const std::string temp = fmt::format("{}/.{}.tmp-{}-{}", dir, path.substr(slash + 1), getpid(),
                                         temp_counter.fetch_add(1));
    unique_fd fd(sys::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd)
        return last_system_error();
    if (size > 0) {
        // Reserve the space now: a full disk fails the write up front instead of
        // after part of the data was pulled.
        const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size));
        if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
            ::unlink(temp.c_str());
            return {rc, std::system_category()};
        }
    }
    // A second descriptor for direct writes of staged chunks; file systems
    // without O_DIRECT (tmpfs) simply do without it.
    unique_fd direct;
    if (size >= direct_align)
        direct.reset(::open(temp.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
    out = std::make_unique<file_writer>(std::move(fd), std::move(direct), temp, path, size, dirs_);
    return {};
}

std::error_code directory_backend::read(const std::string& name, std::uint64_t offset,
                                        std::span<std::byte> out)
{
    const std::string path = root_ + "/" + name;
    unique_fd fd(sys::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        return errno == ENOENT ? make_error_code(errc::not_found) : last_system_error();
    if (sys::pread_all(fd.get(), out.data(), out.size(), static_cast<off_t>(offset)) != 0)
        return last_system_error();
    return {};
}

std::error_code directory_backend::size(const std::string& name, std::uint64_t& out)
{
    struct stat st {};
    if (::stat((root_ + "/" + name).c_str(), &st) != 0)
        return errno == ENOENT ? make_error_code(errc::not_found) : last_system_error();
    out = static_cast<std::uint64_t>(st.st_size);
    return {};
}

std::error_code directory_backend::list(const std::string& prefix, std::vector<std::string>& out)
{
    std::string dir = root_ + "/" + prefix;
    while (dir.size() > 1 && dir.back() == '/')
        dir.pop_back();
    DIR* d = ::opendir(dir.c_str());
    if (!d)
        return errno == ENOENT ? make_error_code(errc::not_found) : last_system_error();
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
        if (e->d_name[0] == '.')
            continue;  // ".", "..", and uncommitted temporaries
        names.emplace_back(e->d_name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    out = std::move(names);
    return {};
}

std::error_code directory_backend::remove(const std::string& name)
{
    const std::string path = root_ + "/" + name;
    if (::unlink(path.c_str()) == 0)
        return fsync_dir(parent_of(path));
    if (errno == EISDIR || errno == EPERM) {
        if (::rmdir(path.c_str()) == 0) {
            dirs_->forget(path);
            return fsync_dir(parent_of(path));
        }
    }
    return errno == ENOENT ? make_error_code(errc::not_found) : last_system_error();
}

namespace {
class flock_claim final : public claim {
public:
    explicit flock_claim(unique_fd fd) : fd_(std::move(fd)) {}

private:
    unique_fd fd_;  // the flock goes with the descriptor
};
}  // namespace

std::error_code directory_backend::claim_job(const std::string& job, const std::string& node,
                                             std::unique_ptr<claim>& out)
{
    const std::string dir = root_ + "/" + job;
    if (auto ec = make_dirs(dir, true))
        return ec;
    const std::string path = dir + "/." + node + ".claim";
    unique_fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (!fd)
        return last_system_error();
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? make_error_code(errc::rank_in_use) : last_system_error();
    out = std::make_unique<flock_claim>(std::move(fd));
    return {};
}

}  // namespace iofwd::store
