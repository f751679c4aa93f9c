#pragma once
// What a job's checkpoints in a store look like from above: which versions are
// complete, reading and checking an object against its manifest, declaring a
// version complete, and retention. Used by the daemon (commit, retention),
// the client library (io_latest, io_read) and the verifier.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "store/backend.hpp"
#include "store/layout.hpp"
#include "store/pack.hpp"

namespace iofwd::store {

// A small object, whole.
std::error_code read_all(backend& st, const std::string& name, std::string& out);

// The job's FORMAT (layout.hpp), when there: refused with
// errc::newer_format when it says more than job_format, errc::corrupt when
// it does not read; `why` says so, naming the object.
// `found`, when given: the format it says (1 without a FORMAT), set on
// success.
std::error_code check_format(backend& st, const std::string& job, std::string& why,
                             std::uint32_t* found = nullptr);

// Makes the job's FORMAT say job_format: written when absent, raised when
// it says less (the job then holds what an older iofwd would read wrong, and
// it refuses it), checked as above when it says as much or more. Before the
// first pack a daemon writes.
std::error_code mark_format(backend& st, const std::string& job, std::string& why);

// Whether a bucket's record says `version` is complete (in a pack, or its
// part of a bucket's commit).
std::error_code in_bucket(backend& st, const std::string& job, std::uint64_t version, bool& yes);

// The highest version any pack or bucket record of `job` names, complete
// or not (0: none): a new run numbers its versions after it, as after every
// version directory, so that it never writes a number a pack holds.
std::error_code highest_packed(backend& st, const std::string& job, std::uint64_t& out);

// The versions of `job` that its buckets' records say are complete (in
// packs), ascending; none when the job has no packs.
std::error_code packed_versions(backend& st, const std::string& job,
                                std::vector<std::uint64_t>& out);

// `versions` (taken from `listing`, the names in the job's directory) with
// the versions the job's buckets complete added when the listing holds
// packs/; sorted, each once.
std::error_code with_packed_versions(backend& st, const std::string& job,
                                     const std::vector<std::string>& listing,
                                     std::vector<std::uint64_t>& versions);

// The job's versions that have a COMPLETE record, their own or their
// bucket's (a bucket whose record does not parse counts none), ascending.
std::error_code complete_versions(backend& st, const std::string& job,
                                  std::vector<std::uint64_t>& out);

// What is wrong with a stored object, for a report: the object, what its
// record or manifest says it should be and what the store holds, in words
// ("crc32c 1a2b3c4d", "missing").
enum class problem {
    record,      // the COMPLETE record or a manifest is missing, unreadable or does not match
    missing,     // an object its manifest lists is not there
    unreadable,  // the store failed to read it (or refused it: not the user's, a symlink)
    size,        // it holds another number of bytes than its manifest says
    checksum,    // its crc32c is not the manifest's
    content,     // a check of the caller's own failed (block_check)
};
struct damage {
    std::string object;
    std::string expected;
    std::string found;
    problem kind = problem::record;
};

// Where a rank's bytes of a version are: an object of its own, or a part
// of its node's pack (pack.hpp), which holds more than these bytes.
struct bytes_place {
    std::string object;
    std::uint64_t offset = 0;  // of the bytes in the object
    bool in_pack = false;
};

// A complete version: its record and every node's manifest, each manifest
// checked against the checksum the record holds for it, and where each
// rank's bytes are. When the record or a manifest is wrong, `what` (if
// given) names the object and the mismatch.
//
// A version a bucket commits (layout.hpp) has no COMPLETE record of its
// own: `record` is made from the bucket's record, and each node's manifest
// from its pack's index, checked against the crc32c the bucket's record
// holds for it (which `record` then gives as the node's manifest_crc32c),
// or, for a node's part of a large version, read from the version's
// directory and checked the same way.
struct version_info {
    complete_record record;
    std::vector<manifest> manifests;
    std::vector<std::vector<bytes_place>> places;  // per manifest, per entry
};
std::error_code load_version(backend& st, const std::string& job, std::uint64_t version,
                             version_info& out, std::string& why, damage* what = nullptr);

// The same with only `node`'s manifest read (and checked against the
// record): what one rank's restart needs, one read per rank however many
// nodes the version has. `out.manifests` is empty when the record does not
// list the node.
std::error_code load_node(backend& st, const std::string& job, std::uint64_t version,
                          const std::string& node, version_info& out, std::string& why);

// Reads an object into `out` (exactly its size) and checks size and crc32c.
// A mismatch is errc::corrupt with the object and version named in `why`.
std::error_code read_checked(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why);
// The same for bytes wherever they are (a part of a pack: the object must
// hold them, and more).
std::error_code read_checked(backend& st, const bytes_place& at, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why);
// The same, saying in `what` which damage it found (problem::missing: the
// object is not there).
std::error_code read_checked(backend& st, const bytes_place& at, std::uint64_t size,
                             std::uint32_t crc, std::span<std::byte> out, std::string& why,
                             damage& what);

// Checks an object without keeping its bytes (reads it in blocks).
std::error_code check_object(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, std::string& why);

// The same, handing every block read to `each` (its bytes and offset in the
// object) before the next is read: progress, or a check of the caller's own,
// which stops the reading by returning false with `why` and `what` set
// (errc::corrupt then). `what` names a mismatch of size or checksum too.
using block_check = std::function<bool(std::span<const std::byte> block, std::uint64_t offset,
                                       std::string& why, damage& what)>;
std::error_code check_object(backend& st, const std::string& name, std::uint64_t size,
                             std::uint32_t crc, const block_check& each, std::string& why,
                             damage& what);
std::error_code check_object(backend& st, const bytes_place& at, std::uint64_t size,
                             std::uint32_t crc, const block_check& each, std::string& why,
                             damage& what);

// The size and crc32c of a committed object, read whole (in blocks).
std::error_code object_crc(backend& st, const std::string& name, std::uint64_t& size,
                           std::uint32_t& crc, std::string& why);

// The newest complete version. With `verify`, the newest one whose every
// object matches its checksum; versions that fail are named in `skipped`.
std::error_code latest(backend& st, const std::string& job, bool verify, std::uint64_t& out,
                       std::string& skipped, std::string& why);

// After manifest `m` is committed (its text's crc32c `manifest_crc`):
// counts its node in at the version's tally (backend::arrive), bringing the
// node's line of the COMPLETE record (its ranks and that checksum); if it
// arrived last of `nodes`, writes COMPLETE from the lines the nodes brought
// (idempotent when two daemons race to it). A node's cost is one arrival,
// the last one's two operations more (the arrivals, the record), whatever
// the number of nodes: O(1) per node and O(nodes) for the job per version,
// where a listing of the version by every node was O(nodes x ranks) each.
std::error_code try_complete(backend& st, const manifest& m, std::uint32_t manifest_crc,
                             std::uint32_t nodes, bool& completed, std::string& why);

// The index of pack `name` (pack.hpp), checked against its trailer (its
// parts are checked against the index when read), and the index's crc32c.
// `why` says what failed, in words that follow the pack's name ("missing"
// when it is not there).
std::error_code read_pack(backend& st, const std::string& name, pack_index& out,
                          std::uint32_t& index_crc, std::string& why);

// What a bucket's marks hide: the versions up to retention's highest
// RETIRED.v<N> (0: none), and each version of an `iofwd rm` REMOVED.v<N>.
struct bucket_marks {
    std::uint64_t retired = 0;
    std::vector<std::uint64_t> removed;  // ascending
    bool hides(std::uint64_t version) const
    {
        return version <= retired || std::binary_search(removed.begin(), removed.end(), version);
    }
};

// Node `node`'s packs in bucket `bucket` of `job` that hold any version
// from `first` to `last`, by their names (one listing): each pack's object
// name and versions, ascending; with `marks`, the bucket's marks.
// not_found: the bucket's directory is not there.
struct node_pack {
    std::string name;
    std::uint64_t first = 0;
    std::uint64_t last = 0;
};
std::error_code node_packs(backend& st, const std::string& job, std::uint64_t bucket,
                           const std::string& node, std::uint64_t first, std::uint64_t last,
                           std::vector<node_pack>& out, std::string& why,
                           bucket_marks* marks = nullptr);

// Where node `node`'s pack holds rank `rank`'s part of `version`, whether
// or not a bucket's record completes the version yet, and the part's size
// and crc32c by the pack's checked index: for a rank reading back a
// version its daemon packed while the job's other nodes have not arrived.
// Not a complete version: only the part's own writer may read it this way.
// not_found when no pack of the node holds it, or retention or rm removed
// it.
// Cost: two listings (the job's buckets, the version's bucket) and the
// pack's index.
std::error_code find_own_packed(backend& st, const std::string& job, std::uint64_t version,
                                const std::string& node, std::uint32_t rank, bytes_place& at,
                                std::uint64_t& size, std::uint32_t& crc, std::string& why);

// The member of node `node`'s arrival at a bucket's tally with its part
// from version `first` on ("<node>.<first>"), and the note it brings, its
// line of the record: "<ranks>+<first>+<count>+<index crc32c>" for a pack,
// "<ranks>+m<version>+<manifest crc32c>" for a manifest, "<ranks>+s<version>"
// for a skip.
std::string bucket_member(const std::string& node, std::uint64_t first);
std::string bucket_note(const bucket_part& p);

// The job-wide commit of a bucket of versions (docs/small-versions.md):
// after node `part.node`'s pack of the bucket (or, for a version too large
// for a pack, its manifest of it) is committed, counts it in at the
// bucket's tally, bringing its line of the bucket's record; once every one
// of `nodes` nodes has arrived, whoever arrives and finds every node's
// parts holding the versions from the bucket's first on without a gap
// writes the record of them, as a new object named by the last (a record
// of as many already there is left alone). `complete` gives the last
// version complete that this arrival found (0: none yet, or none of the
// versions it holds complete, so that it did not look).
// Cost per arrival: one arrival, keyed by the versions the part holds
// (backend::arrive_keyed) when the job has several nodes; and for the
// arrival that makes some version's count reach `nodes` (about one per
// version), a read of the tally (its every arrival: O(nodes x parts per
// node)) and a look at the size of the record it would write, written only
// when none of its name is there: O(1) store operations per node and
// version, O(nodes) for the job.
// A job of one node (`nodes` 1) keeps no tally: a pack that follows the
// bucket's newest record (or starts the bucket) is recorded at once with
// that record's parts (a listing of the bucket, a read of the record, a
// look for a tally). A pack after a gap, a manifest and a skip (which leave
// nothing in the bucket by which another node would see this one) arrive at
// the tally as with several nodes, and from then on the bucket's arrivals
// count the newest record's parts too. Errors, each in words, never passed
// over (the caller's journal keeps the part): errc::corrupt for a newest
// record that does not read, or that holds the part's versions with other
// bytes; errc::rank_mismatch for another node's packs or parts in the
// bucket, or a record of that name that is not the one this part makes.
std::error_code try_complete_bucket(backend& st, const std::string& job, std::uint64_t bucket,
                                    const bucket_part& part, std::uint32_t nodes,
                                    std::uint64_t& complete, std::string& why);
// The nodes whose manifest of `version` names a bucket that has no arrival
// of theirs for it (a daemon that stopped between the two): the node's
// next daemon arrives with it (job::arrive_again), so the version may
// still complete. A listing of the version, a read of each manifest and of
// its bucket's tally; a tally that does not read counts as no arrival.
std::vector<std::string> manifests_to_arrive(backend& st, const std::string& job,
                                             std::uint64_t version);
// How many of a job's newest buckets a claim looks at for the gaps its
// node left (job::skip_gaps), and so where versions may wait.
inline constexpr std::size_t gap_buckets_looked_at = 4;
// How many nodes the job had when it wrote bucket `bucket` (whose arrivals
// are `parts`, bucket_arrivals'), from what the store says of that bucket
// for sure: its newest record, or a node's manifest among its parts; 0 when
// neither says. A read that fails is an error (a caller that removes what
// nothing says must not take a failed read for that).
std::error_code bucket_nodes(backend& st, const std::string& job, std::uint64_t bucket,
                             const std::map<std::string, std::vector<bucket_part>>& parts,
                             std::uint32_t& nodes, std::string& why);
// What a bucket's versions past its newest record wait for.
struct bucket_wait {
    std::uint64_t bucket = 0;
    std::uint32_t nodes = 0;              // the job's then (bucket_nodes); 0: unknown
    std::vector<std::uint64_t> whole;     // past the record, every node's part arrived
    std::vector<std::uint64_t> gaps;      // below the newest whole one, some node's missing
    std::vector<std::string> lacking;     // the nodes that lack a gap
};
// The versions of `bucket` every node brought (their packs or manifests
// arrived, none skipped them) that a gap below holds up, or a crash before
// the record, and what they wait for: the gaps, which the lacking nodes'
// next daemons skip (job::skip_gaps) or commit. gc keeps them and `ls`
// does not call them dead. Only the job's newest gap_buckets_looked_at
// buckets, and only when bucket_nodes knows the job's nodes: a claim skips
// nothing otherwise.
// `going`: buckets (first versions) the caller is about to remove, left
// out of the newest few.
std::error_code bucket_waiting(backend& st, const std::string& job, std::uint64_t bucket,
                               bucket_wait& out, std::string& why,
                               const std::set<std::uint64_t>* going = nullptr);
// The wait of `version`, committed through a bucket by its manifests: empty
// `out.whole` when it does not wait there (not whole, or not in a bucket).
std::error_code version_waiting(backend& st, const std::string& job, std::uint64_t version,
                                bucket_wait& out, std::string& why,
                                const std::set<std::uint64_t>* going = nullptr);
// What a waiting version (or, `several`, a bucket's waiting versions) waits
// for, in words: "it waits…" ("they wait…").
std::string describe_wait(const bucket_wait& w, bool several = false);
// The job's buckets (their first versions), ascending: one listing (none:
// not an error).
std::error_code buckets(backend& st, const std::string& job, std::vector<std::uint64_t>& out);
// What has arrived at `bucket`'s tally, by node, each node's parts in
// version order (none when nothing has); corrupt, in words, when an
// arrival is not one try_complete_bucket made. One read of the tally; when
// it holds one node's parts or none, also the bucket's newest record's
// parts (a node alone records without arriving; an error when that record
// does not read).
std::error_code bucket_arrivals(backend& st, const std::string& job, std::uint64_t bucket,
                                std::map<std::string, std::vector<bucket_part>>& out,
                                std::string& why);

// Deletes one version: its COMPLETE record first (a version half deleted is
// never taken as complete), then its objects and its directory, with what
// crashed writers left in it when that is what keeps the directory
// (backend::leftovers). A version that is not there is not an error.
// Durable when it returns; a crash in the middle may leave part of it, as an
// incomplete version. A version a bucket's record holds is refused
// (errc::operation_not_supported): it would go only with its bucket; and
// so is any version when the buckets cannot be read.
std::error_code remove_version(backend& st, const std::string& job, std::uint64_t version);

// Removes one version a bucket's record completes (`iofwd rm`): the
// bucket's mark REMOVED.v<N> first, durable, which every reader honours at
// once (bucket_marks), then the version's own directory if a node's part
// was too large for a pack, then every pack of the bucket that now holds
// only versions removed or retired (`freed`); a pack that also holds a
// version still listed keeps its bytes until that one goes too, or the
// bucket (retention, gc). not_found when no bucket completes it.
// Version numbers are never used again (a new run numbers after every
// pack and record, and join_run refuses a run name used again while the
// run's first bucket holds its pack, a record or a mark), so a mark never
// hides a later version.
struct packs_freed {
    std::vector<std::string> packs;  // removed, by name
    std::uint64_t bytes = 0;         // theirs
    std::vector<std::string> kept;   // left: they hold the version beside one not removed
    std::string failed;              // a pack that would not go, in words (left there)
};
std::error_code remove_packed_version(backend& st, const std::string& job, std::uint64_t version,
                                      packs_freed& freed);
// The versions the job's buckets' marks hide, ascending: those
// remove_packed_version took out and those retention retired (a bucket's
// RETIRED.v<N>: its versions up to N). Settled for a claim that finds
// their records in a journal (journal.hpp's standing), never committed
// again, also once no complete version older than them is left and their
// packs are gone (drop_hidden_packs). Cost: a listing per bucket.
std::error_code hidden_versions(backend& st, const std::string& job,
                                std::vector<std::uint64_t>& out);

// How many complete versions of `job` are newer than `version` (0 when the
// store cannot say).
std::uint64_t complete_after(backend& st, const std::string& job, std::uint64_t version);

// A bucket and the versions it can hold: first .. end - 1 (end: the next
// bucket's first version).
struct bucket_span {
    std::uint64_t first = 0;
    std::uint64_t end = 0;
    bool operator==(const bucket_span&) const = default;
};

// The versions of the first bucket kept that retention removes while the
// bucket stays (its packs hold newer versions too): those up to `upto`,
// hidden by a mark (layout.hpp's bucket_retired_object); `dirs`: those of
// them with a directory (a node's part of a large version), ascending.
// bucket 0: none.
struct retirement {
    std::uint64_t bucket = 0;
    std::uint64_t upto = 0;
    std::vector<std::uint64_t> dirs;
    bool holds(std::uint64_t v) const { return bucket && bucket <= v && v <= upto; }
};

// The versions prune() would delete, ascending (none for keep 0): every
// version directory older than the oldest of the newest `keep` complete
// versions and than `below` (UINT64_MAX: no bound) (but, within or after a
// bucket kept, only one with its own COMPLETE record or retired: one
// without may be a node's part of a large version the bucket holds), and
// the versions of every bucket whose whole span is older than that.
// `doomed_buckets`: those buckets, ascending. The first bucket kept (the
// newest bucket always is: more of its versions may come) has its older
// versions retired (`retire`): they are in `out` too, and no more than
// `keep` versions stay listed, though their packs take up to a bucket's
// span of small versions' space until the bucket goes.
// Only complete versions whose record reads (their own COMPLETE as this
// job's and version's, or their bucket's) count among the `keep`; each
// passed over is added to `notes` with why. A version passed over is never
// removed for being passed over: it is newer than the oldest kept. A
// record whose read fails otherwise (an I/O error) stops the plan with
// that error, its words in notes->why.
struct prune_notes {
    std::vector<std::pair<std::uint64_t, std::string>> passed_over;  // version, why
    std::string why;  // why the plan failed, when it did in reading a record
};
std::error_code prune_plan(backend& st, const std::string& job, unsigned keep,
                           std::uint64_t below, std::vector<std::uint64_t>& out,
                           std::vector<bucket_span>& doomed_buckets, retirement& retire,
                           prune_notes* notes = nullptr);

// Deletes what a plan of prune_plan's says, buckets first (remove_bucket),
// then the retirement's mark, then versions (remove_version); `removed`
// gets the versions gone, also when it fails part-way (a bucket's as soon
// as its records are gone). `pause` as for prune().
std::error_code prune_exactly(backend& st, const std::string& job,
                              const std::vector<std::uint64_t>& doomed,
                              const std::vector<bucket_span>& doomed_buckets,
                              const retirement& retire, std::vector<std::uint64_t>& removed,
                              const std::function<bool()>& pause = {});

// The job's buckets without a record: packs of versions that never
// completed, a bucket still being written, or one a crash left half
// removed (gc asks only when no daemon holds the job), ascending; and, in
// words, each bucket whose record does not read (left alone: it may hold
// complete versions).
std::error_code unfinished_buckets(backend& st, const std::string& job,
                                   std::vector<bucket_span>& out,
                                   std::vector<std::string>& unreadable);

// Every record of the job's buckets that does not read (unreadable, not a
// bucket record, or another bucket's), in words: a damaged record takes
// back the versions only it said are complete, which then are in no
// listing of versions. For `iofwd ls` and `iofwd verify`; one read per
// record.
std::error_code damaged_bucket_records(backend& st, const std::string& job,
                                       std::vector<std::string>& out);

// The versions a node of the job skipped (docs/small-versions.md), by the
// newest record of each bucket that reads: not complete, and in no list of
// versions. For `iofwd ls`.
struct skipped_entry {
    std::uint64_t version = 0;
    std::string node;
    std::uint64_t bucket = 0;
};
std::error_code skipped_versions(backend& st, const std::string& job,
                                 std::vector<skipped_entry>& out);

// Deletes one bucket (docs/small-versions.md): its records first (then
// nothing of it is complete: `records_gone`), its tally, the directories of
// the large versions in its span its record said it holds, its packs, and
// its directory. A crash in the middle leaves a bucket with fewer records,
// or none (incomplete: the next prune or gc removes it), or an empty
// directory.
std::error_code remove_bucket(backend& st, const std::string& job, const bucket_span& bucket,
                              bool& records_gone);

// Keeps the newest `keep` complete versions; deletes what prune_plan says
// (prune_exactly). Returns what it removed.
// With `pause`: asked after each removed version or bucket; when it says
// yes, stops there with std::errc::operation_canceled (a later call goes
// on).
// `below`: no version from it on is touched (a daemon's versions still being
// committed, which may complete after newer ones).
// `notes`: as prune_plan's.
std::error_code prune(backend& st, const std::string& job, unsigned keep,
                      std::vector<std::uint64_t>& removed,
                      const std::function<bool()>& pause = {},
                      std::uint64_t below = UINT64_MAX,
                      prune_notes* notes = nullptr);

// The record of a named run (layout.hpp): read, or created by the first
// daemon of the run to look, with first-version `next` (the version after
// every one in the store) and that daemon's `pack_versions`, which every
// node then uses. Refuses a record that names another job or run or another
// number of nodes, and a run under which `node` has written already (one
// run name given to two runs).
std::error_code join_run(backend& st, const std::string& job, const std::string& run,
                         std::uint32_t nodes, const std::string& node, std::uint64_t next,
                         std::uint32_t pack_versions, run_record& out, std::string& why);

// Whether `version` of `job` is complete job-wide: one look at its COMPLETE
// record, cheap enough for every rank to poll (a version without one, in a
// pack or not complete yet: a listing of the job's buckets too, and for one
// in a bucket a listing of the bucket and a read of its record).
std::error_code committed(backend& st, const std::string& job, std::uint64_t version,
                          bool& yes);
// The same, or was (a newer version is complete: retention may have removed
// it since). When it is not, `why` says which nodes' manifests the version
// has. Lists the job and the version: for the message when waiting ends.
std::error_code commit_state(backend& st, const std::string& job, std::uint64_t version,
                             bool& yes, std::string& why);

}  // namespace iofwd::store
