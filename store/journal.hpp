#pragma once
// A node's journal of small versions: how a version of a few KiB becomes
// durable at the cost of one fdatasync shared with the versions beside it,
// instead of a file, its fsync, a rename and a directory fsync of its own.
//
// The daemon appends a version's bytes to its node's journal, tells the rank
// it is durable once the journal's fdatasync returns, and then commits the
// version's object as it always did (store/backend.hpp); once that object
// and the node's manifest that lists it are durable, and the node's arrival
// at the version's tally is made, the record is settled, no longer needed
// (job::rank_durable). A daemon that dies
// in between leaves the record; the next daemon to claim the job on the node
// replays the journal (replay()) and commits what is missing before it takes
// new versions, and completes the versions whose every rank of the node it
// finds there (a record says how many ranks the node has and nodes the job).
// Nothing a reader sees changes: objects, manifests and COMPLETE are written
// as before, only later than the rank's answer.
//
// The file (the directory store keeps it beside the node's claim, as
// "<job>/.<node>.journal"; backend::open_journal):
//   [0, 4096), [4096, 8192)  two header slots: magic, generation, crc32c;
//                            the valid one with the higher generation counts
//   from 8192, 4 KiB aligned records: a header block (magic, its crc32c,
//                            generation, version, size, rank, the bytes'
//                            crc32c, the node's ranks and the job's nodes,
//                            the version's bucket of packs, job and node
//                            names) and the bytes, padded to 4 KiB (records
//                            of an iofwd before the bucket, or the ranks and
//                            nodes, were kept, with other magics, are read
//                            too, with 0 for what they lack)
// Only records of the current generation that follow one another from 8192,
// each whole and matching both checksums, count: a torn append (a crash in
// the middle of one) ends the journal there, and it was never reported
// durable. Starting over (reset()) writes the other header slot with the
// next generation and syncs it before any new record goes in, so that no
// record of an older generation is ever taken for a new one.
//
// The file is filled with zeros up to its size once (prepare(), on a thread
// of its own): an append then overwrites blocks that already exist, and its
// fdatasync flushes data only, never the file system's metadata.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "fd.hpp"

namespace iofwd::store {

class journal final {
public:
    static constexpr std::uint64_t block = 4096;
    static constexpr std::uint64_t header_bytes = 2 * block;
    static constexpr std::size_t max_name = 255;
    // The largest record's bytes (IOFWD_JOURNAL_MAX's range in the settings
    // table, libio/common/config.cpp, ends here): replay
    // reads each record whole into memory, and a record that claims more is
    // not one this iofwd wrote (a damaged or planted journal, a sparse file
    // of any length); replay ends there, as at a torn append.
    static constexpr std::uint64_t max_record = std::uint64_t{1} << 30;

    // Whose bytes a record holds: one node-local rank's part of a version,
    // and how many ranks the node and nodes the job have (0: not known, a
    // record of an older iofwd).
    struct origin {
        std::string_view job;
        std::string_view node;
        std::uint64_t version = 0;
        std::uint32_t rank = 0;
        std::uint32_t ranks = 0;
        std::uint32_t nodes = 0;
        // Its version's bucket when the daemon commits the node's small
        // versions in packs (docs/small-versions.md); 0: as objects.
        std::uint64_t bucket = 0;
    };

    struct record {
        std::string job;
        std::string node;
        std::uint64_t version = 0;
        std::uint32_t rank = 0;
        std::uint32_t ranks = 0;
        std::uint32_t nodes = 0;
        std::uint64_t bucket = 0;  // origin::bucket (0 in records of an older iofwd too)
        std::uint32_t crc32c = 0;  // of data
        std::vector<std::byte> data;
    };

    // `fd`: the journal file, open for reading and writing, held only by
    // the claim's holder; `capacity`: how large it grows (at least three
    // blocks). replay() comes first.
    journal(unique_fd fd, std::uint64_t capacity);
    journal(const journal&) = delete;
    journal& operator=(const journal&) = delete;
    // Waits for prepare()'s thread.
    ~journal();

    // Reads the header slots (a file whose header is damaged, or new, is at
    // generation 0), then the records of the current generation in order,
    // each checked (see above); sets where appends continue. An error only
    // for a read that fails. Whole records after one that is not are not
    // taken either, but said in damage().
    std::error_code replay(std::vector<record>& out);
    // What the last replay() left behind a record that does not read, in
    // words (empty: nothing).
    const std::string& damage() const noexcept { return damage_; }
    // Forgets every record: the next generation, durable when it returns.
    // Refused (device_or_resource_busy) while a record is not settled, or
    // is written and not yet waited for (durable()).
    std::error_code reset();
    // Fills the file with zeros up to its capacity on a thread of its own,
    // unless it is that large already; appends are taken once it is.
    void prepare();
    bool ready() const noexcept { return ready_.load(std::memory_order_acquire); }
    // Why prepare() left the journal unused (a full disk), once it has;
    // empty otherwise.
    std::string fill_error() const;

