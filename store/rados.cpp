// The Ceph RADOS store backend (rados.hpp). About 730 lines, one backend:
// pieces and heads, the listing index, the leased claim and the retries all
// speak librados and share its owners and helpers, so they stay together.
#include "store/rados.hpp"

#include <rados/librados.h>
#if IOFWD_RADOS_CXX
#include <rados/librados.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "procfs.hpp"
#include "rendezvous.hpp"
#include "unique_handle.hpp"

namespace iofwd::store {
namespace {

// Owners of librados's handles: each released exactly once, on every path.
using completion = unique_handle<rados_completion_t, release_with<rados_aio_release>>;
using write_op = unique_handle<rados_write_op_t, release_with<rados_release_write_op>>;
using read_op = unique_handle<rados_read_op_t, release_with<rados_release_read_op>>;
using omap_iter = unique_handle<rados_omap_iter_t, release_with<rados_omap_get_end>>;
using ioctx = unique_handle<rados_ioctx_t, release_with<rados_ioctx_destroy>>;
using cluster = unique_handle<rados_t, release_with<rados_shutdown>>;
#if IOFWD_RADOS_CXX
struct release_cxx_completion {
    void operator()(librados::AioCompletion* c) const noexcept { c->release(); }
};
using cxx_completion = unique_handle<librados::AioCompletion*, release_cxx_completion>;
#endif

// A new completion, or an empty one if librados could not make it.
completion new_completion()
{
    rados_completion_t c = nullptr;
    if (rados_aio_create_completion2(nullptr, nullptr, &c) < 0)
        return {};
    return completion(c);
}

constexpr std::uint64_t piece_size = 64ull << 20;
constexpr std::uint64_t max_write = 16ull << 20;  // per request, well under osd_max_write_size
constexpr int attempts = 4;                        // a request is tried this often ...
constexpr auto first_backoff = std::chrono::milliseconds(500);  // ... doubling the wait

std::error_code rados_error(int rc)
{
    return {rc < 0 ? -rc : rc, std::system_category()};
}

// Retries a RADOS call that failed for a reason that may pass (an OSD
// restarting, a timeout), with doubling waits; permanent errors return at once.
template <typename F>
int with_retries(F&& f)
{
    auto wait = first_backoff;
    int rc = 0;
    for (int i = 0; i < attempts; ++i) {
        rc = f();
        if (rc >= 0 || !(rc == -ETIMEDOUT || rc == -EAGAIN || rc == -EIO || rc == -ENOTCONN ||
                         rc == -ESHUTDOWN || rc == -ECONNREFUSED))
            return rc;
        std::this_thread::sleep_for(wait);
        wait *= 2;
    }
    return rc;
}

std::string piece_name(const std::string& name, const std::string& id, std::uint64_t n)
{
    return fmt::format("{}@{}.{}", name, id, n);
}

// Starts removing pieces [0, count) of a write, all at once; wait_all() waits
// for them. Best effort: a piece left behind is garbage no head points to.
std::vector<completion> remove_pieces(rados_ioctx_t io, const std::string& name,
                                      const std::string& id, std::uint64_t count)
{
    std::vector<completion> started;
    for (std::uint64_t n = 0; n < count; ++n) {
        auto c = new_completion();
        if (!c)
            break;
        if (rados_aio_remove(io, piece_name(name, id, n).c_str(), c.get()) >= 0)
            started.push_back(std::move(c));
    }
    return started;
}

void wait_all(std::vector<completion>& started)
{
    for (auto& c : started)
        rados_aio_wait_for_complete(c.get());
    started.clear();
}

struct head {
    std::uint64_t size = 0;
    std::string id;
    std::uint64_t pieces = 0;
};

std::string format_head(const head& h)
{
    return fmt::format("iofwd-rados 1\nsize {}\nid {}\npieces {}\n", h.size, h.id, h.pieces);
}

bool parse_head(const std::string& text, head& out)
{
    char id[128] = {};
    unsigned long long size = 0, pieces = 0;
    if (std::sscanf(text.c_str(), "iofwd-rados 1\nsize %llu\nid %127s\npieces %llu", &size, id,
                    &pieces) != 3)
        return false;
    out = head{size, id, pieces};
    return true;
}

// RADOS has no directories. Each "directory" of the layout has an index
// object, ".index/<dir>/", whose omap keys are the names directly in it; a
// name is added to its parents' indexes before its head is written (so a
// listed name without a head reads as absent, never the reverse) and taken
// out when it is removed. Listing is then one omap read, not a pool scan.
std::string index_of(const std::string& dir)
{
    return ".index/" + dir;
}

// Directories whose entry in their parent is known to exist (in this
// process): a commit then costs one omap write, for its own name.
class index_cache {
public:
    bool known(const std::string& dir)
    {
        std::lock_guard lock(mutex_);
        return dirs_.count(dir) > 0;
    }
    void add(const std::string& dir)
    {
        std::lock_guard lock(mutex_);
        dirs_.insert(dir);
    }
    void forget(const std::string& dir)
    {
        std::lock_guard lock(mutex_);
        dirs_.erase(dir);
    }

private:
    std::mutex mutex_;
    std::set<std::string> dirs_;
};

// The omap writes that list `name`, posted (all at once: different objects)
// by index_add_start and waited for by index_add_finish, so that the caller
// can do other round trips meanwhile.
struct index_update {
    struct entry {
        std::string dir, key;
        write_op op;
        completion done;
    };
    rados_ioctx_t io;
    index_cache& cache;
    std::vector<entry> entries;
};

// "a/b/c": "c" into .index/a/b/, and "b" into .index/a/ and "a" into
// .index/ unless already done.
index_update index_add_start(rados_ioctx_t io, index_cache& cache, const std::string& name)
{
    index_update u{io, cache, {}};
    std::string path = name;
    for (;;) {
        const auto slash = path.rfind('/');
        const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
        u.entries.push_back({dir, slash == std::string::npos ? path : path.substr(slash + 1)});
        if (slash == std::string::npos || cache.known(dir))
            break;
        path = path.substr(0, slash);
    }
    for (auto& e : u.entries) {
        e.op.reset(rados_create_write_op());
        const char* keys[] = {e.key.c_str()};
        const char* vals[] = {""};
        const size_t lens[] = {0};
        rados_write_op_omap_set(e.op.get(), keys, vals, lens, 1);
        e.done = new_completion();
        if (e.done && rados_aio_write_op_operate(e.op.get(), io, e.done.get(),
                                                 index_of(e.dir).c_str(), nullptr, 0) < 0)
            e.done.reset();
    }
    return u;
}

int index_add_finish(index_update& u)
{
    int first_error = 0;
    for (auto& e : u.entries) {
        int rc = -EIO;
        if (e.done) {
            rados_aio_wait_for_complete(e.done.get());
            rc = rados_aio_get_return_value(e.done.get());
            e.done.reset();
        }
        if (rc < 0)  // once more, synchronously with backoff
            rc = with_retries([&] {
                return rados_write_op_operate(e.op.get(), u.io, index_of(e.dir).c_str(), nullptr,
                                              0);
            });
        e.op.reset();
        if (rc < 0 && !first_error)
            first_error = rc;
    }
    if (first_error)
        return first_error;
    for (std::size_t i = 0; i + 1 < u.entries.size(); ++i)
        u.cache.add(u.entries[i].dir);
    return 0;
}

int index_remove(rados_ioctx_t io, const std::string& name)
{
    const auto slash = name.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : name.substr(0, slash + 1);
    const std::string key = slash == std::string::npos ? name : name.substr(slash + 1);
    const write_op op(rados_create_write_op());
    const char* keys[] = {key.c_str()};
    rados_write_op_omap_rm_keys(op.get(), keys, 1);
    const int rc = rados_write_op_operate(op.get(), io, index_of(dir).c_str(), nullptr, 0);
    return rc == -ENOENT ? 0 : rc;
}

class rados_backend;

class rados_writer final : public object_writer {
public:
    rados_writer(rados_ioctx_t io, index_cache& cache, std::string name, std::uint64_t size,
                 std::string id)
        : io_(io), cache_(cache), name_(std::move(name)), size_(size), id_(std::move(id))
    {
    }
    ~rados_writer() override
    {
        if (committed_)
            return;
        auto removing = remove_pieces(io_, name_, id_, pieces());
        wait_all(removing);
    }

