#pragma once
// The MPI shim's forwarded files on one rank's connection: FILE_OPEN,
// FILE_WRITE (and the mailbox's file records), FILE_SYNC and FILE_DRAIN. A
// write waits behind any write in flight that overlaps it (files.hpp), then
// starts through the session's write path like a checkpoint version, into
// the file at its offset instead of a store object. A failure of a write the
// rank no longer waits for is reported at the file's next sync (or at BYE).
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <system_error>

#include "held_bytes.hpp"
#include "mailbox.hpp"
#include "protocol.hpp"

namespace iofwd::iod {

class forwarded_file;
class session;

class file_writes final {
public:
    explicit file_writes(session& s) : s_(s) {}

    void on_file_open(const proto::file_open_msg& m);
    void on_file_write(proto::file_write_msg& m);
    void on_file_sync(const proto::file_sync_msg& m);
    void on_file_drain(const proto::file_drain_msg& m);
    // A file record from the mailbox (the rank did not wait for it).
    void from_mail(mailbox::reader::record& r);
    // What is wrong with such a record; empty: nothing.
    std::string mail_problem(const mailbox::reader::record& r) const;
    // Every file the rank has open is closed: its writes finish and are
    // fsynced in the background; failures are kept for BYE.
    void close_all();

private:
    struct handle {
        std::shared_ptr<forwarded_file> file;
        std::error_code error;  // the first failure of a write it no longer waited for
        std::string why;
    };
    // Starts write `m` to `f`, now that no write in flight overlaps it:
    // its bytes `data` (inline or from the mailbox: mail_end > 0), or
    // pulled as `m` says when `data` is empty.
    void start(std::shared_ptr<forwarded_file> f, const proto::file_write_msg& m,
               held_bytes data, std::shared_ptr<const std::vector<proto::file_run>> runs,
               std::uint64_t mail_end);
    // Once `f` has nothing in flight: fsync it if `durable`, let go of this
    // session's handle if `release`, then done(first error, why).
    void settle(std::shared_ptr<forwarded_file> f, bool durable, bool release,
                std::function<void(std::error_code, std::string)> done);
    // The rank closed the file (or went away). A failure is answered to
    // `cookie`, or with cookie 0 kept for BYE.
    void close(handle h, std::uint64_t cookie);

    session& s_;
    std::map<std::uint64_t, handle> files_;  // by the rank's numbers for them
};

}  // namespace iofwd::iod
