#pragma once
// A pack: many small versions of one node of a job in one object, so that a
// batch of them costs one object's create, write, rename and fsyncs instead
// of a directory, an object per rank, a manifest and a COMPLETE record each
// (docs/small-versions.md, issue 23 item 3).
//
// Status: the format, its writer and its checked reader, and the bucket's
// record; the catalog's readers find versions in packs (catalog.hpp); the
// daemon writes packs with IOFWD_PACK_VERSIONS (iod/job.cpp), on by default
// for a store with journals (docs/small-versions.md says what is left).
//
// The object, in order:
//   parts     per version and rank of the node, ascending: a header of
//             pack_part_header_size bytes (magic "IOPK", the crc32c of the
//             rest of the header, version, size, rank, the node's ranks, the
//             bytes' crc32c, 4 zero bytes) and the rank's bytes, the next
//             header 8-aligned
//   index     text a human can read with `tail`:
//               iofwd-pack 1
//               job <job>
//               node <node>
//               parts <n>
//               part <version> <rank> <ranks> <offset> <size> <crc32c, 8 hex>  (n lines)
//               end
//   trailer   pack_trailer_size bytes, the object's last: magic "IOFWDPAK",
//             the index's offset and length, the index's crc32c, the crc32c
//             of the trailer before it
// What a reader may trust: an object whose trailer and index pass, and
// whose parts each pass check_pack_part when read, is the pack as written.
// (The catalog's readers check less, and enough for what they use: the
// index against the crc32c a bucket's record holds for it, and each part's
// bytes against the index; a part's header is for tools that walk a pack
// without its index.)
// A torn pack usually has no valid trailer, but a cut inside a part's bytes
// may leave something that looks like one: the index's crc32c and the
// parts' checks are what make a pack whole or nothing. Every length the
// trailer or the index claims is bounded before anything is sized by it
// (the index: pack_max_index bytes; parts: pack_max_parts), and refused in
// words (errc::corrupt). Every version has all of the node's ranks, each
// once; versions ascend, from 1 to below 2^48 (the journal's bound); names
// are valid_name's (rendezvous.hpp), as everywhere in the store; numbers
// are written one way only (decimal without leading zeros, crc32c in 8
// lowercase hex digits), so that a parsed index formats back to its text.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "store/layout.hpp"