    std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) override
    {
        return write(data, offset, nullptr);
    }

#if IOFWD_RADOS_CXX
    std::error_code write_checksummed(std::span<const std::byte> data, std::uint64_t offset,
                                      std::uint64_t, std::uint32_t& crc) override
    {
        return write(data, offset, &crc);
    }
#endif

private:
    // With `crc`, also its CRC-32C (C++ API only).
    std::error_code write(std::span<const std::byte> data, std::uint64_t offset,
                          std::uint32_t* crc)
    {
        // Split at piece boundaries and into bounded requests, all in flight
        // at once, then wait for every one.
        struct request {
            completion c;
            std::string object;
            const char* buf;
            std::size_t len;
            std::uint64_t off;
        };
        std::vector<request> reqs;
        for (std::uint64_t done = 0; done < data.size();) {
            const std::uint64_t at = offset + done;
            mark_written(at / piece_size);
            const std::uint64_t in_piece = at % piece_size;
            const std::uint64_t n =
                std::min({max_write, piece_size - in_piece, data.size() - done});
            reqs.push_back({completion{}, piece_name(name_, id_, at / piece_size),
                            reinterpret_cast<const char*>(data.data() + done),
                            static_cast<std::size_t>(n), in_piece});
            done += n;
        }
        int first_error = 0;
#if IOFWD_RADOS_CXX
        // The C++ API takes the staging memory as it is; the C API's
        // rados_aio_write would first copy every byte into a buffer of its own.
        librados::IoCtx ctx;
        librados::IoCtx::from_rados_ioctx_t(io_, ctx);
        std::vector<cxx_completion> done(reqs.size());
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            auto& r = reqs[i];
            done[i].reset(librados::Rados::aio_create_completion());
            const auto bl =
                librados::bufferlist::static_from_mem(const_cast<char*>(r.buf), r.len);
            if (crc) {
                // Cached in the buffer: the messenger's data crc (msgr2 crc
                // mode, seed -1) finds it there instead of reading the bytes
                // again. Ours is the same register, inverted.
                const std::uint32_t piece = ~bl.crc32c(~0u);
                *crc = i == 0 ? piece : crc32c_combine(*crc, piece, r.len);
            }
            // The allocation hint rados bench sends too: with the write size
            // known, BlueStore checksums in larger blocks (measured: half the
            // OSD's crc time; on a node the OSD shares, +2-4 % at 1 GiB).
            librados::ObjectWriteOperation op;
            op.set_alloc_hint2(piece_size, data.size(),
                               librados::ALLOC_HINT_FLAG_SEQUENTIAL_WRITE |
                                   librados::ALLOC_HINT_FLAG_SEQUENTIAL_READ |
                                   librados::ALLOC_HINT_FLAG_IMMUTABLE);
            op.write(r.off, bl);
            const int rc = ctx.aio_operate(r.object, done[i].get(), &op);
            if (rc < 0 && !first_error)
                first_error = rc;
        }
#else
        for (auto& r : reqs) {
            r.c = new_completion();
            const int rc = r.c ? rados_aio_write(io_, r.object.c_str(), r.c.get(), r.buf, r.len,
                                                 r.off)
                               : -ENOMEM;
            if (rc < 0 && !first_error)
                first_error = rc;
        }
#endif
        for (std::size_t i = 0; i < reqs.size(); ++i) {
            auto& r = reqs[i];
#if IOFWD_RADOS_CXX
            done[i].get()->wait_for_complete();
            int rc = done[i].get()->get_return_value();
            done[i].reset();
#else
            int rc = -EIO;
            if (r.c) {
                rados_aio_wait_for_complete(r.c.get());
                rc = rados_aio_get_return_value(r.c.get());
                r.c.reset();
            }
#endif
            if (rc < 0)  // one more try, synchronously with backoff, before giving up
                rc = with_retries(
                    [&] { return rados_write(io_, r.object.c_str(), r.buf, r.len, r.off); });
            if (rc < 0 && !first_error)
                first_error = rc;
        }
        return first_error ? rados_error(first_error) : std::error_code{};
    }

public:
    std::error_code commit() override { return commit(false); }
    std::error_code commit_exclusive() override { return commit(true); }

private:
    std::error_code commit(bool exclusive)
    {
        // Every piece must exist, even one never written (a zero-length object).
        for (std::uint64_t n = 0; n < pieces(); ++n) {
            if (was_written(n))
                continue;  // no round trip to ask what we know
            const auto p = piece_name(name_, id_, n);
            std::uint64_t sz = 0;
            time_t mt = 0;
            if (rados_stat(io_, p.c_str(), &sz, &mt) == -ENOENT) {
                const int rc = with_retries([&] { return rados_write_full(io_, p.c_str(), "", 0); });
                if (rc < 0)
                    return rados_error(rc);
            }
        }
        // The listing's index entry and the head go to different objects: in
        // parallel (each a round trip to an OSD). A head without its index
        // entry is not listed, so a failure of either fails the commit.
        auto indexed = index_add_start(io_, cache_, name_);
        const auto text = format_head({size_, id_, pieces()});
        // Usually the name is new: create the head exclusively, one round
        // trip. If it exists, this replaces an object: note the old pieces.
        int rc = 0;
        {
            const write_op create(rados_create_write_op());
            rados_write_op_create(create.get(), LIBRADOS_CREATE_EXCLUSIVE, nullptr);
            rados_write_op_write_full(create.get(), text.data(), text.size());
            rc = rados_write_op_operate(create.get(), io_, name_.c_str(), nullptr, 0);
        }
        std::string old_text;
        head old;
        bool had_old = false;
        if (rc == -EEXIST && exclusive) {
            index_add_finish(indexed);  // the name exists: its entry stays right
            return make_error_code(errc::exists);
        }
        if (rc < 0) {
            had_old = read_head(old_text) && parse_head(old_text, old) && old.id != id_;
            rc = with_retries(
                [&] { return rados_write_full(io_, name_.c_str(), text.data(), text.size()); });
        }
        const int irc = index_add_finish(indexed);
        if (rc < 0)
            return rados_error(rc);
        if (irc < 0)
            return rados_error(irc);
        committed_ = true;
        if (had_old) {  // the object replaced: its pieces go
            auto removing = remove_pieces(io_, name_, old.id, old.pieces);
            wait_all(removing);
        }
        return {};
    }

