#pragma once
// One version of one rank on its way from the rank's buffer to the store:
// pulls [0, length) chunk by chunk into staging slots with UCX gets, hands each
// pulled chunk to the flusher (checksum, write at its offset), and commits the
// object once every chunk is written. Pulls of later chunks overlap flushes of
// earlier ones; a buffer larger than the staging memory streams through it.
//
// All or nothing: if any pull or write fails, or the rank goes away before the
// last byte is pulled, the object is abandoned and nothing of it is visible.
// Lives on the event-loop thread (the flusher only runs its jobs).
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <utility>  // before Asio (Boost 1.74 needs it)
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include <ucp/api/ucp.h>

#include "store/layout.hpp"
#include "chunk_claims.hpp"
#include "held_bytes.hpp"
#include "pushed_chunk.hpp"
#include "staging.hpp"
#include "store/backend.hpp"
#include "store/journal.hpp"

namespace iofwd::ucx {
class worker;
}

namespace iofwd::iod {

class flush_policy;
class puller;
class worker_driver;

// Everything a transfer uses of the daemon; nothing else is reachable from it.
struct transfer_resources {
    boost::asio::io_context& loop;
    ucx::worker& worker;    // the loop's UCX worker: gets, and pushed chunks no puller takes
    worker_driver& driver;  // progresses it soon after a post, and polls while a pull runs on it
    staging& slots;
    flush_policy& flushes;  // store writes and commits, and the count of pulls
};

class transfer final : public std::enable_shared_from_this<transfer> {
public:
    struct source {
        ucp_ep_h ep = nullptr;
        ucp_rkey_h rkey = nullptr;
        std::uint64_t address = 0;  // the rank's buffer
        // The rank pushes the chunks (active-message rendezvous) instead of
        // the daemon getting them; they come in through arrived(), each on
        // the worker it names.
        bool push = false;
        std::uint64_t sender = 0;  // the rank's session, as the pullers know it
        // The rank's process (SO_PEERCRED; 0 when unknown): once it has
        // exited, a pull UCX never completed can no longer write into its
        // staging slot, which is then returned.
        int pid = 0;
        // The write's cookie, and where its chunks' receives may be posted
        // ahead (null: each chunk waits for the loop when it comes).
        std::uint64_t cookie = 0;
        chunk_claims* claims = nullptr;
    };
    // When the first chunk's flush job began (creating the object, writing)
    // and when the commit was back on the loop, on proto::monotonic_ns()'s
    // clock: the span a flush throughput is measured over. An empty write
    // has no job: its span starts at the commit too.
    struct flush_span {
        std::uint64_t start_ns = 0;
        std::uint64_t durable_ns = 0;
    };
    struct handlers {
        // Every byte is in staging memory: the rank may reuse its buffer.
        std::function<void()> pulled;
        // Durable in the node's journal (journal_into), with this crc32c
        // and flush span; the object's commit follows (finished). `packed`:
        // the bytes, copied out of staging, when the version goes into a
        // pack (journal_into's bucket) and no object of it is written.
        using packed_bytes = std::shared_ptr<const std::vector<std::byte>>;
        std::function<void(std::uint32_t crc, flush_span span, packed_bytes packed)> logged;
        // The end: committed (ec empty, entry and span filled) or abandoned
        // (ec, why).
        std::function<void(std::error_code ec, const std::string& why,
                           const store::manifest_entry& entry, flush_span span)>
            finished;
    };

    // Opens what the chunks are written into, on a flusher thread (the first
    // chunk's job): a store object, or a range of a forwarded file.
    using opener =
        std::function<std::error_code(std::uint64_t size, std::unique_ptr<store::object_writer>&)>;

    // `object` names the destination in messages; `inline_data`: a small
    // write's bytes, already here (no pull).
    transfer(transfer_resources r, source src, std::uint32_t rank, std::uint64_t version,
             std::uint64_t length, std::string object, opener open, handlers h,
             held_bytes inline_data = {});

