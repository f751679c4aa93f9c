#pragma once
// How checkpoint data is named in a store, and the manifest that describes a
// version. The layout (documented in README.md):
//
//   <job>/v<version, 8 digits>/<node>.r<rank>          a rank's bytes, exactly as written
//   <job>/v<version, 8 digits>/<node>.manifest         that node's ranks: sizes, crc32c
//
// A node's manifest is written (atomically, after every object it lists is
// committed) once all of the node's ranks have that version durable.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace iofwd::store {

std::string version_dir(const std::string& job, std::uint64_t version);
std::string data_object(const std::string& job, std::uint64_t version, const std::string& node,
                        std::uint32_t rank);
std::string manifest_object(const std::string& job, std::uint64_t version,
                            const std::string& node);

// "v00000012" -> 12; nullopt for anything else.
std::optional<std::uint64_t> parse_version_dir(std::string_view name);

struct manifest_entry {
    std::uint32_t rank = 0;
    std::uint64_t size = 0;
    std::uint32_t crc32c = 0;
    bool operator==(const manifest_entry&) const = default;
};

struct manifest {
    std::string job;
    std::string node;
    std::uint64_t version = 0;
    std::uint32_t ranks = 0;
    std::vector<manifest_entry> entries;  // one per rank, in rank order
    bool operator==(const manifest&) const = default;
};

// A small text format a human can read with cat:
//   iofwd-manifest 1
//   job <job>
//   node <node>
//   version <n>
//   ranks <n>
//   rank <r> size <bytes> crc32c <8 hex digits>      (one line per rank)
//   end
std::string format_manifest(const manifest& m);
std::error_code parse_manifest(std::string_view text, manifest& out, std::string& why);

}  // namespace iofwd::store