    std::uint64_t pieces() const { return size_ == 0 ? 1 : (size_ + piece_size - 1) / piece_size; }
    // write_at runs on several flusher threads at once.
    void mark_written(std::uint64_t piece)
    {
        std::lock_guard lock(written_mutex_);
        written_.insert(piece);
    }
    bool was_written(std::uint64_t piece)
    {
        std::lock_guard lock(written_mutex_);
        return written_.count(piece) != 0;
    }
    bool read_head(std::string& out)
    {
        char buf[512];
        const int n = rados_read(io_, name_.c_str(), buf, sizeof buf, 0);
        if (n <= 0)
            return false;
        out.assign(buf, static_cast<std::size_t>(n));
        return true;
    }

    rados_ioctx_t io_;
    index_cache& cache_;
    std::string name_;
    std::uint64_t size_;
    std::string id_;
    std::mutex written_mutex_;
    std::set<std::uint64_t> written_;
    bool committed_ = false;
};

// The job claim on RADOS: an exclusive advisory lock on an object of its own,
// leased for 30 s and renewed every 10 s, so that a crashed daemon's claim
// lapses by itself instead of blocking the next run.
class lease_claim final : public claim {
public:
    static constexpr int lease_seconds = 30;

    lease_claim(rados_ioctx_t io, std::string oid, std::string cookie)
        : io_(io), oid_(std::move(oid)), cookie_(std::move(cookie)),
          renewer_([this](std::stop_token stop) {
              name_this_thread("rados-renew");
              renew(stop);
          })
    {
    }
    ~lease_claim() override
    {
        renewer_.request_stop();
        cv_.notify_all();
        renewer_.join();
        rados_unlock(io_, oid_.c_str(), lock_name, cookie_.c_str());
    }

