#pragma once
// What a store holds, as the iofwd tool lists it and cleans it: the jobs, a
// job's versions with their state, size and time, which nodes' daemons are
// writing the job right now, and what crashes left behind. Reads listings,
// records and manifests only (a few operations per version and node, never
// the data): reading every byte is verify.hpp's.
//
// A version is
//   complete    its COMPLETE record, every node's manifest it lists (each
//               matching the record's checksum) and every object they list
//               are there;
//   damaged     it has a COMPLETE record but one of those is missing or does
//               not match (a changed byte in the data itself is found only by
//               reading it: verify);
//   incomplete  no COMPLETE record. When no live daemon holds a claim on the
//               job, nothing will ever complete it: it is `dead`, a crash
//               leftover that gc removes.
//
// A live daemon is found by its claim (backend::claim_job): a tool that
// changes a job takes every node's claim first (job_hold), so that no daemon
// can write the job meanwhile; one that only looks takes each claim and
// gives it back at once (probe_claims).
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "store/backend.hpp"
#include "store/catalog.hpp"

namespace iofwd::store {

// The jobs in the store (its top-level names), sorted. A store that does not
// exist yet is not an error here: the caller says so (open() creates it).
std::error_code list_jobs(backend& st, std::vector<std::string>& out);

// The job's version numbers, from its version directories, ascending;
// errc::not_found when the job is not in the store.
std::error_code job_versions(backend& st, const std::string& job, std::vector<std::uint64_t>& out);

enum class version_state { complete, incomplete, damaged };
const char* state_name(version_state s);

struct version_entry {
    std::uint64_t version = 0;
    version_state state = version_state::incomplete;
    std::string why;           // incomplete, damaged: what is missing or wrong, in words
    std::int64_t time = 0;     // seconds since the epoch: complete, when its record was
                               // written (committed by a bucket: its first node's pack
                               // or object); else its newest object's; 0 when unknown
    std::uint32_t nodes = 0;   // complete: the record's; else the nodes with a manifest
    std::uint32_t ranks = 0;   // complete: the manifests'; else the rank objects present
    std::uint64_t bytes = 0;   // of those ranks' objects
    bool dead = false;         // incomplete, no live daemon claims the job, no node's
                               // journal holds it, no node's manifest of it has yet
                               // to arrive, and it does not wait in its bucket, as far
                               // as could be read (it can never complete)
    std::vector<std::string> journaled_by;  // incomplete, no live daemon: the nodes whose
                                            // journals hold parts of it (journaled_versions)
    std::vector<std::string> arriving;  // incomplete, no live daemon: the nodes whose manifest
                                        // has yet to arrive at its bucket (manifests_to_arrive)
    std::string waiting;  // incomplete, no live daemon: every node's part of it arrived at
                          // its bucket, which waits (version_waiting): why, in words
    std::vector<std::uint64_t> waits_for;  // then: the versions below it some node lacks
};

struct job_entry {
    std::string job;
    std::vector<version_entry> versions;  // ascending
    std::vector<std::string> leftovers;   // backend::leftovers of the job
    std::vector<std::string> live_nodes;  // nodes whose claim a live daemon holds
    std::vector<std::string> damaged_buckets;  // damaged_bucket_records, in words
    std::vector<skipped_entry> skipped;        // skipped_versions
    std::string journal_problem;  // why the nodes' journals could not be read (then no
                                  // incomplete version is called dead)
};

// One version, from its listing, record and manifests.
std::error_code inspect_version(backend& st, const std::string& job, std::uint64_t version,
                                version_entry& out);

// The whole job: every version, its leftovers and its live claims (probed).
// errc::not_found with `why` when the job is not in the store.
std::error_code inspect_job(backend& st, const std::string& job, job_entry& out, std::string& why);

// The nodes whose claim on `job` a live process holds now. Each other claim
// is taken and given back at once: a daemon starting in that instant is
// refused as if a second job ran under the name.
std::error_code probe_claims(backend& st, const std::string& job, std::vector<std::string>& live);

// Every node's claim on a job, held: while it lives no daemon writes the job
// (one that starts is refused). Released when destroyed.
struct job_hold {
    std::vector<std::unique_ptr<claim>> claims;
    std::vector<std::string> nodes;  // whose claims, in the same order
};
// errc::rank_in_use when a live daemon holds a claim, with the nodes in
// `live` and a sentence in `why`; nothing is held then.
std::error_code hold_job(backend& st, const std::string& job, job_hold& out,
                         std::vector<std::string>& live, std::string& why);

// A version whose parts some node's journal still holds: a daemon that
// stopped after reporting it durable and before settling its records (a
// daemon that ends cleanly starts its journal over). The node's next
// daemon commits those parts at its claim (every rank of the node's is in
// the journal or committed: store::standing says pending), so the version
// may yet complete with the parts other nodes committed: not a leftover
// to remove.
struct journaled_version {
    std::uint64_t version = 0;
    std::uint64_t bucket = 0;  // its bucket of packs (0: committed as objects)
    std::vector<std::string> nodes;
};
// What the journals of `nodes` (hold_job's, or the job's claimants and
// backend::journal_nodes) hold of `job`,
// ascending by version. Only read: no claim needed, nothing created. None
// for a store without journals.
std::error_code journaled_versions(backend& st, const std::string& job,
                                   const std::vector<std::string>& nodes,
                                   std::vector<journaled_version>& out, std::string& why);
// Starts the journals of a held job's nodes over (journal::reset): what
// they held is dropped for good.
std::error_code discard_journals(backend& st, const std::string& job, const job_hold& hold,
                                 std::string& why);
// The same for one node's journal (none there: nothing done).
std::error_code discard_journal(backend& st, const std::string& job, const std::string& node,
                                std::string& why);

// What removing `versions` of a job would change in what its nodes'
// journals hold for their next daemons (store::standing): a record of a
// version in its own directory is settled while its version is not newer
// than the newest complete one, so removing the newest complete versions
// makes a crashed daemon's records of them pending again, and of versions
// removed before them too: the node's next daemon would commit them
// (complete again, for a job of one node). And a packed record is settled
// when its version is older than the oldest complete one (retention may
// have removed it), so removing the oldest makes a pending one settled:
// the next daemon would no longer commit it. Each of `nodes` whose journal
// holds either, with the versions, ascending. A version in a pack is kept
// removed by its bucket's mark: never revived.
struct journal_revival {
    std::string node;
    std::vector<std::uint64_t> revived;  // pending after, of `versions` or settled before
    std::vector<std::uint64_t> skipped;  // pending before, settled after
};
std::error_code journals_reviving(backend& st, const std::string& job,
                                  const std::vector<std::string>& nodes,
                                  const std::vector<std::uint64_t>& versions,
                                  std::vector<journal_revival>& out, std::string& why);
// The journals of a held job's nodes whose every record is settled
// (store::standing: none its node's next daemon would act on) are
// removed; the job's next daemon on the node writes a new one
// (IOFWD_JOURNAL_SIZE of zeros, on a thread). Not durable: a journal a
// crash brings back is the one before, as if gc had not run. `removed`:
// the nodes and the space each journal took on disk; `kept`: the nodes
// whose journal holds a record not settled, in words; `failed`: those
// that would not read or go, in words (left there). An error only when
// the job's versions cannot be listed.
struct removed_journal {
    std::string node;
    std::uint64_t bytes = 0;
};
std::error_code remove_idle_journals(backend& st, const std::string& job, const job_hold& hold,
                                     std::vector<removed_journal>& removed,
                                     std::vector<std::string>& kept,
                                     std::vector<std::string>& failed, std::string& why);

// "a live daemon on node nodeA holds job itest's claim (it is writing the
// job)": for refusals.
std::string describe_live(const std::string& job, const std::vector<std::string>& live);

}  // namespace iofwd::store
