#pragma once
// A rank's checkpoint versions: WRITE_REQ and the mailbox's version records
// start them (through the session's write path) and number them, the version
// table follows each to durable or failed, QUERY reads the table, and
// READ_REQ serves a version from staging memory while the daemon still holds
// all of it. A durable version is reported to the job (job.hpp), which writes
// the node's manifest once every rank has it.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "held_bytes.hpp"
#include "mailbox.hpp"
#include "protocol.hpp"
#include "version_table.hpp"

namespace iofwd::iod {

class session;

class checkpoint_writes final {
public:
    explicit checkpoint_writes(session& s) : s_(s) {}

    // At CONNECT: where this rank's versions start.
    void first_version(std::uint64_t v) noexcept
    {
        next_version_ = v;
        versions_.first_version(v);
    }
    std::uint64_t next_version() const noexcept { return next_version_; }

    void on_write_req(proto::write_req_msg& m);
    void on_query(const proto::query_msg& m);
    void on_read_req(const proto::read_req_msg& m);
    // A version record from the mailbox (io_write has returned for it).
    void from_mail(mailbox::reader::record& r);
    // What is wrong with such a record; empty: nothing.
    std::string mail_problem(const mailbox::reader::record& r) const;

    const version_table& versions() const noexcept { return versions_; }

private:
    // A new version of the rank's buffer: its bytes inline (`data`), or
    // pulled; from the mailbox when mail_end > 0.
    void begin(std::uint64_t cookie, std::uint64_t length, held_bytes data,
               std::uint64_t mail_end);
    // The version is durable (in the node's journal, its object still to
    // come, or in its object): in the table, and said in the rank's mailbox.
    void now_durable(std::uint64_t version, std::uint32_t crc, std::uint64_t flush_start_ns,
                     std::uint64_t durable_ns, bool journaled);
    void send_all(std::vector<proto::message> answers);

    session& s_;
    version_table versions_;
    // Bytes of versions durable in the journal that go into the node's
    // pack (transfer::journal_into), from their append to their end.
    std::map<std::uint64_t, std::shared_ptr<const std::vector<std::byte>>> packed_;
    std::uint64_t next_version_ = 1;
};

}  // namespace iofwd::iod
