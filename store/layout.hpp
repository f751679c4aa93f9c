#pragma once
// How checkpoint data is named in a store, and the manifest that describes a
// version. The layout (documented in README.md):
//
//   <job>/FORMAT                                        the job's store format (job_format)
//   <job>/v<version, 8 digits>/<node>.r<rank>          a rank's bytes, exactly as written
//   <job>/v<version, 8 digits>/<node>.manifest         that node's ranks: sizes, crc32c
//   <job>/v<version, 8 digits>/COMPLETE                 the version is complete job-wide
//   <job>/runs/<run>                                    a run's first version (run_record)
//   <job>/reports/<key>/<node>.json                     a node's summary of a run (report.hpp)
//   <job>/packs/b<bucket, 8 digits>/<node>.v<first>-<last>  a node's small versions (pack.hpp)
//   <job>/packs/b<bucket, 8 digits>/COMPLETE.v<last, 8 digits>
//                                                       which of them are complete job-wide
//
// A job's FORMAT ("iofwd-job-format N") says which of these layouts its
// objects may use: absent, 1 (version directories only: none says 1); 2,
// packs too; 3, a job of one node records its packs without the bucket's
// tally, which then holds only packs that came after a gap, manifests and
// skips (an iofwd that reads only the tally would take the versions before
// as missing, and skip them). A daemon that packs writes it at its claim, before any pack,
// or raises a lower one (never lowers it); every reader
// that finds a number above the one it knows refuses the job in words
// (catalog.hpp's check_format) rather than miss versions kept where it
// does not look.
//
// A bucket is named by its first version. Its records are never replaced:
// each names the last version it says is complete, and the one with the
// highest is the bucket's (a slow writer of an older one cannot hide a
// newer one). A reader looks for v<version>/COMPLETE first, then for the
// bucket that holds the version (catalog.hpp).
//
// A node's manifest is written (atomically, after every object it lists is
// committed) once all of the node's ranks have that version durable. After
// writing its manifest a daemon counts itself in at the version's tally of
// arrivals (backend::arrive); the one whose arrival completes the count
// reads the nodes' manifests and writes COMPLETE, atomically and last. Only
// versions with a COMPLETE record exist for a restart.
//
// All nodes of a run must number its versions alike. When the run has a name
// (the same on every node), the first daemon to look creates the run's
// record, exclusively, with the version after every one in the store; the
// others read it, whenever they start.
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
std::string complete_object(const std::string& job, std::uint64_t version);
// The tally of the nodes whose manifest of the version is committed
// (backend::arrive): not an object list() shows.
std::string arrivals_object(const std::string& job, std::uint64_t version);
std::string run_object(const std::string& job, const std::string& run);
std::string format_object(const std::string& job);
std::string bucket_dir(const std::string& job, std::uint64_t bucket);
std::string pack_object(const std::string& job, std::uint64_t bucket, const std::string& node,
                        std::uint64_t first, std::uint64_t last);
std::string bucket_complete_object(const std::string& job, std::uint64_t bucket,
                                   std::uint64_t last);
// Retention's mark in a bucket it keeps: the versions of the bucket up to
// `upto` are removed (catalog.hpp's prune_plan). Empty: the name says it.
std::string bucket_retired_object(const std::string& job, std::uint64_t bucket,
                                  std::uint64_t upto);
// `iofwd rm`'s mark in a bucket: its version `version` is removed. Empty.
std::string bucket_removed_object(const std::string& job, std::uint64_t bucket,
                                  std::uint64_t version);
// The tally of the nodes' packs and manifests committed in a bucket
// (backend::arrive_keyed, keyed by version; catalog.hpp's
// try_complete_bucket).
std::string bucket_arrivals_object(const std::string& job, std::uint64_t bucket);
// A node's journal of the job (the directory store's open_journal): not an
// object list() shows.
std::string journal_object(const std::string& job, const std::string& node);
// `key`: the run's name, or a name of the run made by the daemon (report.hpp).
std::string report_object(const std::string& job, const std::string& key, const std::string& node);
inline constexpr const char* complete_name = "COMPLETE";
inline constexpr const char* arrivals_name = "ARRIVED";
inline constexpr const char* retired_name = "RETIRED";
inline constexpr const char* removed_name = "REMOVED";
inline constexpr const char* format_name = "FORMAT";
// The newest job format this iofwd reads and writes (above).
inline constexpr std::uint32_t job_format = 3;
// A FORMAT is one short line; anything longer is refused unread.
inline constexpr std::uint64_t format_max_bytes = 64;
inline constexpr const char* runs_dir = "runs";
inline constexpr const char* packs_dir = "packs";
inline constexpr const char* reports_dir = "reports";
inline constexpr const char* report_suffix = ".json";
inline constexpr const char* manifest_suffix = ".manifest";
inline constexpr std::string_view journal_suffix = ".journal";

