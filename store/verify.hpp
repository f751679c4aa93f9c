#pragma once
// Reading a job's checkpoints back and checking every byte: each version's
// COMPLETE record and the manifests it lists (catalog.hpp's load_version),
// then every object's size and CRC-32C against its manifest, objects read by
// a few threads at once. Used by `iofwd verify` and the checkpoint example's
// verifier (which adds a check of its data pattern through `content`).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "store/backend.hpp"
#include "store/catalog.hpp"
#include "store/inventory.hpp"
#include "store/layout.hpp"

namespace iofwd::store {

struct verify_options {
    unsigned threads = 4;
    // Called as bytes are checked, from the checking threads one at a time:
    // bytes done and of how many.
    std::function<void(std::uint64_t done, std::uint64_t total)> progress;
    // A check of each block of an object's bytes of the caller's own (false:
    // damaged, with `why` and `what` set), after size and before checksum.
    std::function<bool(const manifest& m, const manifest_entry& e, std::span<const std::byte> block,
                       std::uint64_t offset, std::string& why, damage& what)>
        content;
};

struct object_result {
    std::string name;            // for a part of a pack: the pack, its version and rank
    bytes_place place;
    std::string node;
    std::uint32_t rank = 0;
    std::uint64_t size = 0;      // its manifest's
    std::uint32_t crc32c = 0;    // its manifest's
    bool intact = false;
    std::string why;             // not intact: in words
    damage what;                 // not intact: object, expected, found
};

struct version_result {
    std::uint64_t version = 0;
    version_state state = version_state::incomplete;  // complete: record and manifests check out
    std::string why;                                  // incomplete, damaged record: in words
    damage what;                                      // damaged record: object, expected, found
    std::vector<object_result> objects;               // complete: every rank's, record order
    bool intact() const;  // complete, and every object is
};

struct verify_report {
    std::vector<version_result> versions;  // ascending
    std::uint64_t objects = 0;             // checked
    std::uint64_t bytes = 0;               // in intact objects
    std::uint64_t damaged = 0;             // damaged records and objects
};

// Checks `versions` of `job` (every version directory when empty). A version
// asked for that has no directory is errc::not_found with `why`; incomplete
// versions are reported, not checked. Fails only when the store cannot be
// listed: damage is in the report.
std::error_code verify_job(backend& st, const std::string& job,
                           const std::vector<std::uint64_t>& versions, const verify_options& opts,
                           verify_report& out, std::string& why);

}  // namespace iofwd::store