    // Appends a record and returns once it is durable, with every record
    // written meanwhile under the same fdatasync. `crc` is
    // data's crc32c. std::errc::no_buffer_space: it does not fit now (not prepared yet,
    // larger than the journal, or the journal full of records not yet
    // settled): the caller commits the version without it. Any other error
    // is the file's (the record counts as not written).
    std::error_code append(const origin& o, std::span<const std::byte> data, std::uint32_t crc);
    // append() in two steps, for a caller that writes several records and
    // then waits once for them all: write() puts the record in the file
    // (not durable yet) and numbers it in `seq`; durable(seq) returns once a
    // fdatasync covers it. Every record write() took must be waited for:
    // until durable() returns for it the journal does not start over
    // (reset() is refused, and write() returns no_buffer_space where it
    // would). Errors as append()'s, each step's own; `seq` is set only
    // when write() succeeds.
    std::error_code write(const origin& o, std::span<const std::byte> data, std::uint32_t crc,
                          std::uint64_t& seq);
    std::error_code durable(std::uint64_t seq);
    // One appended record is no longer needed: its object is committed and
    // the node's manifest that lists it is durable and counted at the
    // version's tally (or its version was abandoned; job::rank_durable).
    // When every record is settled and none awaits durable(), and the next
    // does not fit or the journal is past half full, it starts over
    // (reset()) at that append.
    void settled();
    // Records appended and not settled.
    std::uint64_t unsettled() const;

    // The bytes a record takes in the journal.
    static std::uint64_t footprint(std::uint64_t bytes);

private:
    std::error_code write_header(std::uint64_t generation);
    // reset() with the mutex held.
    std::error_code start_over();
    // A record is unsettled or awaits durable(): the journal may not start
    // over (with the mutex held).
    bool held() const noexcept { return unsettled_ > 0 || awaiting_ > 0; }
    // A record written (or being written) that will never count: its
    // counts go back, with the mutex held; returns `ec`.
    std::error_code abandon(std::error_code ec);

    unique_fd fd_;
    const std::uint64_t capacity_;
    std::thread filler_;
    std::atomic<bool> ready_{false};
    std::atomic<bool> stop_{false};
    std::string fill_error_;  // under mutex_

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::uint64_t generation_ = 0;
    std::uint64_t tail_ = header_bytes;  // where the next record goes
    std::string damage_;                 // replay(): whole records left, in words
    std::uint64_t unsettled_ = 0;        // appended (or being appended), not settled
    std::uint64_t awaiting_ = 0;         // reserved by write(), durable() not returned
    // Group commit: appends are numbered in the order of their place in the
    // file. written_: every append up to it is in the file (done_: those
    // beyond, out of order); a fdatasync begun then covers them all, and
    // synced_ is the highest one covered. An append that failed, or a
    // fdatasync that did, breaks the journal from first_broken_ on: those
    // appends fail, and the journal starts over once none is unsettled or
    // awaiting durable().
    std::uint64_t reserved_ = 0;
    std::uint64_t written_ = 0;
    std::vector<std::uint64_t> done_;
    std::uint64_t synced_ = 0;
    bool syncing_ = false;
    bool broken_ = false;
    std::uint64_t first_broken_ = UINT64_MAX;
    std::error_code sync_error_;
};

// What the next daemon to claim `job` on node `node` does with a record
// its journal holds (job::recover_journal), given the job's complete
// versions, ascending:
enum class record_standing {
    foreign,  // not a record of this job and node, or out of bounds (a copied
              // file): ignored
    settled,  // its version is complete; or, of an unpacked version, not
              // newer than the newest complete one, and of a packed one,
              // older than the oldest (retention may have removed it since)
    pending,  // its part is committed again at the claim
};
// `removed`: the versions `iofwd rm` took out of their buckets or
// retention retired, ascending (catalog.hpp's hidden_versions): a packed
// record of one is settled.
record_standing standing(const journal::record& r, std::string_view job, std::string_view node,
                         std::span<const std::uint64_t> complete,
                         std::span<const std::uint64_t> removed = {});
// Ranks of a job on one node, as the protocol bounds them (proto::max_ranks),
// and versions: no daemon numbers that far, so that the versions after
// never wrap. A record beyond either is foreign; packs keep the same bounds.
inline constexpr std::uint32_t journal_max_ranks = 1u << 16;
inline constexpr std::uint64_t journal_max_version = 1ull << 48;

}  // namespace iofwd::store