// "v00000012" -> 12; nullopt for anything else.
std::optional<std::uint64_t> parse_version_dir(std::string_view name);
// A FORMAT's text: "iofwd-job-format 2\n" for 2; and back, nullopt for
// anything else (1 too: a job without FORMAT is format 1, and none says so).
inline constexpr std::string_view format_head = "iofwd-job-format ";
std::string format_job_format(std::uint32_t format);
std::optional<std::uint32_t> parse_job_format(std::string_view text);
// "b00000065" -> 65; nullopt for anything else.
std::optional<std::uint64_t> parse_bucket_dir(std::string_view name);
// "COMPLETE.v00000070" -> 70; nullopt for anything else.
std::optional<std::uint64_t> parse_bucket_complete(std::string_view name);
std::optional<std::uint64_t> parse_bucket_retired(std::string_view name);
std::optional<std::uint64_t> parse_bucket_removed(std::string_view name);
// "nodeA.v00000065-00000070" -> the last version, 70; nullopt for anything
// else. (Names are canonical: what the functions above write, nothing
// else, so that no two names mean one thing.)
std::optional<std::uint64_t> parse_pack_last(std::string_view name);
// The same name -> its node, first and last version.
struct pack_name {
    std::string node;
    std::uint64_t first = 0;
    std::uint64_t last = 0;
};
std::optional<pack_name> parse_pack_name(std::string_view name);

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
    // Of a version committed through a bucket (docs/small-versions.md): the
    // bucket and the job's nodes, so that a claim can arrive with it again
    // after a crash cut its arrival off. 0 for a version with its own
    // COMPLETE record.
    std::uint64_t bucket = 0;
    std::uint32_t nodes = 0;
    bool operator==(const manifest&) const = default;
};

// A small text format a human can read with cat:
//   iofwd-manifest 1
//   job <job>
//   node <node>
//   version <n>
//   ranks <n>
//   bucket <n> nodes <n>     (only in "iofwd-manifest 2": a version a bucket commits)
//   rank <r> size <bytes> crc32c <8 hex digits>      (one line per rank)
//   end
// A version with its own COMPLETE record keeps "iofwd-manifest 1", which an
// older iofwd reads.
inline constexpr std::uint32_t manifest_max_nodes = 100000;  // proto::max_nodes
std::string format_manifest(const manifest& m);
std::error_code parse_manifest(std::string_view text, manifest& out, std::string& why);

// The job-wide record:
//   iofwd-complete 1
//   job <job>
//   version <n>
//   nodes <n>
//   node <name> ranks <n> manifest-crc32c <8 hex digits>   (one line per node, sorted)
//   end
struct complete_node {
    std::string node;
    std::uint32_t ranks = 0;
    std::uint32_t manifest_crc32c = 0;  // of the manifest's text
    bool operator==(const complete_node&) const = default;
};
struct complete_record {
    std::string job;
    std::uint64_t version = 0;
    std::vector<complete_node> nodes;
    bool operator==(const complete_record&) const = default;
};
std::string format_complete(const complete_record& c);
std::error_code parse_complete(std::string_view text, complete_record& out, std::string& why);

// A run's record:
//   iofwd-run 1
//   job <job>
//   run <run>
//   first-version <n>
//   nodes <n>
//   pack-versions <n>    (only in "iofwd-run 2": a run that packs)
//   end
// pack-versions: the versions per bucket of packs every node of the run
// uses, whatever its own IOFWD_PACK_VERSIONS says (0: none packs).
struct run_record {
    std::string job;
    std::string run;
    std::uint64_t first_version = 0;
    std::uint32_t nodes = 0;
    std::uint32_t pack_versions = 0;
    bool operator==(const run_record&) const = default;
};
std::string format_run(const run_record& r);
std::error_code parse_run(std::string_view text, run_record& out, std::string& why);

}  // namespace iofwd::store