    static int take(rados_ioctx_t io, const std::string& oid, const std::string& cookie,
                    bool renew)
    {
        timeval lease{lease_seconds, 0};
        return rados_lock_exclusive(io, oid.c_str(), lock_name, cookie.c_str(), "iofwd job claim",
                                    &lease, renew ? LIBRADOS_LOCK_FLAG_RENEW : 0);
    }

private:
    static constexpr const char* lock_name = "iofwd-job";

    void renew(std::stop_token stop)
    {
        std::unique_lock lock(mutex_);
        while (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return stop.stop_requested(); }))
            take(io_, oid_, cookie_, true);
    }

    rados_ioctx_t io_;
    std::string oid_;
    std::string cookie_;
    std::mutex mutex_;
    std::condition_variable_any cv_;
    std::jthread renewer_;
};

class rados_backend final : public backend {
public:
    rados_backend(cluster c, ioctx io, std::string pool)
        : cluster_(std::move(c)), ioctx_(std::move(io)), io_(ioctx_.get()), pool_(std::move(pool))
    {
    }

    std::string describe() const override { return "rados pool " + pool_; }
    std::string location() const override { return "rados:" + pool_; }

    std::error_code create(const std::string& name, std::uint64_t size,
                           std::unique_ptr<object_writer>& out) override
    {
        static std::atomic<std::uint64_t> counter{0};
        const std::string id = fmt::format("{:x}-{:x}", static_cast<std::uint64_t>(::getpid()),
                                           counter.fetch_add(1));
        out = std::make_unique<rados_writer>(io_, cache_, name, size, id);
        return {};
    }

