#pragma once
// Reading checkpoints back, and asking the store what is complete: io_read
// (from the daemon's memory while it still holds the whole version, else from
// the store, crc32c checked), io_latest and io_latest_verified (which work
// before io_init too, for a restart), and io_finalize's check that the
// newest version the rank wrote is complete on every node.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <system_error>

#include "connection.hpp"
#include "settings.hpp"
#include "store/backend.hpp"

namespace iofwd::client {

class reader final {
public:
    reader(connection& conn, std::string& why) : conn_(conn), why_(why) {}
    ~reader();
    reader(const reader&) = delete;
    reader& operator=(const reader&) = delete;

    // Whose data: the store (a URI as store::open takes it), the job, and
    // this rank's node and node-local rank.
    struct place {
        std::string store;
        std::string job;
        std::string node;
        std::uint32_t rank = 0;
    };

    // This rank's part of `version` into `out`; `connected`: the daemon can
    // be asked (it may still hold the version in memory).
    std::error_code read(const place& at, std::uint64_t version, std::span<std::byte> out,
                         std::uint64_t& size);
    // The newest version complete job-wide; `verify`: every object read and
    // checked, damaged versions skipped (said in `skipped`).
    std::error_code latest(const place& at, bool verify, std::uint64_t& version,
                           std::string& skipped);
    // Called by io_finalize once this rank's data is durable, to wait until
    // every rank of the job is (io_init_comm: a barrier on its communicator).
    using barrier_fn = int (*)(void* ctx, double timeout_s);
    // Version `version` is complete on every node (store::committed): after
    // `barrier` (when given) at once, else waiting for the other nodes up to
    // the finalize timeout. `why` says what is missing when it is not.
    std::error_code confirm_commit(const place& at, std::uint64_t version, const settings& s,
                                   barrier_fn barrier, void* barrier_ctx, std::string& why);

    // Closes the store, if open (a later call opens it again). io_finalize
    // closes it, and so does exit(), before the libraries a store loads
    // (librados, OpenSSL) tear themselves down under its running threads.
    void close_store() noexcept;

private:
    std::error_code open_store(const std::string& uri);
    // io_read of a version still in daemon memory; `served` false when the
    // daemon no longer holds all of it.
    std::error_code read_staged(std::uint64_t version, std::span<std::byte> out, bool& served,
                                std::uint64_t& size);
    std::error_code fail(std::error_code ec, std::string why);

    connection& conn_;
    std::string& why_;
    std::unique_ptr<store::backend> store_;
    std::string store_uri_;
};

}  // namespace iofwd::client
