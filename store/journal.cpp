#include "store/journal.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "procfs.hpp"
#include "store/byte_fields.hpp"
#include "store/pack.hpp"
#include "sys.hpp"

namespace iofwd::store {
namespace {

constexpr char header_magic[8] = {'I', 'O', 'F', 'W', 'D', 'J', 'N', 'L'};
// A record's header block: magic, crc32c of what follows it (from offset 8
// to the end of the names), generation, version, size, rank, the bytes'
// crc32c, [ranks, nodes, [bucket,]] the names' lengths, the names.
constexpr std::uint32_t record_magic = 0x334a4f49;  // "IOJ3"
constexpr std::size_t record_fixed = 60;             // the fields before the names
// Older iofwds wrote records without the bucket ("IOJ2"), and before that
// without ranks and nodes ("IOJR").
constexpr std::uint32_t record_magic_2 = 0x324a4f49;
constexpr std::size_t record_fixed_2 = 52;
constexpr std::uint32_t record_magic_1 = 0x524a4f49;
constexpr std::size_t record_fixed_1 = 44;

using fields::get;
using fields::put;

std::uint64_t round_up(std::uint64_t n)
{
    return (n + journal::block - 1) / journal::block * journal::block;
}

}  // namespace

journal::journal(unique_fd fd, std::uint64_t capacity)
    : fd_(std::move(fd)), capacity_(std::max(capacity, header_bytes + 2 * block))
{
}

journal::~journal()
{
    stop_.store(true);
    if (filler_.joinable())
        filler_.join();
}

std::uint64_t journal::footprint(std::uint64_t bytes)
{
    return block + round_up(bytes);
}

std::error_code journal::replay(std::vector<record>& out)
{
    std::lock_guard lock(mutex_);
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0)
        return last_system_error();
    const auto end = static_cast<std::uint64_t>(st.st_size);
    // The header slot with the higher valid generation is the current one;
    // a file too short for a slot (new) has none.
    std::uint64_t generation = 0;
    for (std::uint64_t slot = 0; slot < 2; ++slot) {
        std::byte b[20];
        if (sys::pread_all(fd_.get(), b, sizeof b, static_cast<off_t>(slot * block)) != 0) {
            if (errno == ENODATA)
                continue;
            return last_system_error();
        }
        if (std::memcmp(b, header_magic, sizeof header_magic) != 0 ||
            crc32c(std::span(b, 16)) != get<std::uint32_t>(b + 16))
            continue;
        generation = std::max(generation, get<std::uint64_t>(b + 8));
    }
    generation_ = generation;
    std::vector<record> found;
    std::uint64_t at = header_bytes;
    std::vector<std::byte> head(block);
    // The header block in `head`, read from `offset`: `magic` 0 unless it is
    // a whole record header of this generation whose bytes the file can
    // hold; `ours` when the block starts as this generation's records do
    // (whole or not).
    struct header {
        std::uint32_t magic = 0;
        bool ours = false;
        std::size_t fixed = 0;  // the fields before the names
        std::uint16_t job_len = 0, node_len = 0;
        std::uint64_t size = 0;
    };
    const auto header_at = [&](std::uint64_t offset) {
        header r;
        const std::byte* h = head.data();
        const auto magic = get<std::uint32_t>(h);
        if ((magic != record_magic && magic != record_magic_2 && magic != record_magic_1) ||
            get<std::uint64_t>(h + 8) != generation_)
            return r;
        r.ours = true;
        r.fixed = magic == record_magic     ? record_fixed
                  : magic == record_magic_2 ? record_fixed_2
                                            : record_fixed_1;
        r.job_len = get<std::uint16_t>(h + r.fixed - 4);
        r.node_len = get<std::uint16_t>(h + r.fixed - 2);
        if (r.job_len > max_name || r.node_len > max_name ||
            crc32c(std::span(h + 8, r.fixed - 8 + r.job_len + r.node_len)) !=
                get<std::uint32_t>(h + 4))
            return r;
        r.size = get<std::uint64_t>(h + 24);
        // Bounded by the file, not by this daemon's size: one set smaller
        // than the daemon's before must still find what that one answered.
        if (r.size > max_record || r.size > end - offset - block ||
            footprint(r.size) > end - offset)
            return r;
        r.magic = magic;
        return r;
    };
    // A record of this generation that is not whole ends the journal, as a
    // torn append does (always the last one answered: appends are answered
    // in the order of their place). Whole records of this generation after
    // it were never answered when a crash cut appends off out of order, and
    // are lost parts when the disk damaged one in the middle: which of the
    // two, nothing here can tell, so they are not taken, but they are
    // looked for, block by block (records are block-aligned), and said in
    // damage(). Only after a crash or such damage: the normal end is zeros
    // or an older generation's records.
    damage_.clear();
    const auto look_past = [&](std::uint64_t bad, const std::string& what) {
        // Words only: a read that fails ends the look, not the replay, and
        // a file made long (a sparse one has any length) is looked at for
        // a journal's worth at most.
        constexpr std::uint64_t look_at_most = std::uint64_t{64} << 20;
        const std::uint64_t stop = std::min(end, bad + look_at_most);  // bad < end < 2^63
        std::vector<std::uint64_t> versions;
        std::size_t headers = 0;
        for (std::uint64_t next = bad + block; next + block <= stop; next += block) {
            if (sys::pread_all(fd_.get(), head.data(), block, static_cast<off_t>(next)) != 0)
                break;
            if (header_at(next).magic != 0) {
                ++headers;
                versions.push_back(get<std::uint64_t>(head.data() + 16));
            }
        }
        if (headers == 0)
            return;
        std::sort(versions.begin(), versions.end());
        versions.erase(std::unique(versions.begin(), versions.end()), versions.end());
        damage_ = fmt::format(
            "the record at byte {} ({}) does not read, and {} whole record header{} of this "
            "generation follow{} it (version{} {}): not replayed, as after a torn append; a "
            "crash that cut appends off out of order leaves such records, never answered "
            "durable, and damage on the disk loses parts that were",
            bad, what, headers, headers == 1 ? "" : "s", headers == 1 ? "s" : "",
            versions.size() == 1 ? "" : "s", fmt::join(versions, ", "));
    };
    while (at + block <= end) {
        if (sys::pread_all(fd_.get(), head.data(), block, static_cast<off_t>(at)) != 0)
            return last_system_error();
        const auto [magic, ours, fixed, job_len, node_len, size] = header_at(at);
        if (magic == 0) {
            if (ours)
                look_past(at, "its header");
            break;
        }
        const std::byte* h = head.data();
        record r;
        r.version = get<std::uint64_t>(h + 16);
        r.rank = get<std::uint32_t>(h + 32);
        r.crc32c = get<std::uint32_t>(h + 36);
        if (magic != record_magic_1) {
            r.ranks = get<std::uint32_t>(h + 40);
            r.nodes = get<std::uint32_t>(h + 44);
        }
        if (magic == record_magic)
            r.bucket = get<std::uint64_t>(h + 48);
        r.job.assign(reinterpret_cast<const char*>(h + fixed), job_len);
        r.node.assign(reinterpret_cast<const char*>(h + fixed + job_len), node_len);
        try {
            r.data.resize(size);
        } catch (const std::bad_alloc&) {
            return std::make_error_code(std::errc::not_enough_memory);
        }
        if (size > 0 &&
            sys::pread_all(fd_.get(), r.data.data(), size, static_cast<off_t>(at + block)) != 0)
            return last_system_error();
        if (crc32c(r.data) != r.crc32c) {
            // Torn (its header made it to the disk, not all its bytes), or
            // damaged since.
            look_past(at, fmt::format("the bytes of version {} rank {}", r.version, r.rank));
            break;
        }
        found.push_back(std::move(r));
        at += footprint(size);
    }
    tail_ = at;
    out = std::move(found);
    return {};
}