    std::error_code read(const std::string& name, std::uint64_t offset,
                         std::span<std::byte> out) override
    {
        head h;
        if (auto ec = load_head(name, h))
            return ec;
        if (offset + out.size() > h.size)
            return std::error_code(ENODATA, std::system_category());
        for (std::uint64_t done = 0; done < out.size();) {
            const std::uint64_t at = offset + done;
            const std::uint64_t n = std::min<std::uint64_t>(
                {piece_size - at % piece_size, out.size() - done, max_write});
            const auto p = piece_name(name, h.id, at / piece_size);
            const int rc = with_retries([&] {
                return rados_read(io_, p.c_str(), reinterpret_cast<char*>(out.data() + done),
                                  static_cast<std::size_t>(n), at % piece_size);
            });
            if (rc < 0)
                return rados_error(rc);
            if (static_cast<std::uint64_t>(rc) != n)
                return std::error_code(ENODATA, std::system_category());
            done += n;
        }
        return {};
    }

    std::error_code size(const std::string& name, std::uint64_t& out) override
    {
        head h;
        if (auto ec = load_head(name, h))
            return ec;
        out = h.size;
        return {};
    }

    std::error_code list(const std::string& prefix, std::vector<std::string>& out) override
    {
        std::string dir = prefix;
        if (!dir.empty() && dir.back() != '/')
            dir += '/';
        std::vector<std::string> names;
        std::string after;
        for (;;) {
            const read_op op(rados_create_read_op());
            rados_omap_iter_t iter = nullptr;
            unsigned char more = 0;
            int prval = 0;
            rados_read_op_omap_get_keys2(op.get(), after.c_str(), 10000, &iter, &more, &prval);
            const int rc = with_retries(
                [&] { return rados_read_op_operate(op.get(), io_, index_of(dir).c_str(), 0); });
            // The iterator exists once the operation ran.
            const omap_iter it(rc >= 0 ? iter : nullptr);
            if (rc < 0 || prval < 0) {
                const int err = rc < 0 ? rc : prval;
                return err == -ENOENT ? make_error_code(errc::not_found) : rados_error(err);
            }
            char* key = nullptr;
            char* val = nullptr;
            size_t len = 0;
            while (rados_omap_get_next(it.get(), &key, &val, &len) == 0 && key)
                names.emplace_back(key);
            if (!more || names.empty())
                break;
            after = names.back();
        }
        std::sort(names.begin(), names.end());
        out = std::move(names);
        return {};
    }

