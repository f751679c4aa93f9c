#pragma once
// The object-store interface the daemon flushes into. Names are relative,
// '/'-separated paths chosen by layout.hpp; a backend maps them onto its own
// namespace (files under a root directory, RADOS objects in a pool).
//
// Contract for every backend:
//  - an object becomes visible under its name only by commit(), atomically and
//    durably: after commit() returns success it survives a crash of the node,
//    before that nobody sees any of it;
//  - an object_writer destroyed without commit() leaves nothing behind;
//  - write_at() may be called from several threads at once for disjoint ranges.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "crc32c.hpp"
#include "fd.hpp"

namespace iofwd::store {

class object_writer {
public:
    virtual ~object_writer() = default;
    virtual std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) = 0;
    // Like write_at, for a buffer whose memory stays readable up to
    // `capacity` bytes (a staging slot): a backend may then write whole
    // blocks straight from it, past data.size(), and trim at commit.
    virtual std::error_code write_staged(std::span<const std::byte> data, std::uint64_t offset,
                                         std::uint64_t capacity)
    {
        (void)capacity;
        return write_at(data, offset);
    }
    // write_staged that also gives the CRC-32C of `data` (as crc32c() does).
    // A backend whose transport checksums the bytes anyway computes it where
    // the transport finds it again, so that the bytes are read once (rados:
    // the messenger reuses a bufferlist's cached crc). A writer whose bytes
    // nobody keeps a checksum of gives 0 (a forwarded file: iod/files.cpp).
    virtual std::error_code write_checksummed(std::span<const std::byte> data,
                                              std::uint64_t offset, std::uint64_t capacity,
                                              std::uint32_t& crc)
    {
        crc = crc32c(data);
        return write_staged(data, offset, capacity);
    }
    virtual std::error_code commit() = 0;
    // Like commit(), but only if the name is free: errc::exists (and nothing
    // committed) when another object took it first. Backends with names
    // override it.
    virtual std::error_code commit_exclusive()
    {
        return std::make_error_code(std::errc::operation_not_supported);
    }
};

// Proof that this process is the only writer of a job's objects for one node;
// released when destroyed (or when the process dies).
class claim {
public:
    virtual ~claim() = default;
};

class backend {
public:
    virtual ~backend() = default;

    // For humans: "directory /scratch/ckpt".
    virtual std::string describe() const = 0;
    // For store::open: "dir:/scratch/ckpt".
    virtual std::string location() const = 0;

    // Starts an object of `size` bytes (space may be reserved up front, so a
    // full disk is reported here rather than halfway through).
    virtual std::error_code create(const std::string& name, std::uint64_t size,
                                   std::unique_ptr<object_writer>& out) = 0;

    // A small object in one step (create, write, commit).
    virtual std::error_code put(const std::string& name, std::span<const std::byte> data);
    // The same with commit_exclusive(): errc::exists when the name is taken.
    std::error_code put_new(const std::string& name, std::span<const std::byte> data);

    virtual std::error_code read(const std::string& name, std::uint64_t offset,
                                 std::span<std::byte> out) = 0;
    virtual std::error_code size(const std::string& name, std::uint64_t& out) = 0;

    // The names directly under `prefix` ("job/" lists the job's versions),
    // without the prefix, sorted. Uncommitted objects are never listed.
    virtual std::error_code list(const std::string& prefix, std::vector<std::string>& out) = 0;

    // Durable when it returns, also when it says not_found (a name gone
    // only in memory, after a removal a crash or a failed fsync cut short).
    virtual std::error_code remove(const std::string& name) = 0;
    // The same, without waiting until the removal is durable: for what may
    // come back after a crash without harm (a version's objects once its
    // COMPLETE record is removed: an incomplete version, removed again with
    // it). Backends whose removals are durable at once keep remove().
    virtual std::error_code remove_lazily(const std::string& name) { return remove(name); }

    // When `name` was last written, in seconds since the epoch (for listings).
    virtual std::error_code modified(const std::string& name, std::int64_t& out) = 0;

    // What writers that died before commit() left under `dir` and the
    // directories in it: objects list() never shows and nothing reads (the
    // directory backend's temporaries, the rados backend's pieces that no
    // head points to). Full names, sorted. They stop nothing but take space;
    // remove_leftover() deletes one (remove() is for committed names).
    virtual std::error_code leftovers(const std::string& dir, std::vector<std::string>& out) = 0;
    virtual std::error_code remove_leftover(const std::string& name) = 0;