namespace iofwd::store {

inline constexpr std::size_t pack_part_header_size = 40;
inline constexpr std::size_t pack_trailer_size = 32;
// No more parts than this in one pack (64 versions of 1,024 ranks, more than
// a node's journal holds at once), and so no index longer than this: a
// claim beyond is refused before anything is sized by it.
inline constexpr std::uint64_t pack_max_parts = 1u << 16;
inline constexpr std::uint64_t pack_max_index = 8u << 20;

// One rank's bytes of one version, to be packed.
struct pack_input {
    std::uint64_t version = 0;
    std::uint32_t rank = 0;
    std::uint32_t ranks = 0;  // the node's
    std::span<const std::byte> bytes;
};

// Where a part is in the pack, and what its bytes must be.
struct pack_part {
    std::uint64_t version = 0;
    std::uint32_t rank = 0;
    std::uint32_t ranks = 0;
    std::uint64_t offset = 0;  // of its header; the bytes follow it
    std::uint64_t size = 0;
    std::uint32_t crc32c = 0;
    bool operator==(const pack_part&) const = default;
};

struct pack_index {
    std::string job;
    std::string node;
    std::vector<pack_part> parts;  // ascending by version, then rank
    bool operator==(const pack_index&) const = default;
};

// Rank `rank`'s part of `version` in `index`, whose parts ascend by version,
// then rank (as parse_pack_index checks); nullptr when it holds none.
const pack_part* find_part(const pack_index& index, std::uint64_t version, std::uint32_t rank);

// The whole object for `inputs` (ascending by version, then rank; every
// version with each of its ranks once; each input's crc32c computed here).
// errc::invalid_argument, with `why`, for inputs that break those rules.
std::error_code build_pack(const std::string& job, const std::string& node,
                           std::span<const pack_input> inputs, std::vector<std::byte>& out,
                           std::string& why);

// The index's place from the trailer (the object's last pack_trailer_size
// bytes) of an object of `object_size` bytes.
std::error_code parse_pack_trailer(std::span<const std::byte> trailer, std::uint64_t object_size,
                                   std::uint64_t& index_offset, std::uint64_t& index_length,
                                   std::uint32_t& index_crc, std::string& why);

// The index's text, checked against its crc32c and against the parts'
// region, which ends where the index begins. The caller compares the job
// and node it names with those the object's name says.
std::error_code parse_pack_index(std::string_view text, std::uint32_t crc,
                                 std::uint64_t index_offset, pack_index& out, std::string& why);

// The index's text for `index` (the form parse_pack_index reads).
std::string format_pack_index(const pack_index& index);

// A part's header as read from the pack, checked against the index's word.
std::error_code check_pack_part(std::span<const std::byte> header, const pack_part& expected,
                                std::string& why);

// The node's manifest of each version in the pack (the same records the
// one-object-per-rank layout writes), ascending by version.
std::vector<manifest> pack_manifests(const pack_index& index);

// A bucket's record (layout.hpp's bucket_complete_object, named by its
// last version and never replaced), written by the arrival (of a pack, or
// of a large version's manifest) that completes versions job-wide:
//   iofwd-bucket 1
//   job <job>
//   bucket <its first version>
//   versions <first> <last>                             complete: first .. last
//   nodes <n>
//   pack <node> <ranks> <first> <last> <index crc32c>   a node's pack of first .. last
//   manifest <node> <ranks> <version> <crc32c>          a node's part of a version in
//                                                       its own directory (a large one)
//   skip <node> <ranks> <version>                       a version the node will never
//                                                       have (in "iofwd-bucket 2" only)
//   end
// with the pack and manifest lines sorted by node, then by first version.
// A node may have several packs in a bucket (one closed early, then the
// rest), and versions too large for a pack between them: with packs on,
// the bucket is the only job-wide commit of every version, so that a
// version packed on one node and not on another still completes
// (docs/small-versions.md). What a reader may trust of a record that
// parses: every version first .. last lies in exactly one pack or
// manifest of each of the n nodes, within the bucket, and the pack's index
// or the manifest has the crc32c given (one replaced since is refused).
// A version some node skipped is not complete, whatever the other nodes
// hold of it (`skipped`); the skip lets the versions after it complete.
// A record without skips keeps "iofwd-bucket 1", which an older iofwd
// reads.
// A bucket spans at most this many versions (its setting B is smaller): a
// reader lists a bucket's versions without trusting a larger claim.
inline constexpr std::uint64_t bucket_max_versions = 1u << 16;
// A record is at most this long (read_all's bound): a line per node and
// pack or large version, 64 versions each on 10,000 nodes if all are large.
inline constexpr std::uint64_t bucket_max_record = 64u << 20;
struct bucket_part {
    std::string node;
    std::uint32_t ranks = 0;
    std::uint64_t first = 0;
    std::uint64_t last = 0;   // a manifest: first, its version
    std::uint32_t crc32c = 0;  // of the pack's index, or of the manifest's text
    bool manifest = false;     // v<first>/<node>.manifest, not a pack
    bool skip = false;         // version `first` the node will never have (no crc32c)
    bool operator==(const bucket_part&) const = default;
};
struct bucket_record {
    std::string job;
    std::uint64_t bucket = 0;
    std::uint64_t first = 0;
    std::uint64_t last = 0;
    std::uint32_t nodes = 0;
    std::vector<bucket_part> parts;
    // Not in the record's text: the versions up to this one were removed by
    // retention (catalog.hpp's prune_plan), by the bucket's RETIRED.v<N>
    // object; 0: none.
    std::uint64_t retired = 0;
    // Nor these: versions `iofwd rm` removed, by the bucket's REMOVED.v<N>
    // objects (catalog.hpp's remove_packed_version), ascending.
    std::vector<std::uint64_t> removed = {};
    bool operator==(const bucket_record&) const = default;
};
std::string format_bucket(const bucket_record& b);
std::error_code parse_bucket(std::string_view text, bucket_record& out, std::string& why);
// The pack or manifest of `node` that holds `version`, or nullptr (also
// when the node skipped it).
const bucket_part* part_holding(const bucket_record& b, const std::string& node,
                                std::uint64_t version);
// Whether some node skipped `version`: then it is not complete.
bool skipped(const bucket_record& b, std::uint64_t version);
// Whether the bucket completes `version`: in its record's span, not
// skipped, not retired, not removed.
bool completes(const bucket_record& b, std::uint64_t version);

}  // namespace iofwd::store
