// The directory store backend (directory.hpp). About 550 lines, one
// backend: the descriptor-based walk that trusts only the user's own files,
// the object writer with its durable commit, the claim, listing and removal
// all work on the same checks and are kept together.
#include "store/directory.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "errors.hpp"
#include "fd.hpp"
#include "store/layout.hpp"
#include "sys.hpp"

namespace iofwd::store {
namespace {

// geteuid() once: the store's walks ask for every directory and file.
uid_t me()
{
    static const uid_t uid = ::geteuid();
    return uid;
}

// What the store may hold: directories and files of the user running iofwd
// that nobody else can write to. Anything else (another user's, a symlink, a
// FIFO, a device, group- or world-writable) is refused, never followed into
// or opened for reading.
bool safe_dir(const struct stat& st)
{
    return S_ISDIR(st.st_mode) && st.st_uid == me() && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

bool safe_file(const struct stat& st)
{
    return S_ISREG(st.st_mode) && st.st_uid == me() && !(st.st_mode & (S_IWGRP | S_IWOTH));
}

std::string describe_unsafe(const struct stat& st, bool want_dir)
{
    if (st.st_uid != me())
        return fmt::format("belongs to uid {}, not to you (uid {})", st.st_uid, me());
    if (S_ISLNK(st.st_mode))
        return "is a symlink";
    if (want_dir && !S_ISDIR(st.st_mode))
        return "is not a directory";
    if (!want_dir && !S_ISREG(st.st_mode))
        return S_ISFIFO(st.st_mode)   ? "is a FIFO, not a regular file"
               : S_ISDIR(st.st_mode) ? "is a directory, not a regular file"
                                      : "is not a regular file";
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return fmt::format("is writable by others (mode {:o})", st.st_mode & 07777);
    return "is not safe to use";
}

// "job/v00000001/node.r0000" -> {"job", "v00000001", "node.r0000"}; empty
// when a component is empty, "." or ".." (names come from layout.hpp).
std::vector<std::string_view> components(std::string_view rel)
{
    std::vector<std::string_view> out;
    while (!rel.empty()) {
        const auto slash = rel.find('/');
        const auto c = rel.substr(0, slash);
        if (c.empty() || c == "." || c == "..")
            return {};
        out.push_back(c);
        rel = slash == std::string_view::npos ? std::string_view{} : rel.substr(slash + 1);
    }
    return out;
}

std::string parent_of(const std::string& rel)
{
    const auto slash = rel.rfind('/');
    return slash == std::string::npos ? std::string() : rel.substr(0, slash);
}

std::string base_of(const std::string& rel)
{
    const auto slash = rel.rfind('/');
    return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

std::error_code fsync_fd(int fd)
{
    if (sys::fsync(fd) != 0)
        return last_system_error();
    return {};
}

std::atomic<std::uint64_t> temp_counter{0};

// create()'s temporary names, ".<name>.tmp-<pid>-<n>", and the claim files
// claim_job() keeps, ".<node>.claim".
constexpr std::string_view temp_marker = ".tmp-";
constexpr std::string_view claim_suffix = ".claim";

bool is_temporary(std::string_view name)
{
    return name.size() > 1 && name[0] == '.' && name.find(temp_marker) != std::string_view::npos;
}

// The names in a directory opened as `fd` (taken over), "." and ".." left
// out, sorted; `types` gets whether each is a directory.
std::error_code read_names(unique_fd fd, std::vector<std::string>& out, std::vector<bool>* dirs)
{
    DIR* d = ::fdopendir(fd.get());
    if (!d)
        return last_system_error();
    fd.release();
    std::vector<std::pair<std::string, bool>> found;
    while (const dirent* e = ::readdir(d)) {
        const std::string_view n = e->d_name;
        if (n == "." || n == "..")
            continue;
        bool is_dir = e->d_type == DT_DIR;
        if (e->d_type == DT_UNKNOWN) {
            struct stat st {};
            is_dir = ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                     S_ISDIR(st.st_mode);
        }
        found.emplace_back(std::string(n), is_dir);
    }
    ::closedir(d);
    std::sort(found.begin(), found.end());
    out.clear();
    if (dirs)
        dirs->clear();
    for (auto& [n, is_dir] : found) {
        out.push_back(std::move(n));
        if (dirs)
            dirs->push_back(is_dir);
    }
    return {};
}

constexpr std::uint64_t direct_align = 4096;

}  // namespace

// The directories under the root whose own entry this process has made
// durable, so that a commit fsyncs the directories above its object once,
// not every time. Shared by the backend and its writers (flusher threads).
struct durable_dirs {
    explicit durable_dirs(const directory_backend& s) : store(s) {}

    // Makes `dir`'s entries durable (given open as `fd`), and every directory
    // above it up to the root that is not known to be.
    std::error_code sync(const std::string& dir, int fd);
    void forget(const std::string& dir);

    const directory_backend& store;

private:
    std::mutex mutex_;
    std::set<std::string> known_;
};

namespace {

class file_writer final : public object_writer {
public:
    file_writer(unique_fd dir, unique_fd fd, unique_fd direct, std::string dir_name,
                std::string temp, std::string final_name, std::uint64_t size,
                std::shared_ptr<durable_dirs> dirs)
        : dir_(std::move(dir)), fd_(std::move(fd)), direct_(std::move(direct)),
          dir_name_(std::move(dir_name)), temp_(std::move(temp)), final_(std::move(final_name)),
          size_(size), dirs_(std::move(dirs))
    {
    }
    ~file_writer() override
    {
        if (!committed_)
            ::unlinkat(dir_.get(), temp_.c_str(), 0);
    }

    std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) override
    {
        buffered_ = buffered_ || !data.empty();
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

    std::error_code commit() override { return commit(false); }
    std::error_code commit_exclusive() override { return commit(true); }

private:
    // Every change to the namespace comes first, every fsync after: on a
    // journalling file system the file's fsync then commits the rename and
    // the directories created for it in the same journal transaction, and
    // the directory fsyncs that POSIX asks for find nothing left to write.
    // That holds for bytes written with O_DIRECT, on the disk (and their
    // extents' conversion in the journal) before the rename. Bytes written
    // through the page cache are not: another thread's fsync can make the
    // rename durable before them, and a power cut then leaves the name
    // with zeros (blocks reserved and never written), which a restart's
    // journal replay would take for a committed part. So those are synced
    // before the name is taken.
    // A new name is taken with RENAME_NOREPLACE, so that if the fsync fails
    // the name is ours to take back. An existing name (two daemons writing
    // the same COMPLETE record) is replaced only by bytes already durable,
    // and only when `exclusive` is false.
    std::error_code commit(bool exclusive)
    {
        direct_.reset();
        struct stat st {};
        if (::fstat(fd_.get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) > size_ &&
            ::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0)
            return last_system_error();
        if (buffered_ && sys::fsync(fd_.get()) != 0)
            return last_system_error();
        int rc = sys::renameat(dir_.get(), temp_.c_str(), final_.c_str(), false);
        if (rc != 0 && errno == EINVAL && exclusive) {
            // No RENAME_NOREPLACE here: link() takes a name just as atomically.
            rc = ::linkat(dir_.get(), temp_.c_str(), dir_.get(), final_.c_str(), 0);
            if (rc == 0)
                ::unlinkat(dir_.get(), temp_.c_str(), 0);
        }
        if (rc == 0) {
            committed_ = true;
            std::error_code ec;
            // (Synced before the rename if buffered: the directory's fsync
            // then makes the name durable.)
            if ((!buffered_ && sys::fsync(fd_.get()) != 0) || ::close(fd_.release()) != 0)
                ec = last_system_error();
            else
                ec = dirs_->sync(dir_name_, dir_.get());
            if (ec)
                ::unlinkat(dir_.get(), final_.c_str(), 0);  // not durable: not there
            return ec;
        }
        if (exclusive && errno == EEXIST)
            return make_error_code(errc::exists);
        if (errno != EEXIST && errno != EINVAL)
            return last_system_error();
        if (!buffered_ && sys::fsync(fd_.get()) != 0)
            return last_system_error();
        if (::close(fd_.release()) != 0)
            return last_system_error();
        if (sys::renameat(dir_.get(), temp_.c_str(), final_.c_str()) != 0)
            return last_system_error();
        committed_ = true;
        return dirs_->sync(dir_name_, dir_.get());
    }

    unique_fd dir_;     // the directory the object is in
    unique_fd fd_;
    unique_fd direct_;  // the same file opened O_DIRECT; empty where unsupported
    std::string dir_name_;  // that directory under the root, for durable_dirs
    std::string temp_;      // names inside dir_
    std::string final_;
    std::uint64_t size_;
    std::shared_ptr<durable_dirs> dirs_;
    bool committed_ = false;
    bool buffered_ = false;  // some bytes went through the page cache (write_at)
};

}  // namespace

std::error_code durable_dirs::sync(const std::string& dir, int fd)
{
    // The object's own directory always: its new entry.
    if (auto ec = fsync_fd(fd))
        return ec;
    // Then up to the root, each directory whose own entry is not known to
    // be durable yet (created by create() without a sync, or found on disk
    // and perhaps left unsynced by a daemon that crashed).
    for (std::string d = dir; !d.empty();) {
        {
            std::lock_guard lock(mutex_);
            if (known_.contains(d))
                return {};
        }
        const std::string parent = parent_of(d);
        unique_fd pfd;
        if (auto ec = store.open_dir(parent, false, pfd))
            return ec;
        if (auto ec = fsync_fd(pfd.get()))
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

directory_backend::directory_backend(std::string root, unique_fd root_fd, bool group)
    : root_(std::move(root)), root_fd_(std::move(root_fd)), group_(group),
      dirs_(std::make_shared<durable_dirs>(*this))
{
}

directory_backend::~directory_backend() = default;

std::error_code directory_backend::open(std::string path, const open_options& opts,
                                        std::unique_ptr<backend>& out, std::string& why)
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
    const mode_t mode = opts.group_readable ? 0750 : 0700;
    // The root's path is the user's to choose (it may lead through symlinks
    // of theirs); what is missing of it is created private.
    for (std::size_t at = 1; at != std::string::npos;) {
        at = path.find('/', at + 1);
        const std::string prefix = path.substr(0, at);
        if (::mkdir(prefix.c_str(), mode) == 0) {
            unique_fd parent(::open(prefix.substr(0, prefix.rfind('/')).c_str(),
                                    O_RDONLY | O_DIRECTORY | O_CLOEXEC));
            if (parent)
                sys::fsync(parent.get());  // the new directory's entry
        } else if (errno != EEXIST) {
            const auto ec = last_system_error();
            why = fmt::format("cannot create store directory {}: {}", prefix, ec.message());
            return ec;
        }
    }
    unique_fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) {
        const auto ec = last_system_error();
        why = fmt::format("cannot open store directory {}: {}", path, ec.message());
        return ec;
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !safe_dir(st)) {
        why = fmt::format("store directory {} {}: anyone who can write to it could plant or "
                          "replace checkpoints; use a directory of your own that others cannot "
                          "write to (e.g. {}/$USER)",
                          path, describe_unsafe(st, true), path);
        return make_error_code(errc::unsafe_path);
    }
    if (::faccessat(fd.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) {
        const auto ec = last_system_error();
        why = fmt::format("store directory {} is not writable: {}", path, ec.message());
        return ec;
    }
    out = std::unique_ptr<backend>(new directory_backend(path, std::move(fd), opts.group_readable));
    return {};
}

std::string directory_backend::describe() const
{
    return "directory " + root_;
}

std::error_code directory_backend::open_dir(const std::string& rel, bool create,
                                            unique_fd& out) const
{
    const auto parts = components(rel);
    if (parts.empty() && !rel.empty())
        return make_error_code(errc::invalid_argument);
    unique_fd cur(::fcntl(root_fd_.get(), F_DUPFD_CLOEXEC, 0));
    if (!cur)
        return last_system_error();
    std::string path;  // under the root, so far
    for (const auto part : parts) {
        const std::string name(part);
        path += (path.empty() ? "" : "/") + name;
        unique_fd next(
            ::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!next && errno == ENOENT && create) {
            // Made durable later, by the commit of what goes into it
            // (durable_dirs), together with the object. Made anew, its
            // entry is not durable, whatever this process knew of a
            // directory of that name another (`iofwd rm`) removed since.
            if (::mkdirat(cur.get(), name.c_str(), group_ ? 0750 : 0700) == 0)
                dirs_->forget(path);
            else if (errno != EEXIST)
                return last_system_error();
            next.reset(::openat(cur.get(), name.c_str(),
                                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        }
        if (!next) {
            if (errno == ENOENT)
                return make_error_code(errc::not_found);
            if (errno == ELOOP || errno == ENOTDIR)
                return make_error_code(errc::unsafe_path);
            return last_system_error();
        }
        struct stat st {};
        if (::fstat(next.get(), &st) != 0)
            return last_system_error();
        if (!safe_dir(st))
            return make_error_code(errc::unsafe_path);
        cur = std::move(next);
    }
    out = std::move(cur);
    return {};
}

std::error_code directory_backend::open_object(const std::string& name, unique_fd& dir,
                                               unique_fd& out) const
{
    if (auto ec = open_dir(parent_of(name), false, dir))
        return ec;
    // O_NONBLOCK: a FIFO planted under an object's name must not block the
    // open (it is refused just after).
    unique_fd fd(sys::openat(dir.get(), base_of(name).c_str(),
                             O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT)
            return make_error_code(errc::not_found);
        if (errno == ELOOP)
            return make_error_code(errc::unsafe_path);
        return last_system_error();
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return last_system_error();
    if (!safe_file(st))
        return make_error_code(errc::unsafe_path);
    out = std::move(fd);
    return {};
}

std::string directory_backend::explain(const std::string& name) const
{
    // Walks the name again, saying where it stops being safe.
    std::string path = root_;
    unique_fd cur(::fcntl(root_fd_.get(), F_DUPFD_CLOEXEC, 0));
    const auto parts = components(name);
    for (std::size_t i = 0; i < parts.size(); ++i) {
        const std::string part(parts[i]);
        path += "/" + part;
        const bool last = i + 1 == parts.size();
        struct stat st {};
        if (::fstatat(cur.get(), part.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
            return fmt::format("{}: {}", path, std::strerror(errno));
        const bool want_dir = !last || S_ISDIR(st.st_mode);
        if (want_dir ? !safe_dir(st) : !safe_file(st))
            return fmt::format("{} {}", path, describe_unsafe(st, want_dir));
        // Last, as the one check left: the node files (claims, journals)
        // must have one link, though a tally's arrivals are links.
        if (last && !want_dir && st.st_nlink != 1)
            return fmt::format("{} has {} hard links (another name of it may be anywhere on its "
                               "file system)",
                               path, st.st_nlink);
        if (!last)
            cur.reset(::openat(cur.get(), part.c_str(),
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    }
    return {};
}

std::error_code directory_backend::create(const std::string& name, std::uint64_t size,
                                          std::unique_ptr<object_writer>& out)
{
    const std::string dir_name = parent_of(name);
    const std::string base = base_of(name);
    unique_fd dir;
    if (auto ec = open_dir(dir_name, true, dir))
        return ec;
    const std::string temp =
        fmt::format(".{}.tmp-{}-{}", base, getpid(), temp_counter.fetch_add(1));
    unique_fd fd(sys::openat(dir.get(), temp.c_str(),
                             O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                             group_ ? 0640 : 0600));
    if (!fd)
        return last_system_error();
    if (size > 0) {
        // Reserve the space now: a full disk fails the write up front instead of
        // after part of the data was pulled.
        const int rc = sys::posix_fallocate(fd.get(), 0, static_cast<off_t>(size));
        if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
            ::unlinkat(dir.get(), temp.c_str(), 0);
            return {rc, std::system_category()};
        }
    }
    // A second descriptor for direct writes of staged chunks; file systems
    // without O_DIRECT (tmpfs) simply do without it.
    unique_fd direct;
    if (size >= direct_align)
        direct.reset(::openat(dir.get(), temp.c_str(), O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC));
    out = std::make_unique<file_writer>(std::move(dir), std::move(fd), std::move(direct), dir_name,
                                        temp, base, size, dirs_);
    return {};
}

std::error_code directory_backend::read(const std::string& name, std::uint64_t offset,
                                        std::span<std::byte> out)
{
    unique_fd dir, fd;
    if (auto ec = open_object(name, dir, fd))
        return ec;
    if (sys::pread_all(fd.get(), out.data(), out.size(), static_cast<off_t>(offset)) != 0)
        return last_system_error();
    return {};
}

std::error_code directory_backend::entries(const std::string& rel, std::vector<std::string>& out,
                                           std::vector<bool>* dirs) const
{
    unique_fd fd;
    if (auto ec = open_dir(rel, false, fd))
        return ec;
    return read_names(std::move(fd), out, dirs);
}

std::error_code directory_backend::stat_name(const std::string& name, struct stat& out) const
{
    unique_fd dir;
    if (auto ec = open_dir(parent_of(name), false, dir))
        return ec;
    if (::fstatat(dir.get(), base_of(name).c_str(), &out, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? make_error_code(errc::not_found) : last_system_error();
    return {};
}

std::error_code directory_backend::size(const std::string& name, std::uint64_t& out)
{
    struct stat st {};
    if (auto ec = stat_name(name, st))
        return ec;
    if (!safe_file(st))
        return make_error_code(errc::unsafe_path);
    out = static_cast<std::uint64_t>(st.st_size);
    return {};
}

std::error_code directory_backend::list(const std::string& prefix, std::vector<std::string>& out)
{
    std::string rel = prefix;
    while (!rel.empty() && rel.back() == '/')
        rel.pop_back();
    std::vector<std::string> names;
    if (auto ec = entries(rel, names, nullptr))
        return ec;
    // Hidden names are uncommitted temporaries and claim files.
    std::erase_if(names, [](const std::string& n) { return n[0] == '.'; });
    out = std::move(names);
    return {};
}

std::error_code directory_backend::modified(const std::string& name, std::int64_t& out)
{
    struct stat st {};
    if (auto ec = stat_name(name, st))
        return ec;
    out = static_cast<std::int64_t>(st.st_mtim.tv_sec);
    return {};
}

std::error_code directory_backend::leftovers(const std::string& dir, std::vector<std::string>& out)
{
    // The layout is two levels deep under a job (versions, runs): a walk
    // that far, never following anything that is not a safe directory.
    std::vector<std::string> found;
    std::vector<std::string> todo{dir};
    while (!todo.empty()) {
        const std::string rel = std::move(todo.back());
        todo.pop_back();
        std::vector<std::string> names;
        std::vector<bool> dirs;
        if (auto ec = entries(rel, names, &dirs)) {
            if (ec == errc::unsafe_path && rel != dir)
                continue;  // not iofwd's: neither walked nor reported here
            return ec;
        }
        const std::string prefix = rel.empty() ? std::string() : rel + "/";
        for (std::size_t i = 0; i < names.size(); ++i) {
            if (is_temporary(names[i]) && !dirs[i])
                found.push_back(prefix + names[i]);
            else if (dirs[i] && names[i][0] != '.' &&
                     std::count(rel.begin(), rel.end(), '/') < 2)
                todo.push_back(prefix + names[i]);
        }
    }
    std::sort(found.begin(), found.end());
    out = std::move(found);
    return {};
}

std::error_code directory_backend::remove_leftover(const std::string& name)
{
    if (!is_temporary(base_of(name)))
        return make_error_code(errc::invalid_argument);
    return remove(name);
}

std::error_code directory_backend::remove(const std::string& name)
{
    return remove_entry(name, true);
}

std::error_code directory_backend::remove_lazily(const std::string& name)
{
    return remove_entry(name, false);
}

std::error_code directory_backend::remove_entry(const std::string& name, bool sync)
{
    const std::string dir_name = parent_of(name);
    const std::string base = base_of(name);
    unique_fd dir;
    if (auto ec = open_dir(dir_name, false, dir))
        return ec;
    // A name already gone may be gone only in memory: a removal whose fsync
    // failed, or that a crash interrupted. remove() makes that durable too
    // before it says not_found, so that what follows it (a version's
    // objects after its COMPLETE) never goes before it.
    const auto gone = [&] {
        if (sync)
            if (auto ec = fsync_fd(dir.get()))
                return ec;
        return make_error_code(errc::not_found);
    };
    struct stat st {};
    if (::fstatat(dir.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return errno == ENOENT ? gone() : last_system_error();
    // Only what iofwd made is removed (a stranger's file stays, and says so).
    if (st.st_uid != me())
        return make_error_code(errc::unsafe_path);
    const bool is_dir = S_ISDIR(st.st_mode);
    if (::unlinkat(dir.get(), base.c_str(), is_dir ? AT_REMOVEDIR : 0) != 0)
        return errno == ENOENT ? gone() : last_system_error();
    if (is_dir)
        dirs_->forget(name);
    return sync ? fsync_fd(dir.get()) : std::error_code();
}

namespace {

// A tally's directory: "job/v00000012/ARRIVED" -> "job/v00000012/.ARRIVED".
std::string tally_dir(const std::string& tally)
{
    const std::string parent = parent_of(tally);
    return (parent.empty() ? std::string() : parent + "/") + "." + base_of(tally);
}

constexpr const char* tally_count = ".count";
constexpr const char* tally_keys = ".keys";

// The counted files of `counted`: itself, then "<counted>.1" and on, each
// taken once the one before has as many links as its file system allows
// (65,000 on ext4: a bucket of 1,000 nodes' packs of one version each).
std::string counted_file(const std::string& counted, unsigned i)
{
    return i == 0 ? counted : fmt::format("{}.{}", counted, i);
}
// Enough for 66 million arrivals at ext4's limit; a bound, so that a file
// system that fails every link with EMLINK ends in an error, not a loop.
constexpr unsigned max_counted_files = 1024;

// Opens counted file `name` in `dir`, made by whoever comes first (nobody
// else can write to the directory, open_dir checked it, so the name stays
// that file); not_found when it is not there and `create` is false.
std::error_code open_counted(int dir, const std::string& name, bool create, bool group,
                             unique_fd& fd, struct stat& st)
{
    fd.reset(::openat(dir, name.c_str(),
                      O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (create ? O_CREAT : 0),
                      group ? 0640 : 0600));
    if (!fd) {
        if (errno == ENOENT && !create)
            return make_error_code(errc::not_found);
        // A link or a directory under the name: not a count anyone made.
        return errno == ELOOP || errno == EISDIR ? make_error_code(errc::unsafe_path)
                                                 : last_system_error();
    }
    if (::fstat(fd.get(), &st) != 0)
        return last_system_error();
    if (!safe_file(st))
        return make_error_code(errc::unsafe_path);
    return {};
}

// Links `link` in `dir` to a counted file of `counted` and gives in `count`
// the links to them all other than their own names just after: every
// arrival before this one, and perhaps some after.
std::error_code count_in(int dir, const std::string& counted, const std::string& link, bool group,
                         std::uint64_t& count)
{
    bool again = false;  // arrived before (a retry)
    for (unsigned i = 0;; ++i) {
        if (i == max_counted_files)
            return make_error_code(std::errc::too_many_links);
        unique_fd fd;
        struct stat st {};
        if (auto ec = open_counted(dir, counted_file(counted, i), true, group, fd, st))
            return ec;
        if (sys::linkat(dir, counted_file(counted, i).c_str(), link.c_str()) == 0)
            break;
        // Full: the next. A file with no link but its name is not full: a
        // file system that takes no more (hard links refused) ends here.
        if (errno == EMLINK && st.st_nlink > 1)
            continue;
        if (errno != EEXIST)
            return last_system_error();
        again = true;
        break;
    }
    // After the link: the sum includes every link made before it. A retry's
    // name must be a link to one of them, or it is not ours to count.
    struct stat mine {};
    if (again && ::fstatat(dir, link.c_str(), &mine, AT_SYMLINK_NOFOLLOW) != 0)
        return last_system_error();
    bool found = false;
    std::uint64_t sum = 0;
    for (unsigned i = 0; i < max_counted_files; ++i) {
        unique_fd fd;
        struct stat st {};
        if (auto ec = open_counted(dir, counted_file(counted, i), false, group, fd, st)) {
            if (ec == errc::not_found)
                break;
            return ec;
        }
        sum += st.st_nlink > 0 ? static_cast<std::uint64_t>(st.st_nlink) - 1 : 0;
        found = found || (mine.st_ino == st.st_ino && mine.st_dev == st.st_dev);
    }
    if (again && !found)
        return make_error_code(errc::unsafe_path);
    count = sum;
    return {};
}

}  // namespace

std::error_code directory_backend::arrive(const std::string& tally, const std::string& member,
                                          const std::string& note, std::uint64_t& count)
{
    // The link's name is the arrival, note and all.
    std::string link;
    if (!format_arrival(member, note, link) || components(tally).empty())
        return make_error_code(errc::invalid_argument);
    unique_fd dir;
    if (auto ec = open_dir(tally_dir(tally), true, dir))
        return ec;
    std::uint64_t n = 0;
    if (auto ec = count_in(dir.get(), tally_count, link, group_, n))
        return ec;
    // The arrival is durable before it is counted on: a node's arrival lost
    // to a power cut of the store's host would leave the count short for
    // good, and the version without its COMPLETE.
    if (auto ec = dirs_->sync(tally_dir(tally), dir.get()))
        return ec;
    count = n;
    return {};
}

std::error_code directory_backend::arrive_keyed(const std::string& tally,
                                                const std::string& member,
                                                const std::string& note, std::uint64_t first,
                                                std::uint64_t last, std::uint64_t& most)
{
    std::string link;
    if (!format_arrival(member, note, link) || components(tally).empty() ||
        !keys_taken(first, last))
        return make_error_code(errc::invalid_argument);
    const std::string rel = tally_dir(tally), keys_rel = rel + "/" + tally_keys;
    unique_fd dir, keys;
    if (auto ec = open_dir(rel, true, dir))
        return ec;
    if (auto ec = open_dir(keys_rel, true, keys))
        return ec;
    // The arrival first, then its keys: whoever sees a key's count reach N
    // reads the arrivals of all N.
    std::uint64_t all = 0, keyed = 0, n = 0;
    if (auto ec = count_in(dir.get(), tally_count, link, group_, all))
        return ec;
    if (auto ec = count_in(keys.get(), "keyed", "keyed=" + member, group_, keyed))
        return ec;
    // Arrivals counted under no key (arrive(), or an iofwd from before the
    // keys) may hold any version: with one, the whole count is the bound.
    std::uint64_t highest = all > keyed ? all : 0;
    for (std::uint64_t k = first;; ++k) {
        if (auto ec = count_in(keys.get(), fmt::format("c{}", k), fmt::format("{}={}", k, member),
                               group_, n))
            return ec;
        highest = std::max(highest, n);
        if (k == last)
            break;
    }
    // Durable before it is counted on, keys and all (a key short for good
    // would keep whoever arrives last from ever reading), in the order made.
    if (auto ec = dirs_->sync(rel, dir.get()))
        return ec;
    if (auto ec = dirs_->sync(keys_rel, keys.get()))
        return ec;
    most = highest;
    return {};
}

std::error_code directory_backend::arrivals(const std::string& tally,
                                            std::vector<arrival>& out)
{
    if (components(tally).empty())
        return make_error_code(errc::invalid_argument);
    std::vector<std::string> names;
    if (auto ec = entries(tally_dir(tally), names, nullptr))
        return ec;
    std::vector<arrival> found;
    for (const auto& n : names) {
        if (n[0] == '.')
            continue;
        backend::arrival a;
        if (!parse_arrival(n, a))
            return make_error_code(errc::corrupt);
        found.push_back(std::move(a));
    }
    if (auto ec = fold_arrivals(found))
        return ec;
    out = std::move(found);
    return {};
}

std::error_code directory_backend::remove_arrivals(const std::string& tally)
{
    if (components(tally).empty())
        return make_error_code(errc::invalid_argument);
    const std::string rel = tally_dir(tally);
    // Its keys' directory first, then its own: each emptied, then removed.
    // No fsync: a tally half removed by a crash is removed again with its
    // version (backend.hpp).
    for (const auto& d : {rel + "/" + tally_keys, rel}) {
        unique_fd dir, listing;
        if (auto ec = open_dir(d, false, dir)) {
            if (ec == errc::not_found)
                continue;
            return ec;
        }
        listing.reset(::fcntl(dir.get(), F_DUPFD_CLOEXEC, 0));
        std::vector<std::string> names;
        if (!listing)
            return last_system_error();
        if (auto ec = read_names(std::move(listing), names, nullptr))
            return ec;
        for (const auto& n : names)
            if (n != tally_keys && ::unlinkat(dir.get(), n.c_str(), 0) != 0 && errno != ENOENT)
                return errno == EISDIR ? make_error_code(errc::unsafe_path) : last_system_error();
        if (auto ec = remove_entry(d, false); ec && ec != errc::not_found)
            return ec;
    }
    return {};
}

namespace {
class flock_claim final : public claim {
public:
    explicit flock_claim(unique_fd fd) : fd_(std::move(fd)) {}

private:
    unique_fd fd_;  // the flock goes with the descriptor
};
}  // namespace

std::error_code directory_backend::open_node_file(const std::string& job, const std::string& name,
                                                  unique_fd& out) const
{
    unique_fd dir;
    if (auto ec = open_dir(job, true, dir))
        return ec;
    unique_fd fd(::openat(dir.get(), name.c_str(),
                          O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                          group_ ? 0640 : 0600));
    if (!fd)
        return errno == ELOOP ? make_error_code(errc::unsafe_path) : last_system_error();
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !safe_file(st) || st.st_nlink != 1)
        return make_error_code(errc::unsafe_path);
    out = std::move(fd);
    return {};
}

std::error_code directory_backend::claim_job(const std::string& job, const std::string& node,
                                             std::unique_ptr<claim>& out)
{
    unique_fd fd;
    if (auto ec = open_node_file(job, "." + node + std::string(claim_suffix), fd))
        return ec;
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0)
        return errno == EWOULDBLOCK ? make_error_code(errc::rank_in_use) : last_system_error();
    out = std::make_unique<flock_claim>(std::move(fd));
    return {};
}

std::error_code directory_backend::open_journal(const std::string& job, const std::string& node,
                                                unique_fd& out)
{
    unique_fd fd;
    if (auto ec = open_node_file(job, base_of(journal_object(job, node)), fd))
        return ec;
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0)
        return last_system_error();
    if (st.st_size == 0) {
        // New (or never filled): its name durable before any record in it
        // is answered, as an object's is at its commit.
        unique_fd dir;
        if (auto ec = open_dir(job, false, dir))
            return ec;
        if (auto ec = dirs_->sync(job, dir.get()))
            return ec;
    }
    out = std::move(fd);
    return {};
}

std::error_code directory_backend::read_journal(const std::string& job, const std::string& node,
                                                unique_fd& out)
{
    unique_fd dir;
    if (auto ec = open_dir(job, false, dir))
        return ec;
    const std::string name = base_of(journal_object(job, node));
    unique_fd fd(::openat(dir.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd)
        return errno == ENOENT ? make_error_code(errc::not_found)
               : errno == ELOOP ? make_error_code(errc::unsafe_path)
                                : last_system_error();
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !safe_file(st) || st.st_nlink != 1)
        return make_error_code(errc::unsafe_path);
    out = std::move(fd);
    return {};
}

namespace {

// The nodes of the job directory's ".<node><suffix>" files.
std::vector<std::string> nodes_with(const std::vector<std::string>& names,
                                    std::string_view suffix)
{
    std::vector<std::string> nodes;
    for (const std::string_view n : names)
        if (n.size() > 1 + suffix.size() && n[0] == '.' && n.ends_with(suffix) &&
            !is_temporary(n))
            nodes.emplace_back(n.substr(1, n.size() - 1 - suffix.size()));
    return nodes;
}

}  // namespace

std::error_code directory_backend::claimants(const std::string& job, std::vector<std::string>& out)
{
    std::vector<std::string> names;
    if (auto ec = entries(job, names, nullptr))
        return ec;
    out = nodes_with(names, claim_suffix);
    return {};
}

std::error_code directory_backend::journal_nodes(const std::string& job,
                                                 std::vector<std::string>& out)
{
    std::vector<std::string> names;
    if (auto ec = entries(job, names, nullptr))
        return ec;
    out = nodes_with(names, journal_suffix);
    return {};
}

}  // namespace iofwd::store
