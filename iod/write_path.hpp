#pragma once
// The one way a rank's write comes into the daemon, checkpoint versions and
// the MPI shim's forwarded file writes alike: a rank has at most one write
// between its announcement (WRITE_REQ, FILE_WRITE or a mailbox record) and
// staging. start() makes its transfer and, when every byte is staged, answers
// WRITE_DONE (unless it came from the mailbox, whose writer did not wait) and
// gives the mailbox space back; the transfer's end is then the caller's to
// handle (a version's state, a file's error), told whether the rank still
// waits for that write.
//
// It also matches the chunks a rank pushes (UCX rendezvous) to that write:
// chunks that arrive before their announcement is read from the socket are
// kept for it (bounded), and given back unread when it is refused.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "store/layout.hpp"
#include "pushed_chunk.hpp"
#include "transfer.hpp"
#include "ucx.hpp"

namespace iofwd::iod {

class session;

class write_path final {
public:
    explicit write_path(session& s) : s_(s) {}

    struct request {
        std::uint64_t cookie = 0;
        // > 0: from the mailbox, up to this position (io_write has returned
        // already; the bytes are in `data`).
        std::uint64_t mail_end = 0;
        // What WRITE_DONE reports (the version; 0 for a file write).
        std::uint64_t version = 0;
        std::uint64_t length = 0;
        std::string object;  // the destination, in messages
        transfer::source src;
        transfer::opener open;
        held_bytes data;  // a small write's bytes, already here
        ucx::rkey key;    // a file write's remote key, held while it is pulled
        // Where its flushes queue (transfer::order_flushes); 0: when it starts.
        std::uint64_t order = 0;
        // Whose store writes its own never run beside (transfer::serialize_flushes).
        const void* flush_key = nullptr;
        // The transfer exists and is about to start (a version's record
        // points at it from now on).
        std::function<void(const std::shared_ptr<transfer>&)> created;
        // Every byte staged (before WRITE_DONE goes out).
        std::function<void()> pulled;
        // A version's journal (transfer::journal_into; null: none) and what
        // is said when the write is durable there, before `finished`.
        std::shared_ptr<store::journal> journal;
        std::string journal_job, journal_node;
        std::uint32_t journal_ranks = 0, journal_nodes = 0;
        std::uint64_t journal_bucket = 0;  // transfer::journal_into's bucket
        decltype(transfer::handlers::logged) logged;
        // The transfer's end; `waiting`: the rank still waits for this write's
        // answer (it was not staged: io_write fails with `ec`).
        std::function<void(std::error_code ec, const std::string& why,
                           const store::manifest_entry& entry, transfer::flush_span span,
                           bool waiting)>
            finished;
    };

    // A write announced that may start later (a file write waiting behind
    // an overlapping one): no other write may begin meanwhile.
    void reserve(std::uint64_t cookie, bool from_mail);
    // The reserved write will not start after all (the rank went away).
    void unreserve();
    // Starts `r` (reserved or not) and returns its transfer.
    std::shared_ptr<transfer> start(request r);

    // A write is announced and not yet staged.
    bool busy() const noexcept { return current_ != nullptr || reserved_; }
    // The cookie of that write, for messages.
    std::uint64_t current_cookie() const noexcept { return cookie_; }
    // The transfer being pulled when it is a file write (versions are found
    // through the version table).
    std::shared_ptr<transfer> current() const { return current_; }
    bool current_is_file() const noexcept { return current_ && current_version_ == 0; }

    // The newest cookie the rank announced (chunks of a later one are early).
    void announced(std::uint64_t cookie) noexcept { last_cookie_ = std::max(last_cookie_, cookie); }
    // A chunk the rank pushed: to the write being pulled, kept for one still
    // being announced, or refused.
    ucs_status_t pushed(std::uint64_t cookie, std::uint64_t offset, std::uint64_t length,
                        pushed_chunk p);
    // Gives back the early chunks of `cookie` (0: all of them).
    void release_early(std::uint64_t cookie);
    // The rank went away: the write being pulled is discarded, unless its
    // bytes came from the mailbox (they are here).
    void source_gone();
    // The write being staged is a file write from the mailbox (the file
    // must stay open until it lands).
    bool file_from_mail() const noexcept
    {
        return (reserved_ || current_is_file()) && from_mail_;
    }

private:
    void adopt_early(std::uint64_t cookie);
    // The write with serial `n` is staged or ended: the next may begin.
    void settled(std::uint64_t n, std::uint64_t mail_end);

    session& s_;
    std::shared_ptr<transfer> current_;  // being pulled
    std::uint64_t current_serial_ = 0;
    std::uint64_t current_version_ = 0;
    std::uint64_t next_serial_ = 1;
    std::uint64_t cookie_ = 0;
    bool reserved_ = false;
    bool from_mail_ = false;
    ucx::rkey key_;
    std::uint64_t last_cookie_ = 0;
    struct early_chunk {
        std::uint64_t cookie, offset, length;
        pushed_chunk held;
    };
    std::vector<early_chunk> early_;
};

}  // namespace iofwd::iod