    std::error_code remove(const std::string& name) override
    {
        head h;
        if (auto ec = load_head(name, h)) {
            if (ec != errc::not_found)
                return ec;
            // A "directory": drop its index and its entry in the parent.
            std::uint64_t sz = 0;
            time_t mt = 0;
            const auto index = index_of(name + "/");
            if (rados_stat(io_, index.c_str(), &sz, &mt) < 0)
                return ec;
            rados_remove(io_, index.c_str());
            cache_.forget(name + "/");
            if (const int rc = index_remove(io_, name); rc < 0)
                return rados_error(rc);
            return {};
        }
        // The head first: from then on the object is gone, whatever becomes
        // of its pieces and index entry, which go together.
        int rc = with_retries([&] { return rados_remove(io_, name.c_str()); });
        if (rc < 0 && rc != -ENOENT)
            return rados_error(rc);
        auto removing = remove_pieces(io_, name, h.id, h.pieces);
        rc = index_remove(io_, name);
        wait_all(removing);
        if (rc < 0)
            return rados_error(rc);
        return {};
    }

    std::error_code modified(const std::string& name, std::int64_t& out) override
    {
        std::uint64_t size = 0;
        time_t mtime = 0;
        const int rc = with_retries([&] { return rados_stat(io_, name.c_str(), &size, &mtime); });
        if (rc == -ENOENT)
            return make_error_code(errc::not_found);
        if (rc < 0)
            return rados_error(rc);
        out = static_cast<std::int64_t>(mtime);
        return {};
    }

    // Pieces "<name>@<id>.<n>" under `dir` whose head is gone or names
    // another write: what a writer that died before its commit left. RADOS
    // has no index of pieces, so this scans the pool (a tool's job, never
    // the daemon's).
    std::error_code leftovers(const std::string& dir, std::vector<std::string>& out) override
    {
        const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
        std::vector<std::string> names;
        if (auto ec = scan(prefix, names))
            return ec;
        std::vector<std::string> found;
        std::map<std::string, std::string> ids;  // head name -> its write id ("" none)
        for (const auto& n : names) {
            const auto at = n.rfind('@');
            const auto dot = n.rfind('.');
            if (at == std::string::npos || dot == std::string::npos || dot < at)
                continue;
            const std::string name = n.substr(0, at);
            auto it = ids.find(name);
            if (it == ids.end()) {
                head h;
                it = ids.emplace(name, load_head(name, h) ? std::string() : h.id).first;
            }
            if (it->second != n.substr(at + 1, dot - at - 1))
                found.push_back(n);
        }
        std::sort(found.begin(), found.end());
        out = std::move(found);
        return {};
    }

    std::error_code remove_leftover(const std::string& name) override
    {
        if (name.find('@') == std::string::npos)
            return make_error_code(errc::invalid_argument);
        const int rc = with_retries([&] { return rados_remove(io_, name.c_str()); });
        if (rc == -ENOENT)
            return make_error_code(errc::not_found);
        return rc < 0 ? rados_error(rc) : std::error_code{};
    }

    std::error_code claimants(const std::string& job, std::vector<std::string>& out) override
    {
        const std::string prefix = fmt::format(".claim/{}/", job);
        std::vector<std::string> names;
        if (auto ec = scan(prefix, names))
            return ec;
        for (auto& n : names)
            n.erase(0, prefix.size());
        std::sort(names.begin(), names.end());
        out = std::move(names);
        return {};
    }

    std::error_code claim_job(const std::string& job, const std::string& node,
                              std::unique_ptr<claim>& out) override
    {
        // Outside the job's names, so listing the job never shows it.
        const std::string oid = fmt::format(".claim/{}/{}", job, node);
        const std::string cookie = fmt::format("{:x}-{:x}", static_cast<std::uint64_t>(::getpid()),
                                               reinterpret_cast<std::uintptr_t>(this));
        const int rc = with_retries([&] { return lease_claim::take(io_, oid, cookie, false); });
        if (rc == -EBUSY || rc == -EEXIST)
            return make_error_code(errc::rank_in_use);
        if (rc < 0)
            return rados_error(rc);
        out = std::make_unique<lease_claim>(io_, oid, cookie);
        return {};
    }

