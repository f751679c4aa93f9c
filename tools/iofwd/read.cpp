// iofwd restore JOB VERSION DIR: each rank's part of a complete version as a
// file DIR/<node>.r<rank>; iofwd cat JOB VERSION RANK: one rank's part on
// stdout. Both check size and CRC-32C while they write.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "fd.hpp"
#include "format.hpp"
#include "store/catalog.hpp"
#include "store/layout.hpp"

namespace iofwd::tool {
namespace {

struct read_args {
    store_options store;
    std::string job, version, target;  // target: DIR (restore) or RANK (cat)
};

// One rank's part of the version: its node, rank, index in the record's
// order (nodes sorted, ranks ascending), and its manifest's size and crc.
struct part {
    std::string node;
    std::uint32_t rank = 0;
    std::uint32_t index = 0;
    store::manifest_entry entry;
    store::bytes_place at;  // its own object, or its part of a pack
    std::string file;       // the name restore gives it: its own object's ("nodeA.r0003")
    // For humans and JSON: the object, and for a part of a pack where in it.
    std::string object() const
    {
        return at.in_pack ? fmt::format("{} at {}", at.object, at.offset) : at.object;
    }
};

std::vector<part> load_parts(store::backend& st, const std::string& job, std::uint64_t version)
{
    store::version_info info;
    std::string why;
    store::damage what;
    if (auto ec = store::load_version(st, job, version, info, why, &what))
        throw failure(damaged, ec == errc::not_found
                                   ? fmt::format("version {} of job {} is not complete (no "
                                                 "COMPLETE record): nothing to read",
                                                 version, job)
                                   : why);
    std::vector<part> parts;
    for (std::size_t i = 0; i < info.manifests.size(); ++i) {
        const auto& m = info.manifests[i];
        for (std::size_t j = 0; j < m.entries.size(); ++j) {
            const auto own = store::data_object(job, version, m.node, m.entries[j].rank);
            parts.push_back({m.node, m.entries[j].rank, static_cast<std::uint32_t>(parts.size()),
                             m.entries[j], info.places[i][j], own.substr(own.rfind('/') + 1)});
        }
    }
    return parts;
}

// All of `data` to a file or a pipe; false with errno set.
bool write_all(int fd, std::span<const std::byte> data)
{
    while (!data.empty()) {
        const ssize_t w = ::write(fd, data.data(), data.size());
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        data = data.subspan(static_cast<std::size_t>(w));
    }
    return true;
}

// Copies one object to `fd`, checking it; throws `damaged` naming what is wrong.
void copy_checked(store::backend& st, const part& p, int fd)
{
    std::string why;
    store::damage what;
    const store::block_check write = [fd](std::span<const std::byte> block, std::uint64_t,
                                          std::string& w, store::damage& d) {
        if (!write_all(fd, block)) {
            w = fmt::format("writing failed: {}", std::strerror(errno));
            d.expected = "written";
            d.found = w;
            return false;
        }
        return true;
    };
    if (store::check_object(st, p.at, p.entry.size, p.entry.crc32c, write, why, what))
        throw failure(damaged, what.kind == store::problem::content
                                   ? why
                                   : fmt::format("{} is damaged: expected {}, found {}",
                                                 what.object, what.expected, what.found));
}

int restore(const read_args& a)
{
    auto st = open_store(a.store);
    require_job(*st, a.job);
    const auto version = parse_version(*st, a.job, a.version);
    const auto parts = load_parts(*st, a.job, version);
    if (::mkdir(a.target.c_str(), 0700) != 0 && errno != EEXIST)
        throw failure(bad_argument, fmt::format("cannot create directory {}: {}", a.target,
                                                std::strerror(errno)));
    unique_fd dir(::open(a.target.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir)
        throw failure(bad_argument, fmt::format("{} is not a directory I can open: {}", a.target,
                                                std::strerror(errno)));
    for (const auto& p : parts) {
        const std::string& file = p.file;
        if (::faccessat(dir.get(), file.c_str(), F_OK, AT_SYMLINK_NOFOLLOW) == 0)
            throw failure(bad_argument,
                          fmt::format("{}/{} exists: not overwriting it", a.target, file));
    }
    nlohmann::json files = nlohmann::json::array();
    for (const auto& p : parts) {
        // Written under a temporary name and renamed once whole and checked.
        const std::string& file = p.file;
        const std::string temp = "." + file + ".part";
        unique_fd fd(::openat(dir.get(), temp.c_str(),
                              O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!fd)
            throw failure(damaged, fmt::format("cannot create {}/{}: {}", a.target, temp,
                                               std::strerror(errno)));
        try {
            copy_checked(*st, p, fd.get());
        } catch (...) {
            ::unlinkat(dir.get(), temp.c_str(), 0);
            throw;
        }
        if (::fsync(fd.get()) != 0 || ::renameat(dir.get(), temp.c_str(), dir.get(), file.c_str()) != 0)
            throw failure(damaged, fmt::format("cannot write {}/{}: {}", a.target, file,
                                               std::strerror(errno)));
        files.push_back({{"file", a.target + "/" + file},
                         {"object", p.object()},
                         {"node", p.node},
                         {"rank", p.rank},
                         {"index", p.index},
                         {"bytes", p.entry.size},
                         {"crc32c", fmt::format("{:08x}", p.entry.crc32c)}});
        if (!a.store.json)
            fmt::print("{}/{}  node {} rank {}  {}  crc32c {:08x} ok\n", a.target, file, p.node,
                       p.rank, human_bytes(p.entry.size), p.entry.crc32c);
    }
    if (a.store.json)
        print_json({{"store", st->location()},
                    {"job", a.job},
                    {"version", version},
                    {"dir", a.target},
                    {"files", files}});
    else
        fmt::print("restored version {} of job {}: {} file{} in {}\n", version, a.job, parts.size(),
                   parts.size() == 1 ? "" : "s", a.target);
    return ok;
}

// RANK: a global index in the record's order ("3"), or a node's rank
// ("nodeA.3", "nodeA.r0003").
const part& find_part(const std::vector<part>& parts, const std::string& text,
                      const std::string& job, std::uint64_t version)
{
    std::string node;
    std::string number = text;
    if (const auto dot = text.rfind('.'); dot != std::string::npos) {
        node = text.substr(0, dot);
        number = text.substr(dot + 1);
        if (number.starts_with("r"))
            number.erase(0, 1);
    }
    const std::uint64_t n = parse_number(number, "rank");
    for (const auto& p : parts)
        if (node.empty() ? p.index == n : p.node == node && p.rank == n)
            return p;
    std::vector<std::string> have;
    for (const auto& p : parts)
        if (p.rank == 0)
            have.push_back(fmt::format("node {}", p.node));
    throw failure(bad_argument,
                  fmt::format("version {} of job {} has no rank {} (it has {} rank{}, indexes 0-{}, "
                              "on {}; give RANK as INDEX or NODE.RANK)",
                              version, job, text, parts.size(), parts.size() == 1 ? "" : "s",
                              parts.size() - 1, fmt::join(have, ", ")));
}

int cat(const read_args& a)
{
    auto st = open_store(a.store);
    require_job(*st, a.job);
    const auto version = parse_version(*st, a.job, a.version);
    const auto parts = load_parts(*st, a.job, version);
    const part& p = find_part(parts, a.target, a.job, version);
    if (a.store.json) {
        // The part described and checked, its bytes not written.
        std::string why;
        store::damage what;
        const bool intact = !store::check_object(*st, p.at, p.entry.size, p.entry.crc32c,
                                                 {}, why, what);
        print_json({{"store", st->location()},
                    {"job", a.job},
                    {"version", version},
                    {"object", p.object()},
                    {"node", p.node},
                    {"rank", p.rank},
                    {"index", p.index},
                    {"bytes", p.entry.size},
                    {"crc32c", fmt::format("{:08x}", p.entry.crc32c)},
                    {"intact", intact}});
        return intact ? ok : damaged;
    }
    copy_checked(*st, p, STDOUT_FILENO);
    return ok;
}

}  // namespace

void add_restore(CLI::App& app, int& status)
{
    auto args = std::make_shared<read_args>();
    auto* cmd = add_job_command(
        app, "restore", "write each rank's part of a complete version as a file DIR/NODE.rRANK, "
                        "checking size and CRC-32C while writing",
        args->store, args->job);
    cmd->add_option("VERSION", args->version, "the version")->required();
    cmd->add_option("DIR", args->target, "where the files go (made if missing; existing files "
                                         "are not overwritten)")
        ->required();
    cmd->callback([args, &status] { status = restore(*args); });
}

void add_cat(CLI::App& app, int& status)
{
    auto args = std::make_shared<read_args>();
    auto* cmd = add_job_command(
        app, "cat", "write one rank's part of a complete version to stdout, checking it (with "
                    "--json: describe and check it instead)",
        args->store, args->job);
    cmd->add_option("VERSION", args->version, "the version")->required();
    cmd->add_option("RANK", args->target,
                    "NODE.RANK (nodeA.3 or nodeA.r0003), or an index over all ranks of the "
                    "version, nodes in name order (on one node: the rank)")
        ->required();
    cmd->callback([args, &status] { status = cat(*args); });
}

}  // namespace iofwd::tool
