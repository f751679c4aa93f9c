#pragma once
// The directory backend: objects are files under a root directory (a local
// disk or a parallel file system mount). An object is written under a hidden
// temporary name; commit renames it to its final name, then fsyncs the file
// and the directories on its path (see file_writer::commit for the order).
//
// Everything under the root is reached through the root's descriptor, one
// component at a time without following symlinks, and must be the user's
// and writable by nobody else; objects are read only if they are regular
// files. Directories are created 0700 and files 0600 (0750 and 0640 when the
// group may read the checkpoints).
#include <sys/stat.h>

#include <memory>
#include <string>
#include <system_error>

#include "store/backend.hpp"
#include "fd.hpp"

namespace iofwd::store {

// Which directories above an object this process has made durable
// (directory.cpp).
struct durable_dirs;

class directory_backend final : public backend {
public:
    ~directory_backend() override;

    // Creates the root if missing (private: 0700, or 0750 for the group) and
    // refuses one that is not the user's or that others can write to; a
    // relative path is taken from the current directory.
    static std::error_code open(std::string path, const open_options& opts,
                                std::unique_ptr<backend>& out, std::string& why);

    std::string describe() const override;
    std::string location() const override { return "dir:" + root_; }
    std::error_code create(const std::string& name, std::uint64_t size,
                           std::unique_ptr<object_writer>& out) override;
    std::error_code read(const std::string& name, std::uint64_t offset,
                         std::span<std::byte> out) override;
    std::error_code size(const std::string& name, std::uint64_t& out) override;
    std::error_code list(const std::string& prefix, std::vector<std::string>& out) override;
    std::error_code remove(const std::string& name) override;
    std::error_code remove_lazily(const std::string& name) override;
    std::error_code modified(const std::string& name, std::int64_t& out) override;
    // Temporaries: ".<name>.tmp-<pid>-<n>" (create()).
    std::error_code leftovers(const std::string& dir, std::vector<std::string>& out) override;
    std::error_code remove_leftover(const std::string& name) override;
    std::error_code claim_job(const std::string& job, const std::string& node,
                              std::unique_ptr<claim>& out) override;
    // The claim files ".<node>.claim" in the job's directory.
    std::error_code claimants(const std::string& job, std::vector<std::string>& out) override;
    // ".<node>.journal" beside the node's claim file.
    std::error_code open_journal(const std::string& job, const std::string& node,
                                 unique_fd& out) override;
    std::error_code read_journal(const std::string& job, const std::string& node,
                                 unique_fd& out) override;
    std::error_code journal_nodes(const std::string& job, std::vector<std::string>& out) override;
    // A tally is a hidden directory beside the names it counts
    // (".ARRIVED"), holding a file ".count" and one hard link to it per
    // member, named "<member>=<note>": link() takes a name atomically and
    // st_nlink counts the links, on local file systems and on NFS and
    // parallel file systems alike (the way open(2) recommends for an
    // exclusive lock file over NFS). A file full of links (EMLINK: 65,000
    // on ext4) is followed by ".count.1" and on; the count is their sum.
    // Reading the arrivals is one listing.
    std::error_code arrive(const std::string& tally, const std::string& member,
                           const std::string& note, std::uint64_t& count) override;
    // Keys live in the tally's subdirectory ".keys", out of the listing
    // arrivals() reads: a file "c<key>" per key and one link to it per
    // member, "<key>=<member>", and a file "keyed" with a link per member
    // that came with keys ("keyed=<member>"): when the tally holds more
    // arrivals than that, one came without (arrive(), an older iofwd) and
    // `most` is the tally's whole count. One fsync of each directory.
    std::error_code arrive_keyed(const std::string& tally, const std::string& member,
                                 const std::string& note, std::uint64_t first,
                                 std::uint64_t last, std::uint64_t& most) override;
    std::error_code arrivals(const std::string& tally, std::vector<arrival>& out) override;
    std::error_code remove_arrivals(const std::string& tally) override;
    std::string explain(const std::string& name) const override;

    const std::string& root() const noexcept { return root_; }

    // The directory `rel` under the root ("" is the root), every component
    // opened with O_NOFOLLOW and checked (ours, writable by nobody else):
    // errc::unsafe_path otherwise, errc::not_found when missing. With
    // `create`, missing components are made (not yet durable: a commit of
    // what goes into them makes them so).
    std::error_code open_dir(const std::string& rel, bool create, unique_fd& out) const;

private:
    directory_backend(std::string root, unique_fd root_fd, bool group);
    // An object, opened for reading without following a symlink or blocking
    // on a FIFO: errc::unsafe_path unless it is a regular file of ours.
    std::error_code open_object(const std::string& name, unique_fd& dir, unique_fd& out) const;
    // Every name in the directory `rel` (open_dir's checks), hidden ones
    // too, sorted; `dirs` (if given) says which are directories.
    std::error_code entries(const std::string& rel, std::vector<std::string>& out,
                            std::vector<bool>* dirs) const;
    // The entry `name` itself (a symlink is not followed): errc::not_found
    // when missing.
    std::error_code stat_name(const std::string& name, struct stat& out) const;
    // A file of the node's in the job's directory (its claim, its journal),
    // opened for reading and writing, created when missing: errc::unsafe_path
    // unless it is a regular file of ours with one name.
    std::error_code open_node_file(const std::string& job, const std::string& name,
                                   unique_fd& out) const;

    // remove() and remove_lazily(): with `sync`, the directory the name was
    // in is fsynced after.
    std::error_code remove_entry(const std::string& name, bool sync);

    std::string root_;
    unique_fd root_fd_;  // everything is reached through it
    bool group_;         // directories 0750 and files 0640 instead of 0700 and 0600
    std::shared_ptr<durable_dirs> dirs_;
};

}  // namespace iofwd::store