    // A tally is one object outside the job's names, ".arrivals/<tally>",
    // that every member appends a record of fixed size to, "<member>=<note>"
    // padded: the OSD orders the appends to one object, so the size after
    // one's own append counts every arrival before it. A retried append may
    // add a record twice; arrivals() folds the repeats.
    std::error_code arrive(const std::string& tally, const std::string& member,
                           const std::string& note, std::uint64_t& count) override
    {
        std::string text;
        if (!format_arrival(member, note, text))
            return make_error_code(errc::invalid_argument);
        std::string record(tally_record, ' ');
        record.replace(0, text.size(), text);
        record.back() = '\n';
        const std::string oid = tally_object(tally);
        int rc = with_retries(
            [&] { return rados_append(io_, oid.c_str(), record.data(), record.size()); });
        if (rc < 0)
            return rados_error(rc);
        std::uint64_t size = 0;
        std::time_t mtime = 0;
        rc = with_retries([&] { return rados_stat(io_, oid.c_str(), &size, &mtime); });
        if (rc < 0)
            return rados_error(rc);
        count = size / tally_record;
        return {};
    }

    std::error_code arrivals(const std::string& tally, std::vector<arrival>& out) override
    {
        const std::string oid = tally_object(tally);
        std::uint64_t size = 0;
        std::time_t mtime = 0;
        int rc = with_retries([&] { return rados_stat(io_, oid.c_str(), &size, &mtime); });
        if (rc == -ENOENT)
            return make_error_code(errc::not_found);
        if (rc < 0)
            return rados_error(rc);
        if (size > max_tally_bytes || size % tally_record != 0)
            return make_error_code(errc::corrupt);
        std::string text(size, '\0');
        for (std::uint64_t done = 0; done < size;) {
            const auto n = std::min<std::uint64_t>(size - done, max_write);
            rc = with_retries(
                [&] { return rados_read(io_, oid.c_str(), text.data() + done, n, done); });
            if (rc < 0)
                return rados_error(rc);
            if (rc == 0)
                return make_error_code(errc::corrupt);  // shorter than its size
            done += static_cast<std::uint64_t>(rc);
        }
        std::vector<arrival> found;
        for (std::size_t at = 0; at < text.size(); at += tally_record) {
            std::string_view r(text.data() + at, tally_record);
            if (r.back() != '\n')
                return make_error_code(errc::corrupt);
            r.remove_suffix(1);
            while (!r.empty() && r.back() == ' ')
                r.remove_suffix(1);
            arrival a;
            if (!parse_arrival(r, a))
                return make_error_code(errc::corrupt);
            found.push_back(std::move(a));
        }
        if (auto ec = fold_arrivals(found))
            return ec;
        out = std::move(found);
        return {};
    }

    std::error_code remove_arrivals(const std::string& tally) override
    {
        const int rc = with_retries([&] { return rados_remove(io_, tally_object(tally).c_str()); });
        if (rc < 0 && rc != -ENOENT)
            return rados_error(rc);
        return {};
    }

private:
    static constexpr std::size_t tally_record = 256;
    static_assert(tally_record >= max_member + max_note + 2);  // '=' and '\n'
    static constexpr std::uint64_t max_tally_bytes = 64ull << 20;

    static std::string tally_object(const std::string& tally) { return ".arrivals/" + tally; }

    // Every object of the pool whose name starts with `prefix`.
    std::error_code scan(const std::string& prefix, std::vector<std::string>& out)
    {
        rados_list_ctx_t ctx = nullptr;
        if (const int rc = rados_nobjects_list_open(io_, &ctx); rc < 0)
            return rados_error(rc);
        std::vector<std::string> names;
        const char* entry = nullptr;
        int rc = 0;
        while ((rc = rados_nobjects_list_next(ctx, &entry, nullptr, nullptr)) == 0)
            if (std::string_view(entry).starts_with(prefix))
                names.emplace_back(entry);
        rados_nobjects_list_close(ctx);
        if (rc != -ENOENT)  // the end of the list
            return rados_error(rc);
        out = std::move(names);
        return {};
    }

