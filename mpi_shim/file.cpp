// MPI-IO through the daemon. A file whose path is under IOFWD_SHIM_PREFIXES
// is opened by MPI-IO as usual (so every call the shim does not forward still
// works on it) and also announced to the daemon. Writes are forwarded: the
// memory side, when it is not one run, is packed (MPI_Pack); the file view
// turns the write's place into a list of file runs (flatten.hpp,
// file_view.hpp); the daemon pulls the bytes from the rank's memory and
// writes them to those runs while the rank goes on. What the shim cannot
// forward on such a file (reads, sizes, shared pointers, atomic mode, a
// non-native data representation) first waits until the rank's forwarded
// writes are in the file and then goes to MPI-IO: the bytes are always those
// MPI-IO would write.
//
// One thin wrapper per MPI-IO call and its forms (explicit offset,
// individual pointer, collective, nonblocking, split, large count): writes
// over write_common(), the calls MPI-IO serves over pass_to_mpiio().
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "file_view.hpp"
#include "flatten.hpp"
#include "protocol.hpp"
#include "shim.hpp"

namespace iofwd::shim {
namespace {

struct open_file {
    std::uint64_t id = 0;          // our number for it on the daemon
    std::string path;
    bool forward = true;           // false once forwarding stopped (atomic mode)
    bool dirty = false;            // forwarded writes MPI-IO may not see yet
    file_view view;                // the default view until MPI_File_set_view
    std::string view_problem;      // why writes through the view are not forwarded
    int unreported = MPI_SUCCESS;  // a failure of forwarded writes the program was not
                                   // told of (a collective started anyway, or MPI-IO's
                                   // own call failed too): at the next MPI_File_sync
                                   // or MPI_File_close
};

std::unordered_map<MPI_File, open_file>& files()
{
    static std::unordered_map<MPI_File, open_file> f;
    return f;
}

std::uint64_t next_id = 1;

// The open file record for `fh` when it is forwarded (under the state mutex).
open_file* forwarded(MPI_File fh)
{
    auto& s = shared();
    if (!s.attached)
        return nullptr;
    const auto it = files().find(fh);
    return (it == files().end() || !it->second.forward) ? nullptr : &it->second;
}

// The memory side of a write: `count` items of `type`, `size` bytes each.
// One run in type-map order (`data` then points at it), or not (then the
// items are packed, a batch at a time, as they are sent).
struct memory_side {
    const std::byte* data = nullptr;  // when one run
    MPI_Count size = 0;
    MPI_Count count = 0;
    MPI_Aint extent = 0;
    bool one_run() const noexcept { return data != nullptr; }
};

// A non-contiguous write is packed at most this many bytes at a time (a
// single item larger than that goes to MPI-IO rather than doubling the
// rank's memory).
constexpr MPI_Count pack_batch = MPI_Count{64} << 20;

// False with `why` when the items cannot be forwarded.
bool read_memory(const void* buf, MPI_Count count, MPI_Datatype type, memory_side& m,
                 const char*& why)
{
    MPI_Count lb = 0, extent = 0;
    if (count < 0 || PMPI_Type_size_x(type, &m.size) != MPI_SUCCESS ||
        PMPI_Type_get_extent_x(type, &lb, &extent) != MPI_SUCCESS) {
        why = "the memory datatype cannot be read";
        return false;
    }
    m.count = count;
    m.extent = static_cast<MPI_Aint>(extent);
    if (m.size == 0 || count == 0) {
        m.data = static_cast<const std::byte*>(buf);
        return true;
    }
    if (m.size > std::numeric_limits<std::int64_t>::max() / count) {
        why = "the write's size overflows";
        return false;
    }
    // One run only when the type map is one piece in order (no holes is not
    // enough: HDF5 hands over types whose pieces cover the buffer in another
    // order), and `count` of them follow each other.
    flat_type flat;
    std::string ignored;
    if (flatten(type, flat, ignored, 1) &&
        (count == 1 || flat.pieces.front().length == flat.extent)) {
        m.data = static_cast<const std::byte*>(buf) + flat.pieces.front().disp;
        return true;
    }
    if (m.size > pack_batch) {
        why = "a single item of a non-contiguous memory datatype is larger than 64 MiB";
        return false;
    }
    return true;
}

// Packs items [first, first + n) of `buf` into `out` (n * m.size bytes).
bool pack_items(const void* buf, MPI_Datatype type, const memory_side& m, MPI_Count first,
                MPI_Count n, std::vector<std::byte>& out)
{
    out.resize(static_cast<std::size_t>(n * m.size));
    MPI_Count position = 0;
    const auto* from = static_cast<const std::byte*>(buf) + first * m.extent;
    return PMPI_Pack_c(from, n, type, out.data(), static_cast<MPI_Count>(out.size()), &position,
                       MPI_COMM_SELF) == MPI_SUCCESS &&
           position == static_cast<MPI_Count>(out.size());
}

// One request of a write: bytes [begin, begin + length) of its stream, and
// the file runs they go to.
struct request_plan {
    std::int64_t begin = 0;
    std::int64_t length = 0;
    std::vector<iofwd::proto::file_run> runs;
};

// A batch of a write's items, [first, first + n), and its requests.
struct batch_plan {
    MPI_Count first = 0;
    MPI_Count n = 0;
    std::vector<request_plan> requests;
};

// The requests for stream bytes [begin, end) of a write through `view` at
// view byte `at`. False when a request's runs would average fewer bytes than
// the protocol takes (MPI-IO's data sieving serves such views better).
bool plan_requests(const file_view& view, std::int64_t at, std::int64_t begin, std::int64_t end,
                   std::vector<request_plan>& out)
{
    while (begin < end) {
        request_plan r;
        r.begin = begin;
        r.length = view.runs(at + begin, end - begin, r.runs, iofwd::proto::max_file_runs);
        if (r.length <= 0 || !iofwd::proto::runs_dense_enough(r.runs.size(),
                                                              static_cast<std::uint64_t>(r.length)))
            return false;
        begin += r.length;
        out.push_back(std::move(r));
    }
    return true;
}

// Calls the error handler of `fh` and returns `cls`. Never under the state
// mutex: a handler may call MPI-IO on the file, which the shim wraps.
int call_errhandler(MPI_File fh, int cls)
{
    PMPI_File_call_errhandler(fh, cls);
    return cls;
}

// Keeps `cls` on `fh` for its next MPI_File_sync or MPI_File_close.
void keep_unreported(MPI_File fh, int cls)
{
    auto& s = shared();
    std::lock_guard lock(s.mutex);
    if (const auto it = files().find(fh); it != files().end())
        it->second.unreported = cls;
}

// After a collective MPI-IO call (`joined`, its answer) that the rank
// entered although its forwarded writes had failed (`failed`): the call's
// error is MPI-IO's if it failed too (its handler ran; `failed` is kept for
// the next sync or close), else `failed`, raised once.
int after_joining(MPI_File fh, int failed, int joined)
{
    if (failed == MPI_SUCCESS)
        return joined;
    if (joined != MPI_SUCCESS) {
        keep_unreported(fh, failed);
        return joined;
    }
    return call_errhandler(fh, failed);
}

// Makes the rank's forwarded writes to `f` visible to MPI-IO (in the file).
// A failure is said on stderr and returned; the caller raises it
// (call_errhandler()) once it holds no lock and has joined any collective
// the call is.
int settle(open_file& f, const char* call)
{
    if (!f.dirty)
        return MPI_SUCCESS;
    auto& s = shared();
    if (auto ec = s.conn.file_sync(f.id, 0)) {
        const int cls = mpi_error_class(ec);
        std::fprintf(stderr, "iofwd shim (rank %d): %s on %s: the rank's forwarded writes did "
                             "not land: %s\n",
                     s.world_rank, call, f.path.c_str(), s.conn.why().c_str());
        return cls;
    }
    f.dirty = false;
    return MPI_SUCCESS;
}

// Before a call the shim hands to MPI-IO on file `fh`: settle, count it, and
// say once why a write was not forwarded. A failure is returned, not raised.
int before_passing(MPI_File fh, const char* call, const char* why_not_forwarded = nullptr)
{
    auto& s = shared();
    std::lock_guard lock(s.mutex);
    open_file* f = forwarded(fh);
    if (!f)
        return MPI_SUCCESS;
    ++s.stats.passed;
    if (why_not_forwarded)
        warn_once(fmt::format("{}:{}", call, why_not_forwarded),
                  fmt::format("{} on {}: {}; this call and others like it go to MPI-IO "
                              "(same bytes, not forwarded)",
                              call, f->path, why_not_forwarded));
    return settle(*f, call);
}

// What a call the shim hands to MPI-IO does when the rank's forwarded
// writes did not land (settle failed, its words on stderr already).
enum class call_kind {
    independent,       // it fails with that error, MPI-IO not called
    collective,        // the other ranks are in MPI-IO's collective: this one
                       // joins them, then fails with that error
    collective_start,  // a collective that starts an operation (a request, a
                       // split collective's begin): joined too, but it
                       // returns MPI-IO's answer, so that the program
                       // completes the operation; the error is kept for the
                       // file's next MPI_File_sync or MPI_File_close
};

// A call MPI-IO serves on a file the shim may forward: the rank's forwarded
// writes first (settled), then MPI-IO's `next`.
template <class Next>
int pass_to_mpiio(MPI_File fh, const char* call, call_kind kind, const char* why_not_forwarded,
                  Next&& next)
{
    const int rc = before_passing(fh, call, why_not_forwarded);
    if (rc == MPI_SUCCESS)
        return next();
    switch (kind) {
    case call_kind::independent: return call_errhandler(fh, rc);
    case call_kind::collective: return after_joining(fh, rc, next());
    case call_kind::collective_start: keep_unreported(fh, rc); return next();
    }
    return rc;
}

enum class where { explicit_offset, individual_pointer };

// A write the shim forwards when it can; otherwise MPI-IO's `next` does it
// (an independent call stands in for a collective one: the bytes are the same
// and no other rank waits for this one inside MPI-IO).
// `same`: MPI-IO's own call, for a file the shim does not forward; `next`:
// MPI-IO's call for a write on a forwarded file that cannot be forwarded;
// `finish`: what the call must still do once the daemon holds the bytes
// (fill in the status, or complete the request).
template <typename Count, typename Same, typename Next, typename Finish>
int write_common(const char* call, where w, MPI_File fh, MPI_Offset offset, const void* buf,
                 Count count, MPI_Datatype type, Same&& same, Next&& next, Finish&& finish)
{
    auto& s = shared();
    std::unique_lock lock(s.mutex);
    open_file* f = forwarded(fh);
    if (!f) {
        lock.unlock();
        return same();
    }
    memory_side mem;
    const char* why_not = nullptr;
    std::int64_t bytes = 0, at = 0;  // the write's size; its first byte in the view
    const std::int64_t esize = f->view.etype_size();
    if (w == where::individual_pointer && PMPI_File_get_position(fh, &offset) != MPI_SUCCESS)
        why_not = "the file pointer cannot be read";
    else if (!f->view_problem.empty())
        why_not = f->view_problem.c_str();
    else if (offset < 0)
        why_not = "a negative offset";  // MPI-IO says what is wrong with it
    else if (offset > std::numeric_limits<std::int64_t>::max() / esize)
        why_not = "an offset beyond the largest file";
    else if (!read_memory(buf, count, type, mem, why_not))
        ;
    else if ((bytes = mem.size * mem.count) % esize != 0)
        why_not = "the write is not a whole number of etypes";
    else if ((at = offset * esize) > std::numeric_limits<std::int64_t>::max() - bytes)
        why_not = "a write beyond the largest file";
    // The requests, planned whole before any is sent: in batches of items
    // (one batch when the memory is one run; packed a batch at a time else).
    std::vector<batch_plan> plan;
    if (!why_not && bytes > 0) {
        const MPI_Count per_batch =
            mem.one_run() ? mem.count : std::max<MPI_Count>(1, pack_batch / mem.size);
        for (MPI_Count first = 0; first < mem.count && !why_not; first += per_batch) {
            batch_plan& b = plan.emplace_back();
            b.first = first;
            b.n = std::min(per_batch, mem.count - first);
            if (!plan_requests(f->view, at, first * mem.size, (first + b.n) * mem.size,
                               b.requests))
                why_not = "the write's runs in the file are on average smaller than 64 bytes "
                          "(MPI-IO's data sieving serves such views better)";
        }
    }
    if (why_not) {
        const std::string why = why_not;  // the view's text may change once unlocked
        lock.unlock();
        // `next` is independent: no other rank waits for this one in it.
        if (int rc = before_passing(fh, call, why.c_str()); rc != MPI_SUCCESS)
            return call_errhandler(fh, rc);
        return next();
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::byte> packed;
    for (const auto& b : plan) {
        // Where stream byte `base_at` of this batch is: the caller's memory,
        // or the batch packed.
        const std::byte* base = mem.data;
        std::int64_t base_at = 0;
        if (!mem.one_run()) {
            if (!pack_items(buf, type, mem, b.first, b.n, packed)) {
                std::fprintf(stderr, "iofwd shim (rank %d): %s on %s: MPI_Pack of the "
                                     "non-contiguous memory failed\n",
                             s.world_rank, call, f->path.c_str());
                lock.unlock();
                return call_errhandler(fh, MPI_ERR_TYPE);
            }
            base = packed.data();
            base_at = b.first * mem.size;
        }
        for (const auto& r : b.requests) {
            const std::byte* data = base + (r.begin - base_at);
            if (auto ec = s.conn.file_write(f->id, r.runs.front().offset, data,
                                            static_cast<std::uint64_t>(r.length), r.runs)) {
                const int cls = mpi_error_class(ec);
                std::fprintf(stderr, "iofwd shim (rank %d): %s of %lld bytes at %llu of %s "
                                     "(%lld bytes of it forwarded before): %s\n",
                             s.world_rank, call, static_cast<long long>(bytes),
                             static_cast<unsigned long long>(r.runs.front().offset),
                             f->path.c_str(), static_cast<long long>(r.begin),
                             s.conn.why().c_str());
                lock.unlock();
                return call_errhandler(fh, cls);
            }
            f->dirty = true;
            // The program's own array (not the shim's packed copy): the
            // next write of it is read faster from 2 MiB pages.
            if (mem.one_run())
                s.conn.offer_huge_pages(data, static_cast<std::uint64_t>(r.length));
            if (s.cfg.trace)
                std::fprintf(stderr, "iofwd shim (rank %d): %s: %lld bytes to %s in %zu runs, "
                                     "[%llu, +%llu) .. [%llu, +%llu)%s\n",
                             s.world_rank, call, static_cast<long long>(r.length), f->path.c_str(),
                             r.runs.size(), static_cast<unsigned long long>(r.runs.front().offset),
                             static_cast<unsigned long long>(r.runs.front().length),
                             static_cast<unsigned long long>(r.runs.back().offset),
                             static_cast<unsigned long long>(r.runs.back().length),
                             mem.one_run() ? "" : ", packed");
        }
    }
    if (w == where::individual_pointer) {
        if (int rc = PMPI_File_seek(fh, offset + bytes / esize, MPI_SEEK_SET); rc != MPI_SUCCESS) {
            std::fprintf(stderr, "iofwd shim (rank %d): %s on %s: the write was forwarded but "
                                 "the file pointer could not be moved past it\n",
                         s.world_rank, call, f->path.c_str());
            lock.unlock();
            return call_errhandler(fh, rc);
        }
    }
    s.stats.writes += 1;
    s.stats.bytes += static_cast<std::uint64_t>(bytes);
    s.stats.through_views += f->view.plain() ? 0 : 1;
    s.stats.packed += (bytes > 0 && !mem.one_run()) ? 1 : 0;
    s.stats.write_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    finish();
    return MPI_SUCCESS;
}

// The bytes `count` items of `type` hold: what a status keeps of a write,
// so that it does not need the type, which the program may free meanwhile.
MPI_Count bytes_of(MPI_Datatype type, MPI_Count count)
{
    MPI_Count size = 0;
    PMPI_Type_size_x(type, &size);
    return size * count;
}

// Split collective writes (`*_all_begin` ... `*_all_end`): a begin the shim
// forwarded, or did as an independent MPI-IO write, is ended here; MPI-IO
// never saw it. One per file handle at a time (MPI's rule).
struct split_write {
    MPI_Count bytes;
};
std::mutex split_mutex;
std::unordered_map<MPI_File, split_write>& splits()
{
    static std::unordered_map<MPI_File, split_write> m;
    return m;
}

void begin_split(MPI_File fh, MPI_Datatype type, MPI_Count count)
{
    std::lock_guard lock(split_mutex);
    splits()[fh] = {bytes_of(type, count)};
}

// True when `fh`'s split write was the shim's: `status` filled in.
bool end_split(MPI_File fh, MPI_Status* status)
{
    std::lock_guard lock(split_mutex);
    const auto it = splits().find(fh);
    if (it == splits().end())
        return false;
    if (status != MPI_STATUS_IGNORE)
        PMPI_Status_set_elements_x(status, MPI_BYTE, it->second.bytes);
    splits().erase(it);
    return true;
}

// A request that is already complete, for a forwarded nonblocking write.
struct done_request {
    MPI_Count bytes;
};

int done_query(void* extra, MPI_Status* status)
{
    auto* d = static_cast<done_request*>(extra);
    PMPI_Status_set_elements_x(status, MPI_BYTE, d->bytes);
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}

int done_free(void* extra)
{
    delete static_cast<done_request*>(extra);
    return MPI_SUCCESS;
}

int done_cancel(void*, int)
{
    return MPI_SUCCESS;
}

// The status of a forwarded blocking write.
void set_status(MPI_Status* status, MPI_Datatype type, MPI_Count count)
{
    if (status != MPI_STATUS_IGNORE)
        PMPI_Status_set_elements_x(status, type, count);
}

// Nonblocking writes: forwarded ones finish before the call returns (the
// daemon holds the bytes), so the request is born complete.
void complete_request(MPI_Request* request, MPI_Datatype type, MPI_Count count)
{
    auto* d = new done_request{bytes_of(type, count)};
    PMPI_Grequest_start(done_query, done_free, done_cancel, d, request);
    PMPI_Grequest_complete(*request);
}

// Absolute path of an MPI-IO file name (ROMIO's "ufs:" / "nfs:" prefixes
// dropped); empty for names of other ROMIO drivers.
bool absolute_path(const char* filename, std::string& out)
{
    std::string name = filename ? filename : "";
    for (const char* p : {"ufs:", "nfs:"})
        if (name.rfind(p, 0) == 0)
            name = name.substr(std::strlen(p));
    const auto colon = name.find(':');
    if (colon != std::string::npos && name.find('/') > colon)
        return false;  // another file system driver ("pvfs2:", "daos:")
    if (name.empty())
        return false;
    if (name[0] != '/') {
        char cwd[4096];
        if (!::getcwd(cwd, sizeof cwd))
            return false;
        name = std::string(cwd) + "/" + name;
    }
    out = name;
    return true;
}

void set_view(open_file& f, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
              const char* datarep)
{
    f.view = file_view();
    f.view_problem.clear();
    MPI_Count esize = 0;
    flat_type flat;
    std::string why;
    if (std::strcmp(datarep, "native") != 0)
        why = fmt::format("the view's data representation is {}, which the shim does not convert",
                          datarep);
    else if (PMPI_Type_size_x(etype, &esize) != MPI_SUCCESS || esize <= 0)
        why = "the view's etype has no size";
    else if (!flatten(filetype, flat, why))
        why = "the view's filetype cannot be flattened: " + why;
    else if (flat.size <= 0 || flat.size % esize != 0)
        why = "the view's filetype is not a whole number of etypes";
    else if (disp < 0 || std::any_of(flat.pieces.begin(), flat.pieces.end(),
                                     [](const auto& p) { return p.disp < 0; }))
        why = "a piece of the view lies before the start of the file";
    if (!why.empty()) {
        f.view_problem = std::move(why);
        return;
    }
    f.view = file_view(disp, esize, std::move(flat.pieces), flat.extent);
}

}  // namespace

bool matches(const config& cfg, const char* filename, std::string& out)
{
    std::string path;
    if (!absolute_path(filename, path))
        return false;
    for (const auto& p : cfg.prefixes)
        if (path.rfind(p, 0) == 0 && (path.size() == p.size() || path[p.size()] == '/' ||
                                      p == "/")) {
            out = path;
            return true;
        }
    return false;
}

bool drain_if_forwarded(const char* filename, std::string& path)
{
    auto& s = shared();
    std::lock_guard lock(s.mutex);
    if (!s.attached || !matches(s.cfg, filename, path))
        return false;
    if (auto ec = s.conn.file_drain(path))
        warn_once("drain:" + path,
                  fmt::format("waiting for earlier writes to {}: {}", path, s.conn.why()));
    return true;
}

// Split collective writes' begins (int and MPI_Count counts): forwarded, or
// when they cannot be, MPI-IO's independent write (other ranks may have
// forwarded theirs and will not enter MPI-IO's collective); the end only
// fills in the status.
template <typename Count, typename Begin, typename Independent>
int write_at_all_begin(const char* call, MPI_File fh, MPI_Offset offset, const void* buf,
                       Count count, MPI_Datatype type, Begin begin, Independent independent)
{
    return write_common(
        call, where::explicit_offset, fh, offset, buf, count, type,
        [&] { return begin(fh, offset, buf, count, type); },
        [&] {
            const int rc = independent(fh, offset, buf, count, type, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS)
                begin_split(fh, type, count);
            return rc;
        },
        [&] { begin_split(fh, type, count); });
}

template <typename Count, typename Begin, typename Independent>
int write_all_begin(const char* call, MPI_File fh, const void* buf, Count count,
                    MPI_Datatype type, Begin begin, Independent independent)
{
    return write_common(
        call, where::individual_pointer, fh, 0, buf, count, type,
        [&] { return begin(fh, buf, count, type); },
        [&] {
            const int rc = independent(fh, buf, count, type, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS)
                begin_split(fh, type, count);
            return rc;
        },
        [&] { begin_split(fh, type, count); });
}

}  // namespace iofwd::shim

using namespace iofwd::shim;

extern "C" {

int MPI_File_open(MPI_Comm comm, const char* filename, int amode, MPI_Info info, MPI_File* fh)
{
    auto& s = shared();
    bool attached = false;  // on every rank or on none (MPI_Init agreed)
    {
        std::lock_guard lock(s.mutex);
        attached = s.attached;
    }
    std::string path;
    // Writes to this path that other handles on this node forwarded land
    // first; the barrier extends that to every node of `comm`. Every rank
    // takes part in the barrier and the agreement below, the path under its
    // prefixes or not: ranks whose prefixes or working directories differ
    // must not leave the others waiting.
    const bool match = drain_if_forwarded(filename, path);
    if (attached)
        PMPI_Barrier(comm);
    // MPI-IO's open fails on every rank or on none.
    const int rc = IOFWD_NEXT(MPI_File_open)(comm, filename, amode, info, fh);
    if (rc != MPI_SUCCESS || !attached)
        return rc;
    // The same on every rank (MPI requires one amode).
    const int unforwardable = MPI_MODE_RDONLY | MPI_MODE_APPEND | MPI_MODE_SEQUENTIAL |
                              MPI_MODE_DELETE_ON_CLOSE;
    if (amode & unforwardable) {
        if (match && !(amode & MPI_MODE_RDONLY))
            warn_once("amode:" + path, fmt::format("{} is opened in append, sequential or "
                                                   "delete-on-close mode; it goes to MPI-IO",
                                                   path));
        return rc;
    }
    std::unique_lock lock(s.mutex);
    open_file f;
    f.id = next_id++;
    f.path = path;
    const bool taken = match && !s.conn.file_open(f.id, path);
    if (match && !taken)
        warn_once("open:" + path, fmt::format("cannot forward {}: {}; it goes to MPI-IO on "
                                              "every rank",
                                              path, s.conn.why()));
    lock.unlock();
    // Every rank of `comm` forwards the file or none does: a rank that does
    // not would do a collective write in MPI-IO, which the ranks that forward
    // never enter (a daemon killed between two ranks' FILE_OPEN hung both).
    const agreement all = agree(comm, match, taken);
    lock.lock();
    if (!all.second) {
        if (taken) {
            warn_once("open-other:" + path,
                      !all.reached ? fmt::format("the ranks could not agree to forward {} "
                                                 "(MPI_Allreduce failed); it goes to MPI-IO on "
                                                 "every rank",
                                                 path)
                      : all.first  ? fmt::format("another rank cannot forward {}; it goes to "
                                                 "MPI-IO on every rank",
                                                 path)
                                   : fmt::format("{} is not under IOFWD_SHIM_PREFIXES on "
                                                 "every rank (their prefixes or working "
                                                 "directories differ); it goes to MPI-IO on "
                                                 "every rank",
                                                 path));
            if (auto ec = s.conn.file_sync(f.id, iofwd::proto::file_sync_close))
                warn_once("close:" + path, fmt::format("closing {} on the daemon: {}", path,
                                                       s.conn.why()));
        }
        return rc;
    }
    ++s.stats.files;
    files()[*fh] = f;
    return rc;
}

int MPI_File_delete(const char* filename, MPI_Info info)
{
    std::string path;
    drain_if_forwarded(filename, path);
    return IOFWD_NEXT(MPI_File_delete)(filename, info);
}

int MPI_File_close(MPI_File* fh)
{
    auto& s = shared();
    int unreported = MPI_SUCCESS;
    {
        std::lock_guard lock(s.mutex);
        const auto it = files().find(*fh);
        if (it != files().end()) {
            unreported = it->second.unreported;
            // The daemon finishes and fsyncs this file's writes on its own;
            // MPI_Finalize waits for them.
            if (s.attached && it->second.forward)
                if (auto ec = s.conn.file_sync(it->second.id, iofwd::proto::file_sync_close))
                    warn_once("close:" + it->second.path,
                              fmt::format("closing {} on the daemon: {}", it->second.path,
                                          s.conn.why()));
            files().erase(it);
        }
    }
    // A failure the program was not told of: raised while the handle is
    // still the file's, then the file is closed all the same (collective).
    if (unreported != MPI_SUCCESS)
        call_errhandler(*fh, unreported);
    const int rc = IOFWD_NEXT(MPI_File_close)(fh);
    return rc == MPI_SUCCESS ? unreported : rc;
}

int MPI_File_sync(MPI_File fh)
{
    auto& s = shared();
    int failed = MPI_SUCCESS;
    {
        std::lock_guard lock(s.mutex);
        if (open_file* f = forwarded(fh)) {
            if (auto ec = s.conn.file_sync(f->id, iofwd::proto::file_sync_durable)) {
                const int cls = mpi_error_class(ec);
                std::fprintf(stderr, "iofwd shim (rank %d): MPI_File_sync on %s: %s\n",
                             s.world_rank, f->path.c_str(), s.conn.why().c_str());
                failed = cls;
            } else {
                f->dirty = false;
            }
        }
        // A failure the program was not told of yet is told now (unless
        // the daemon's sync failed too: then that one, and the earlier is
        // dropped, as a second fsync error would replace the first).
        if (const auto it = files().find(fh); it != files().end()) {
            const int earlier = std::exchange(it->second.unreported, MPI_SUCCESS);
            if (failed == MPI_SUCCESS)
                failed = earlier;
        }
    }
    // Collective in MPI-IO: joined even when the daemon failed (the other
    // ranks are in it), the error returned after.
    return after_joining(fh, failed, IOFWD_NEXT(MPI_File_sync)(fh));
}

int MPI_File_set_view(MPI_File fh, MPI_Offset disp, MPI_Datatype etype, MPI_Datatype filetype,
                      const char* datarep, MPI_Info info)
{
    const int rc = IOFWD_NEXT(MPI_File_set_view)(fh, disp, etype, filetype, datarep, info);
    if (rc != MPI_SUCCESS)
        return rc;
    auto& s = shared();
    std::lock_guard lock(s.mutex);
    if (open_file* f = forwarded(fh))
        set_view(*f, disp, etype, filetype, datarep);
    return rc;
}

int MPI_File_set_atomicity(MPI_File fh, int flag)
{
    int failed = MPI_SUCCESS;
    if (flag) {
        auto& s = shared();
        std::lock_guard lock(s.mutex);
        if (open_file* f = forwarded(fh)) {
            // Atomic mode promises other ranks see each write at once: only
            // MPI-IO itself can keep that promise. Off on every rank, even
            // one whose writes did not land (its error after MPI-IO's call,
            // which the other ranks are in).
            failed = settle(*f, "MPI_File_set_atomicity");
            f->forward = false;
            warn_once("atomic:" + f->path, fmt::format("{} is in atomic mode; it goes to "
                                                       "MPI-IO from now on",
                                                       f->path));
        }
    }
    return after_joining(fh, failed, IOFWD_NEXT(MPI_File_set_atomicity)(fh, flag));
}

// `name` is forwarded when it can be; otherwise MPI-IO's `independent` does
// it: for a collective call the independent one, since the other ranks may
// have forwarded their part and will not enter MPI-IO's collective.
#define IOFWD_WRITE_AT(name, independent, Count)                                              \
    int name(MPI_File fh, MPI_Offset offset, const void* buf, Count count, MPI_Datatype type, \
             MPI_Status* status)                                                              \
    {                                                                                         \
        return write_common(                                                                  \
            #name, where::explicit_offset, fh, offset, buf, count, type,                      \
            [&] { return IOFWD_NEXT(name)(fh, offset, buf, count, type, status); },           \
            [&] { return IOFWD_NEXT(independent)(fh, offset, buf, count, type, status); },    \
            [&] { set_status(status, type, count); });                                        \
    }
#define IOFWD_WRITE(name, independent, Count)                                                 \
    int name(MPI_File fh, const void* buf, Count count, MPI_Datatype type, MPI_Status* status) \
    {                                                                                         \
        return write_common(                                                                  \
            #name, where::individual_pointer, fh, 0, buf, count, type,                        \
            [&] { return IOFWD_NEXT(name)(fh, buf, count, type, status); },                   \
            [&] { return IOFWD_NEXT(independent)(fh, buf, count, type, status); },            \
            [&] { set_status(status, type, count); });                                        \
    }
#define IOFWD_IWRITE_AT(name, independent, Count)                                             \
    int name(MPI_File fh, MPI_Offset offset, const void* buf, Count count, MPI_Datatype type, \
             MPI_Request* request)                                                            \
    {                                                                                         \
        return write_common(                                                                  \
            #name, where::explicit_offset, fh, offset, buf, count, type,                      \
            [&] { return IOFWD_NEXT(name)(fh, offset, buf, count, type, request); },          \
            [&] { return IOFWD_NEXT(independent)(fh, offset, buf, count, type, request); },   \
            [&] { complete_request(request, type, count); });                                 \
    }
#define IOFWD_IWRITE(name, independent, Count)                                                \
    int name(MPI_File fh, const void* buf, Count count, MPI_Datatype type, MPI_Request* request) \
    {                                                                                         \
        return write_common(                                                                  \
            #name, where::individual_pointer, fh, 0, buf, count, type,                        \
            [&] { return IOFWD_NEXT(name)(fh, buf, count, type, request); },                  \
            [&] { return IOFWD_NEXT(independent)(fh, buf, count, type, request); },           \
            [&] { complete_request(request, type, count); });                                 \
    }

// Collective writes are forwarded like independent ones: every rank's bytes
// land at the same offsets, and no rank waits for another.
IOFWD_WRITE_AT(MPI_File_write_at, MPI_File_write_at, int)
IOFWD_WRITE_AT(MPI_File_write_at_all, MPI_File_write_at, int)
IOFWD_WRITE_AT(MPI_File_write_at_c, MPI_File_write_at_c, MPI_Count)
IOFWD_WRITE_AT(MPI_File_write_at_all_c, MPI_File_write_at_c, MPI_Count)
IOFWD_WRITE(MPI_File_write, MPI_File_write, int)
IOFWD_WRITE(MPI_File_write_all, MPI_File_write, int)
IOFWD_WRITE(MPI_File_write_c, MPI_File_write_c, MPI_Count)
IOFWD_WRITE(MPI_File_write_all_c, MPI_File_write_c, MPI_Count)
IOFWD_IWRITE_AT(MPI_File_iwrite_at, MPI_File_iwrite_at, int)
IOFWD_IWRITE_AT(MPI_File_iwrite_at_all, MPI_File_iwrite_at, int)
IOFWD_IWRITE_AT(MPI_File_iwrite_at_c, MPI_File_iwrite_at_c, MPI_Count)
IOFWD_IWRITE_AT(MPI_File_iwrite_at_all_c, MPI_File_iwrite_at_c, MPI_Count)
IOFWD_IWRITE(MPI_File_iwrite, MPI_File_iwrite, int)
IOFWD_IWRITE(MPI_File_iwrite_all, MPI_File_iwrite, int)
IOFWD_IWRITE(MPI_File_iwrite_c, MPI_File_iwrite_c, MPI_Count)
IOFWD_IWRITE(MPI_File_iwrite_all_c, MPI_File_iwrite_c, MPI_Count)

// Split collectives (write_at_all_begin() above).
int MPI_File_write_at_all_begin(MPI_File fh, MPI_Offset offset, const void* buf, int count,
                                MPI_Datatype type)
{
    return write_at_all_begin("MPI_File_write_at_all_begin", fh, offset, buf, count, type,
                              IOFWD_NEXT(MPI_File_write_at_all_begin), IOFWD_NEXT(MPI_File_write_at));
}

int MPI_File_write_at_all_begin_c(MPI_File fh, MPI_Offset offset, const void* buf,
                                  MPI_Count count, MPI_Datatype type)
{
    return write_at_all_begin("MPI_File_write_at_all_begin_c", fh, offset, buf, count, type,
                              IOFWD_NEXT(MPI_File_write_at_all_begin_c),
                              IOFWD_NEXT(MPI_File_write_at_c));
}

int MPI_File_write_all_begin(MPI_File fh, const void* buf, int count, MPI_Datatype type)
{
    return write_all_begin("MPI_File_write_all_begin", fh, buf, count, type,
                           IOFWD_NEXT(MPI_File_write_all_begin), IOFWD_NEXT(MPI_File_write));
}

int MPI_File_write_all_begin_c(MPI_File fh, const void* buf, MPI_Count count, MPI_Datatype type)
{
    return write_all_begin("MPI_File_write_all_begin_c", fh, buf, count, type,
                           IOFWD_NEXT(MPI_File_write_all_begin_c), IOFWD_NEXT(MPI_File_write_c));
}

int MPI_File_write_at_all_end(MPI_File fh, const void* buf, MPI_Status* status)
{
    if (end_split(fh, status))
        return MPI_SUCCESS;
    return IOFWD_NEXT(MPI_File_write_at_all_end)(fh, buf, status);
}

int MPI_File_write_all_end(MPI_File fh, const void* buf, MPI_Status* status)
{
    if (end_split(fh, status))
        return MPI_SUCCESS;
    return IOFWD_NEXT(MPI_File_write_all_end)(fh, buf, status);
}

// Calls MPI-IO serves on a forwarded file after the rank's forwarded writes
// are settled: reads see every byte written before them, sizes count them.
// `kind` (call_kind): what the call does when settling failed.
#define IOFWD_SETTLED(name, kind, params, args)                                               \
    int name params                                                                           \
    {                                                                                         \
        return pass_to_mpiio(fh, #name, call_kind::kind, nullptr,                             \
                             [&] { return IOFWD_NEXT(name) args; });                          \
    }
// The same for writes the shim does not forward (the shared file pointer's,
// write_ordered_begin's too): said once, then to MPI-IO.
#define IOFWD_PASSED_WRITE(name, kind, params, args)                                          \
    int name params                                                                           \
    {                                                                                         \
        return pass_to_mpiio(fh, #name, call_kind::kind, "this kind of write is not forwarded", \
                             [&] { return IOFWD_NEXT(name) args; });                          \
    }

#define IOFWD_READ_AT(name, kind, Count)                                                      \
    IOFWD_SETTLED(name, kind,                                                                 \
                  (MPI_File fh, MPI_Offset offset, void* buf, Count count, MPI_Datatype type, \
                   MPI_Status* status),                                                       \
                  (fh, offset, buf, count, type, status))
#define IOFWD_READ(name, kind, Count)                                                         \
    IOFWD_SETTLED(name, kind, (MPI_File fh, void* buf, Count count, MPI_Datatype type,        \
                               MPI_Status* status),                                           \
                  (fh, buf, count, type, status))
#define IOFWD_IREAD_AT(name, kind, Count)                                                     \
    IOFWD_SETTLED(name, kind,                                                                 \
                  (MPI_File fh, MPI_Offset offset, void* buf, Count count, MPI_Datatype type, \
                   MPI_Request* request),                                                     \
                  (fh, offset, buf, count, type, request))
#define IOFWD_IREAD(name, kind, Count)                                                        \
    IOFWD_SETTLED(name, kind, (MPI_File fh, void* buf, Count count, MPI_Datatype type,        \
                               MPI_Request* request),                                         \
                  (fh, buf, count, type, request))

// Split collective reads' begins: they start an operation.
#define IOFWD_READ_AT_BEGIN(name, Count)                                                      \
    IOFWD_SETTLED(name, collective_start,                                                     \
                  (MPI_File fh, MPI_Offset offset, void* buf, Count count, MPI_Datatype type), \
                  (fh, offset, buf, count, type))
#define IOFWD_READ_BEGIN(name, Count)                                                         \
    IOFWD_SETTLED(name, collective_start,                                                     \
                  (MPI_File fh, void* buf, Count count, MPI_Datatype type),                   \
                  (fh, buf, count, type))

IOFWD_READ_AT(MPI_File_read_at, independent, int)
IOFWD_READ_AT(MPI_File_read_at_all, collective, int)
IOFWD_READ_AT(MPI_File_read_at_c, independent, MPI_Count)
IOFWD_READ_AT(MPI_File_read_at_all_c, collective, MPI_Count)
IOFWD_READ(MPI_File_read, independent, int)
IOFWD_READ(MPI_File_read_all, collective, int)
IOFWD_READ(MPI_File_read_c, independent, MPI_Count)
IOFWD_READ(MPI_File_read_all_c, collective, MPI_Count)
IOFWD_READ(MPI_File_read_shared, independent, int)
IOFWD_READ(MPI_File_read_ordered, collective, int)
IOFWD_IREAD_AT(MPI_File_iread_at, independent, int)
IOFWD_IREAD_AT(MPI_File_iread_at_all, collective_start, int)
IOFWD_IREAD(MPI_File_iread, independent, int)
IOFWD_IREAD(MPI_File_iread_all, collective_start, int)
IOFWD_IREAD(MPI_File_iread_shared, independent, int)
IOFWD_READ(MPI_File_read_shared_c, independent, MPI_Count)
IOFWD_READ(MPI_File_read_ordered_c, collective, MPI_Count)
IOFWD_IREAD_AT(MPI_File_iread_at_c, independent, MPI_Count)
IOFWD_IREAD_AT(MPI_File_iread_at_all_c, collective_start, MPI_Count)
IOFWD_IREAD(MPI_File_iread_c, independent, MPI_Count)
IOFWD_IREAD(MPI_File_iread_all_c, collective_start, MPI_Count)
IOFWD_IREAD(MPI_File_iread_shared_c, independent, MPI_Count)
IOFWD_READ_AT_BEGIN(MPI_File_read_at_all_begin, int)
IOFWD_READ_BEGIN(MPI_File_read_all_begin, int)
IOFWD_READ_BEGIN(MPI_File_read_ordered_begin, int)
IOFWD_READ_AT_BEGIN(MPI_File_read_at_all_begin_c, MPI_Count)
IOFWD_READ_BEGIN(MPI_File_read_all_begin_c, MPI_Count)
IOFWD_READ_BEGIN(MPI_File_read_ordered_begin_c, MPI_Count)
IOFWD_SETTLED(MPI_File_get_size, independent, (MPI_File fh, MPI_Offset* size), (fh, size))
IOFWD_SETTLED(MPI_File_set_size, collective, (MPI_File fh, MPI_Offset size), (fh, size))
IOFWD_SETTLED(MPI_File_preallocate, collective, (MPI_File fh, MPI_Offset size), (fh, size))

// The shared file pointer's writes, by the form of their arguments.
#define IOFWD_SHARED_WRITE(name, kind, Count)                                                 \
    IOFWD_PASSED_WRITE(name, kind,                                                            \
                       (MPI_File fh, const void* buf, Count count, MPI_Datatype type,         \
                        MPI_Status* status),                                                  \
                       (fh, buf, count, type, status))
#define IOFWD_SHARED_IWRITE(name, kind, Count)                                                \
    IOFWD_PASSED_WRITE(name, kind,                                                            \
                       (MPI_File fh, const void* buf, Count count, MPI_Datatype type,         \
                        MPI_Request* request),                                                \
                       (fh, buf, count, type, request))
#define IOFWD_SHARED_WRITE_BEGIN(name, kind, Count)                                           \
    IOFWD_PASSED_WRITE(name, kind,                                                            \
                       (MPI_File fh, const void* buf, Count count, MPI_Datatype type),        \
                       (fh, buf, count, type))

IOFWD_SHARED_WRITE(MPI_File_write_shared, independent, int)
IOFWD_SHARED_WRITE(MPI_File_write_ordered, collective, int)
IOFWD_SHARED_IWRITE(MPI_File_iwrite_shared, independent, int)
IOFWD_SHARED_WRITE_BEGIN(MPI_File_write_ordered_begin, collective_start, int)
IOFWD_SHARED_WRITE(MPI_File_write_shared_c, independent, MPI_Count)
IOFWD_SHARED_WRITE(MPI_File_write_ordered_c, collective, MPI_Count)
IOFWD_SHARED_IWRITE(MPI_File_iwrite_shared_c, independent, MPI_Count)
IOFWD_SHARED_WRITE_BEGIN(MPI_File_write_ordered_begin_c, collective_start, MPI_Count)

}  // extern "C"