std::error_code journal::write_header(std::uint64_t generation)
{
    std::vector<std::byte> b(block);
    std::memcpy(b.data(), header_magic, sizeof header_magic);
    put(b.data() + 8, generation);
    put(b.data() + 16, crc32c(std::span(b.data(), 16)));
    // The slot with a plain pwrite, not the fault seam's: a fault test
    // counts the data's writes, and a claim starts the journal over.
    const auto at = static_cast<off_t>((generation % 2) * block);
    const ssize_t w = ::pwrite(fd_.get(), b.data(), b.size(), at);
    if (w < 0)
        return last_system_error();
    if (w != static_cast<ssize_t>(b.size()))
        return std::make_error_code(std::errc::io_error);  // a short write of one block
    if (sys::fdatasync(fd_.get()) != 0)
        return last_system_error();
    return {};
}

std::error_code journal::reset()
{
    std::lock_guard lock(mutex_);
    if (held())
        return std::make_error_code(std::errc::device_or_resource_busy);
    return start_over();
}

std::error_code journal::start_over()
{
    if (auto ec = write_header(generation_ + 1))
        return ec;
    ++generation_;
    tail_ = header_bytes;
    // No record is in flight (none is unsettled or awaiting durable()): the
    // counts start afresh.
    written_ = synced_ = reserved_;
    done_.clear();
    broken_ = false;
    first_broken_ = UINT64_MAX;
    sync_error_.clear();
    return {};
}