    // Claims `job` on `node` for this process: errc::rank_in_use when another
    // live process holds the claim (two concurrent jobs under one name).
    virtual std::error_code claim_job(const std::string& job, const std::string& node,
                                      std::unique_ptr<claim>& out) = 0;
    // The file of `node`'s journal of small versions of `job` (journal.hpp),
    // created empty when there is none, for the holder of the node's claim
    // only. Stores without one say operation_not_supported: their versions
    // are committed without a journal.
    virtual std::error_code open_journal(const std::string& job, const std::string& node,
                                         unique_fd& out)
    {
        (void)job;
        (void)node;
        (void)out;
        return std::make_error_code(std::errc::operation_not_supported);
    }
    // The same file for reading only, as it is, for a tool that looks
    // (nothing created): not_found when the node has none.
    virtual std::error_code read_journal(const std::string& job, const std::string& node,
                                         unique_fd& out)
    {
        (void)job;
        (void)node;
        (void)out;
        return std::make_error_code(std::errc::operation_not_supported);
    }
    // The nodes with a journal of `job` (open_journal made it), whether or
    // not their claim file is still there; none for a store without
    // journals.
    virtual std::error_code journal_nodes(const std::string& job, std::vector<std::string>& out)
    {
        (void)job;
        out.clear();
        return {};
    }
    // The nodes that have ever claimed `job`, whether a live process holds
    // their claim now or not (claim_job tells): what a tool must claim to
    // know that no daemon writes the job while it changes it.
    virtual std::error_code claimants(const std::string& job, std::vector<std::string>& out) = 0;

    // Tallies: how the nodes of a job learn, at a constant cost each however
    // many nodes there are, which of them arrived last somewhere (at a
    // version's commit: catalog.hpp), and what each brought. A tally has a
    // name of the layout's ("job/v00000012/ARRIVED"); list() never shows it,
    // remove() never takes it: remove_arrivals() does. A member is a name of
    // the layout's (a node's: letters, digits, '.', '_', '-', at most
    // max_member bytes); its note is what it brings (at most max_note
    // letters, digits and '+').
    //
    // arrive() adds `member` with `note` and gives in `count` how many
    // arrivals the tally held just after: the caller whose arrival made it
    // reach N knows it was the last of N. A member that arrives twice (a
    // retry) may be counted twice, so a count of N or more says "perhaps
    // all": arrivals() tells. Whoever arrived last sees every arrival
    // before its own.
    static constexpr std::size_t max_member = 200;
    static constexpr std::size_t max_note = 40;
    struct arrival {
        std::string member;
        std::string note;
        bool operator==(const arrival&) const = default;
    };
    virtual std::error_code arrive(const std::string& tally, const std::string& member,
                                   const std::string& note, std::uint64_t& count) = 0;
    // arrive(), and the arrival counted also under each of the tally's keys
    // `first` to `last` (the versions the arrival holds, say; at most
    // max_keys of them): `most` is at least the highest of those keys'
    // counts just after, so that whoever makes a key's count reach N knows
    // N arrivals, perhaps all, came with it, without reading them. A
    // member's keys are counted once however often it arrives. A backend
    // that keeps no keys gives the tally's whole count, which is never
    // lower: as sound, though every arrival from the Nth on then reads.
    static constexpr std::uint64_t max_keys = 1u << 16;
    static bool keys_taken(std::uint64_t first, std::uint64_t last) noexcept
    {
        return first <= last && last - first < max_keys;
    }
    virtual std::error_code arrive_keyed(const std::string& tally, const std::string& member,
                                         const std::string& note, std::uint64_t first,
                                         std::uint64_t last, std::uint64_t& most)
    {
        if (!keys_taken(first, last))
            return std::make_error_code(std::errc::invalid_argument);
        return arrive(tally, member, note, most);
    }
    // The arrivals, each member once, sorted by member (not_found: none
    // yet; errc::corrupt: a member that brought two notes, or a record
    // that is not one).
    virtual std::error_code arrivals(const std::string& tally, std::vector<arrival>& out) = 0;
    // Removes a tally and its keys, like remove_lazily(): only ever with its version
    // (catalog.hpp's remove_version). One that is not there is no error.
    virtual std::error_code remove_arrivals(const std::string& tally) = 0;

    // After errc::unsafe_path for `name`: which part of it is refused and
    // why ("/s/job belongs to uid 1001, not to you"), for a message.
    virtual std::string explain(const std::string& name) const
    {
        (void)name;
        return {};
    }
};

struct open_options {
    bool group_readable = false;  // the directory store: 0750/0640 instead of 0700/0600
};

// An arrival as the backends keep it, "<member>=<note>" ('=' is in no
// member's name): false when the member or the note is not what a tally
// takes (backend::arrive). parse_arrival is the reverse, false for text that
// is not one.
bool format_arrival(const std::string& member, const std::string& note, std::string& out);
bool parse_arrival(std::string_view text, backend::arrival& out);
// The arrivals in the order found, one member's repeats with the same note
// folded: sorted by member, or errc::corrupt for a member with two notes.
std::error_code fold_arrivals(std::vector<backend::arrival>& found);

// Opens a store from its location: "dir:/path" or a plain path for the
// directory backend. On failure `why` says what is wrong in words.
std::error_code open(const std::string& location, std::unique_ptr<backend>& out,
                     std::string& why, const open_options& opts = {});

// Points rados: stores opened afterwards at a cluster, as iod's --ceph-conf,
// --ceph-user and --ceph-keyring do: through the IOFWD_CEPH_* environment
// the rados backend reads. An empty value leaves its variable alone.
void set_ceph_options(const std::string& conf, const std::string& user,
                      const std::string& keyring);

// `what` failed with `ec` for object `name`: a sentence, naming the part
// of the store that was refused when that is why.
std::string failure(const backend& st, const std::string& name, std::error_code ec);

}  // namespace iofwd::store
