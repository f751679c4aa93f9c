#pragma once
// What became of each version one rank wrote through its connection, and the
// io_wait calls waiting on one: the answers to QUERY (io_test, io_wait,
// io_flush_span) and the transfers still in flight (READ_REQ reads a version
// from staging memory while it is there); and durable_through(), which the
// session writes into the rank's mailbox so that io_wait and io_test on those
// versions ask nothing.
//
// A version's states, in order:
//
//   pulling --pulled--> flushing --committed--> durable
//                          |                       ^
//                          +--in the journal-------+  (its object committed later)
//      |                   |
//      +-----failed--------+--------------------> failed
//      |
//      +--forgotten (io_write itself failed: the version never existed)
//
// A wait on a pulling or flushing version is answered when it ends (durable
// or failed). No I/O here: the session sends what it returns.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "protocol.hpp"

namespace iofwd::iod {

class transfer;

class version_table final {
public:
    struct record {
        proto::version_state_t state = proto::version_state_t::pulling;
        std::uint64_t size = 0;
        std::uint32_t crc32c = 0;
        std::error_code error;
        std::string why;
        // When durable: its flush began and ended (proto::monotonic_ns()).
        std::uint64_t flush_start_ns = 0;
        std::uint64_t durable_ns = 0;
        // When its write arrived, and when it was staged (WRITE_DONE): the
        // time the rank was kept waiting, for the job's summary.
        std::uint64_t arrived_ns = 0;
        std::uint64_t staged_ns = 0;
    };

    // A new version of `size` bytes that arrived at `arrived_ns`, its
    // transfer `t` starting.
    void pulling(std::uint64_t version, std::uint64_t size, std::weak_ptr<transfer> t,
                 std::uint64_t arrived_ns);
    // Every byte is in staging memory since `staged_ns`.
    void flushing(std::uint64_t version, std::uint64_t staged_ns);
    // In the store, whole.
    void durable(std::uint64_t version, std::uint32_t crc32c, std::uint64_t flush_start_ns,
                 std::uint64_t durable_ns);
    // Durable in the node's journal: answered as durable, while its
    // transfer still commits the object (in_flight() goes on serving it
    // from staging until committed()).
    void journaled(std::uint64_t version, std::uint32_t crc32c, std::uint64_t flush_start_ns,
                   std::uint64_t durable_ns);
    // A journaled version's object is committed (or could not be).
    void committed(std::uint64_t version) { flight_.erase(version); }
    // Could not be made durable after io_write returned for it.
    void failed(std::uint64_t version, std::error_code ec, std::string why);
    // io_write failed for it: no such version (a wait on it learns so).
    void forget(std::uint64_t version);

    // The answer to `q` now, or nothing when it waits for the version to end
    // (answer_waits gives it then). `rank` names the rank in messages.
    std::optional<proto::message> query(const proto::query_msg& q, std::uint32_t rank);
    // The answers to every wait on `version`, which has ended.
    std::vector<proto::message> answer_waits(std::uint64_t version, std::uint32_t rank);

    const record* find(std::uint64_t version) const;
    // The transfer of `version` while it is in flight (nullptr otherwise).
    std::shared_ptr<transfer> in_flight(std::uint64_t version) const;
    void each_in_flight(const std::function<void(const std::shared_ptr<transfer>&)>& fn) const;

    // Where the rank's versions start in this connection (checkpoint_writes).
    void first_version(std::uint64_t v) noexcept { durable_through_ = v - 1; }
    // The newest version that every version from the first up to it is
    // durable (first - 1: none yet). A version io_write failed for, or one
    // that failed, stops it there. It never goes back: the rank answers its
    // io_wait from it (the mailbox), so failed() and forget() must never
    // come for a durable version (checkpoint_writes: a durable version's
    // end takes the branch that commits its object, never those).
    std::uint64_t durable_through() const noexcept { return durable_through_; }

    std::uint64_t durable_count() const noexcept { return durable_count_; }
    std::uint64_t durable_bytes() const noexcept { return durable_bytes_; }

private:
    std::map<std::uint64_t, record> versions_;
    std::multimap<std::uint64_t, std::uint64_t> waits_;        // version -> cookie
    std::map<std::uint64_t, std::weak_ptr<transfer>> flight_;  // versions still on their way
    std::uint64_t durable_count_ = 0;
    std::uint64_t durable_bytes_ = 0;
    std::uint64_t durable_through_ = 0;
};

}  // namespace iofwd::iod