    // A write of one chunk is appended to `log` first (store/journal.hpp),
    // as a record of `job` and `node` (whose `ranks` node-local ranks and
    // the job's `nodes` the record keeps, for a daemon that completes the
    // version from the journal after a crash), before its object is
    // written; it is then reported to handlers::logged. A journal that takes
    // no more (full, not yet prepared) leaves the write as any other.
    // `bucket` (not 0): the node's versions are committed in packs
    // (job::rank_durable): a logged write's bytes are handed to `logged`
    // and no object is written. Before start().
    void journal_into(std::shared_ptr<store::journal> log, std::string job, std::string node,
                      std::uint32_t ranks, std::uint32_t nodes, std::uint64_t bucket);
    // Where this transfer's flushes and commit queue among the node's
    // (flusher::submit); by default when it was made. Before start().
    void order_flushes(std::uint64_t order) noexcept { order_ = order; }
    // Its store writes never run beside another transfer's of the same
    // `key` (flusher::submit): one file's buffered writes. Before start().
    void serialize_flushes(const void* key) noexcept { flush_key_ = key; }

    void start();
    // A pushed chunk [offset, offset + length) announced by UCX (`p`, an
    // active-message rendezvous descriptor and its worker). UCS_INPROGRESS: taken, received
    // into staging when a slot is free; an error: refused (the rank's send
    // fails with it), e.g. a chunk that is not one of this write's.
    ucs_status_t arrived(std::uint64_t offset, std::uint64_t length, pushed_chunk p);
    // The rank went away: pulls not yet done fail; what was fully pulled is
    // still flushed and committed.
    void source_gone();

    std::uint64_t version() const noexcept { return version_; }
    // Every byte pulled and none released from staging yet.
    bool fully_staged() const noexcept;
    // Calls fn(offset, bytes) for each chunk, in order, straight from staging
    // memory; only when fully_staged(). Synchronous: no slot can be released
    // while it runs (releases happen on this same thread).
    void for_each_staged(const std::function<void(std::uint64_t, std::span<const std::byte>)>& fn) const;
    std::uint64_t length() const noexcept { return length_; }
    bool all_pulled() const noexcept { return pulled_bytes_ == length_; }
    // For progress reports: where it goes, since when (monotonic_ns), and how
    // far it got.
    const std::string& object() const noexcept { return object_; }
    std::uint32_t rank() const noexcept { return rank_; }
    std::uint64_t started_ns() const noexcept { return started_ns_; }
    std::uint64_t pulled_bytes() const noexcept { return pulled_bytes_; }
    std::uint64_t flushed_bytes() const noexcept { return flushed_bytes_; }

private:
    struct chunk {
        std::uint32_t index = 0;
        std::uint64_t offset = 0;
        std::uint64_t size = 0;
    };
    struct pull_request;