    std::error_code load_head(const std::string& name, head& h)
    {
        char buf[512];
        const int n = with_retries([&] { return rados_read(io_, name.c_str(), buf, sizeof buf, 0); });
        if (n == -ENOENT)
            return make_error_code(errc::not_found);
        if (n < 0)
            return rados_error(n);
        if (!parse_head(std::string(buf, static_cast<std::size_t>(n)), h))
            return make_error_code(errc::corrupt);
        return {};
    }

    cluster cluster_;  // shut down after the I/O context is destroyed
    ioctx ioctx_;
    rados_ioctx_t io_;
    std::string pool_;
    index_cache cache_;
};

std::error_code open_pool(const std::string& pool, std::unique_ptr<backend>& out,
                          std::string& why)
{
    if (pool.empty()) {
        why = "rados store needs a pool: rados:POOL";
        return make_error_code(errc::invalid_argument);
    }
    const std::string user = env_or("IOFWD_CEPH_USER", "client.admin");
    rados_t handle = nullptr;
    int rc = rados_create2(&handle, "ceph", user.c_str(), 0);
    if (rc < 0) {
        why = fmt::format("rados_create2 for user {}: {}", user, std::strerror(-rc));
        return rados_error(rc);
    }
    cluster c(handle);
    const std::string conf = env_or("IOFWD_CEPH_CONF", "");
    rc = conf.empty() ? rados_conf_read_file(c.get(), nullptr)
                      : rados_conf_read_file(c.get(), conf.c_str());
    if (rc < 0) {
        why = fmt::format("cannot read the Ceph configuration {}: {} (set IOFWD_CEPH_CONF)",
                          conf.empty() ? "(default search path)" : conf, std::strerror(-rc));
        return rados_error(rc);
    }
    if (const auto keyring = env_or("IOFWD_CEPH_KEYRING", ""); !keyring.empty())
        rados_conf_set(c.get(), "keyring", keyring.c_str());
    // Fail, do not hang, when the cluster or an OSD is gone; with_retries
    // adds bounded retries with backoff on top.
    std::string timeout = env_or("IOFWD_CEPH_OP_TIMEOUT", "15");
    if (timeout.find_first_not_of("0123456789") != std::string::npos)
        timeout = "15";
    rados_conf_set(c.get(), "client_mount_timeout", timeout.c_str());
    rados_conf_set(c.get(), "rados_mon_op_timeout", timeout.c_str());
    rados_conf_set(c.get(), "rados_osd_op_timeout", timeout.c_str());
    rc = rados_connect(c.get());
    if (rc < 0) {
        why = fmt::format("cannot connect to the Ceph cluster ({}) as {}: {} — is it running, "
                          "is the key right?",
                          conf.empty() ? "default ceph.conf" : conf, user, std::strerror(-rc));
        return rados_error(rc);
    }
    rados_ioctx_t io = nullptr;
    rc = rados_ioctx_create(c.get(), pool.c_str(), &io);
    if (rc < 0) {
        why = fmt::format("Ceph pool '{}' cannot be opened: {}{}", pool, std::strerror(-rc),
                          rc == -ENOENT ? " (create it: ceph osd pool create " + pool + ")" : "");
        return rados_error(rc);
    }
    out = std::make_unique<rados_backend>(std::move(c), ioctx(io), pool);
    return {};
}

}  // namespace
}  // namespace iofwd::store

extern "C" {

const char iofwd_rados_module_version[] = IOFWD_VERSION;

void iofwd_rados_module_open(const std::string& pool,
                             std::unique_ptr<iofwd::store::backend>& out, std::string& why,
                             std::error_code& ec) noexcept
{
    // Nothing thrown crosses into the loader (a bad_alloc in librados's
    // setup, or in a message).
    try {
        ec = iofwd::store::open_pool(pool, out, why);
        return;
    } catch (const std::exception& e) {
        try {
            why = std::string("opening the rados store failed: ") + e.what();
        } catch (...) {
        }
    } catch (...) {
        try {
            why = "opening the rados store failed: an unknown exception";
        } catch (...) {
        }
    }
    ec = make_error_code(iofwd::errc::store_error);
}

}