void journal::prepare()
{
    struct stat st {};
    if (::fstat(fd_.get(), &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= capacity_) {
        ready_.store(true, std::memory_order_release);
        return;
    }
    if (filler_.joinable())
        return;
    filler_ = std::thread([this, from = static_cast<std::uint64_t>(st.st_size) / block * block] {
        name_this_thread("journal-fill");
        // Raw calls, not the fault seam's: this is not data, and a fault
        // test counts the data's calls.
        std::vector<std::byte> zeros(1u << 20);
        for (std::uint64_t at = std::max(from, header_bytes); at < capacity_;) {
            if (stop_.load(std::memory_order_relaxed))
                return;
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(zeros.size(), capacity_ - at));
            const ssize_t w = ::pwrite(fd_.get(), zeros.data(), n, static_cast<off_t>(at));
            if (w <= 0) {
                // A full disk: the journal stays unused.
                const auto why = w < 0 ? last_system_error().message() : "nothing written";
                std::lock_guard lock(mutex_);
                fill_error_ = fmt::format("filling it with zeros at {}: {}", at, why);
                return;
            }
            at += static_cast<std::uint64_t>(w);
        }
        if (::fdatasync(fd_.get()) == 0) {
            ready_.store(true, std::memory_order_release);
            return;
        }
        const auto why = last_system_error().message();
        std::lock_guard lock(mutex_);
        fill_error_ = fmt::format("syncing its zeros: {}", why);
    });
}

std::string journal::fill_error() const
{
    std::lock_guard lock(mutex_);
    return fill_error_;
}

std::uint64_t journal::unsettled() const
{
    std::lock_guard lock(mutex_);
    return unsettled_;
}

void journal::settled()
{
    std::lock_guard lock(mutex_);
    if (unsettled_ > 0)
        --unsettled_;
}

std::error_code journal::append(const origin& o, std::span<const std::byte> data,
                                std::uint32_t crc)
{
    std::uint64_t seq = 0;
    if (auto ec = write(o, data, crc, seq))
        return ec;
    return durable(seq);
}