    void request_slot();
    void on_slot(slot s);
    // Posts one UCX operation filling slot `s` with chunk `c` (post fills in
    // the callback and returns UCX's status pointer) and tracks it.
    template <typename Post>
    void pull_into(slot s, chunk c, Post&& post);
    void on_pulled(slot s, chunk c, ucs_status_t st);
    // The store write of a pulled chunk (and with `commit`, its object's
    // commit); `logged`: the crc32c of a chunk already in the node's journal.
    void flush_chunk(slot s, chunk c, bool commit, std::shared_ptr<std::uint32_t> logged);
    // `committed`: the job committed the object too (a one-chunk write).
    void on_flushed(slot s, chunk c, std::uint32_t crc, std::error_code ec, bool committed);
    void fail(std::error_code ec, std::string why);
    void check_done();
    // The commit's outcome (the whole object's crc32c) goes to h_.finished.
    void report_commit(std::error_code ec, std::uint32_t crc);
    // Receives pushed chunk `c` into slot `s` on its puller's thread.
    void receive_via_puller(slot s, chunk c, pushed_chunk p);
    // Receives an arrived pushed chunk into slot `s`, on its puller or on
    // the loop's worker.
    void receive_pushed(slot s, chunk c, pushed_chunk p);
    // A chunk not yet come that a slot could be claimed for (next_claim_).
    bool claim_wanted();
    // Posts the claim of that chunk into slot `s` (chunk_claims.hpp).
    void post_claim(slot s);
    // What names the chunk at `offset` among the claims.
    chunk_claims::key claim_key(std::uint64_t offset) const noexcept
    {
        return {src_.sender, src_.cookie, offset};
    }
    // A puller took the claim `req`: its pull counts from now (on the loop).
    static void claim_taken(pull_request* req);
    // Takes back the claim `req` if no puller took it (true: its pull
    // undone, `s` its slot); false: a puller receives into it, and its
    // chunk counts as come (a double of it is refused).
    bool retract_claim(pull_request* req, slot& s);
    // Every claim still posted goes back, their slots to staging.
    void retract_claims();
    static void get_done(void* request, ucs_status_t status, void* user_data);
    static void recv_done(void* request, ucs_status_t status, std::size_t length, void* user_data);
    // A pull ended (back on the loop), whichever worker did it.
    static void pull_done(pull_request* req, ucs_status_t status);
    void drop_pending();
    // Pulls UCX never completed after the rank went away (gets, or pushed
    // chunks a puller receives) keep their slots, which UCX could still write
    // into, until the rank's process has exited and the workers have had a
    // moment to deliver what it sent before: then the slots go back. While
    // the process lives they stay held; so they do when its exit cannot be
    // watched (no pid, no pidfd), as they all did before.
    void orphan_pulls();
    // Waits for src_.pid to exit (a pidfd reads ready then), then returns
    // the slots after a grace.
    void watch_exit();
    void return_orphaned_slots();
    // An orphan's slot back to staging, no longer counted as stalled.
    void give_back_orphaned(slot s);
    // A pull began or ended; `loop_worker`: on the loop's own worker, which
    // is then polled instead of slept on (a get of user memory is many
    // active-message fragments, and a wakeup per fragment costs more than
    // the copy); a puller spins its own.
    void pull_begun(bool loop_worker);
    void pull_ended(bool loop_worker);

    transfer_resources r_;
    source src_;
    std::uint32_t rank_;
    std::uint64_t version_;
    std::uint64_t length_;
    std::string object_;
    opener open_;
    // The store object, created by the first chunk's flush job (not on
    // io_write's critical path).
    struct target;
    std::shared_ptr<target> target_;
    handlers h_;
    held_bytes inline_;       // let go once staged
    const bool from_inline_;  // the bytes came with the request or the mailbox
    // What a flush job needs of the journal (journal_into), by value: the
    // job must not hold the transfer, whose last reference would then be
    // dropped on the flusher thread (and the session's with it).
    struct journaling;
    std::shared_ptr<const journaling> journal_;

    std::uint64_t started_ns_;
    std::uint64_t order_;
    const void* flush_key_ = nullptr;
    std::uint64_t next_offset_ = 0;
    std::uint32_t next_index_ = 0;
    std::uint64_t pulled_bytes_ = 0;
    std::uint64_t flushed_bytes_ = 0;
    unsigned pulls_in_flight_ = 0;
    unsigned flushes_in_flight_ = 0;
    bool waiting_for_slot_ = false;
    bool committing_ = false;
    bool reported_ = false;
    std::vector<slot> held_;                  // per chunk: its slot while staged
    std::uint32_t released_ = 0;
    std::vector<pull_request*> in_flight_;  // owned by UCX until their callback
    struct pushed {
        chunk c;
        pushed_chunk held;
    };
    std::deque<pushed> pending_;   // pushed chunks waiting for a slot
    std::vector<bool> announced_;  // per chunk: already arrived
    // Per chunk: its claim while posted and not known taken (its pull is
    // in in_flight_ already); how many; the next chunk to claim a slot for.
    std::vector<pull_request*> claim_of_;
    unsigned claims_posted_ = 0;
    std::uint32_t next_claim_ = 0;
    std::unique_ptr<boost::asio::steady_timer> grace_;
    std::vector<pull_request*> orphans_;  // still UCX's, their slots still held
    std::unique_ptr<boost::asio::posix::stream_descriptor> exit_watch_;  // a pidfd of src_.pid
    std::vector<std::uint32_t> crcs_;
    std::vector<std::uint64_t> sizes_;
    std::error_code error_;
    std::string why_;
};

}  // namespace iofwd::iod