std::error_code journal::write(const origin& o, std::span<const std::byte> data,
                               std::uint32_t crc, std::uint64_t& seq)
{
    const std::string_view job = o.job, node = o.node;
    if (job.size() > max_name || node.size() > max_name)
        return make_error_code(errc::invalid_argument);
    const std::uint64_t need = footprint(data.size());
    std::unique_lock lock(mutex_);
    if (!ready() || need > capacity_ - header_bytes)
        return std::make_error_code(std::errc::no_buffer_space);
    // Started over when full, and early once past half with every record
    // settled (between bursts): a burst that meets the end with records of
    // its batch unsettled would go past the journal, object by object.
    const bool past_half = tail_ - header_bytes > (capacity_ - header_bytes) / 2;
    if (broken_ || tail_ + need > capacity_ || (past_half && unsettled_ == 0)) {
        // Only once every record is settled: one not settled yet may still
        // be all there is of its version after a crash. Nor while one
        // written waits for durable(): a new generation would answer it
        // durable with no fdatasync (whatever a count of settled records
        // says).
        if (held())
            return std::make_error_code(std::errc::no_buffer_space);
        if (auto ec = start_over())
            return ec;
    }
    const std::uint64_t at = tail_;
    const std::uint64_t taken = ++reserved_;
    const std::uint64_t generation = generation_;
    tail_ += need;
    ++unsettled_;
    ++awaiting_;
    lock.unlock();

    // The header is built here; the bytes go from where they are (the
    // staging slot), not copied next to it first: at 1 MiB that copy was
    // a fifth of the journal thread's time.
    std::array<std::byte, block> header{};
    std::byte* h = header.data();
    // A record without a bucket keeps the layout before buckets, which an
    // older iofwd reads too: a downgrade with packs off loses nothing.
    const bool with_bucket = o.bucket != 0;
    const std::size_t fixed = with_bucket ? record_fixed : record_fixed_2;
    put(h, with_bucket ? record_magic : record_magic_2);
    put(h + 8, generation);
    put(h + 16, o.version);
    put(h + 24, static_cast<std::uint64_t>(data.size()));
    put(h + 32, o.rank);
    put(h + 36, crc);
    put(h + 40, o.ranks);
    put(h + 44, o.nodes);
    if (with_bucket)
        put(h + 48, o.bucket);
    put(h + fixed - 4, static_cast<std::uint16_t>(job.size()));
    put(h + fixed - 2, static_cast<std::uint16_t>(node.size()));
    std::memcpy(h + fixed, job.data(), job.size());
    std::memcpy(h + fixed + job.size(), node.data(), node.size());
    put(h + 4, crc32c(std::span(h + 8, fixed - 8 + job.size() + node.size())));
    static constexpr std::byte zeros[block] = {};
    iovec iov[3] = {
        {h, block},
        {const_cast<std::byte*>(data.data()), data.size()},
        {const_cast<std::byte*>(zeros), need - block - data.size()},
    };
    const int rc = sys::pwritev_all(fd_.get(), iov, 3, static_cast<off_t>(at));
    const std::error_code wec = rc != 0 ? last_system_error() : std::error_code{};

    lock.lock();
    if (wec) {
        // Records after this one would never be found (replay ends here):
        // none counts until the journal starts over.
        broken_ = true;
        first_broken_ = std::min(first_broken_, taken);
        return abandon(wec);
    }
    done_.push_back(taken);
    std::sort(done_.begin(), done_.end());
    while (!done_.empty() && done_.front() == written_ + 1) {
        ++written_;
        done_.erase(done_.begin());
    }
    cv_.notify_all();
    seq = taken;
    return {};
}

std::error_code journal::abandon(std::error_code ec)
{
    --unsettled_;
    --awaiting_;
    cv_.notify_all();
    return ec;
}

std::error_code journal::durable(std::uint64_t seq)
{
    std::unique_lock lock(mutex_);
    while (synced_ < seq) {
        if (seq >= first_broken_)
            return abandon(sync_error_ ? sync_error_ : std::make_error_code(std::errc::io_error));
        if (!syncing_ && written_ >= seq) {
            // The leader: one fdatasync for every append written by now.
            syncing_ = true;
            const std::uint64_t upto = written_;
            lock.unlock();
            const int src = sys::fdatasync(fd_.get());
            const std::error_code sec = src != 0 ? last_system_error() : std::error_code{};
            lock.lock();
            syncing_ = false;
            if (sec) {
                // What the failed sync covered is in doubt (the kernel may
                // have dropped the pages): none of it counts.
                broken_ = true;
                first_broken_ = std::min(first_broken_, synced_ + 1);
                sync_error_ = sec;
            } else {
                synced_ = std::max(synced_, upto);
            }
            cv_.notify_all();
            continue;
        }
        cv_.wait(lock);
    }
    --awaiting_;
    return {};
}

record_standing standing(const journal::record& r, std::string_view job, std::string_view node,
                         std::span<const std::uint64_t> complete,
                         std::span<const std::uint64_t> removed)
{
    // A packed record's bucket holds its version (a bucket spans fewer than
    // bucket_max_versions): one that does not is not a record a daemon
    // wrote, and would name a bucket far ahead.
    const bool bucket_fits =
        r.bucket == 0 || (r.bucket <= r.version && r.version - r.bucket < bucket_max_versions);
    if (r.job != job || r.node != node || r.version == 0 || r.version >= journal_max_version ||
        r.rank >= journal_max_ranks || !bucket_fits)
        return record_standing::foreign;
    const std::uint64_t newest = complete.empty() ? 0 : complete.back();
    const std::uint64_t oldest = complete.empty() ? 0 : complete.front();
    // A packed version completes with its bucket, which may still wait for
    // it when newer versions of another bucket are complete (versions
    // become whole out of order).
    const bool settled =
        r.bucket ? r.version < oldest ||
                       std::binary_search(complete.begin(), complete.end(), r.version) ||
                       std::binary_search(removed.begin(), removed.end(), r.version)
                 : r.version <= newest;
    return settled ? record_standing::settled : record_standing::pending;
}

}  // namespace iofwd::store
