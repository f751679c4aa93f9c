#pragma once
// The iofwd wire protocol between a rank (client) and its node's daemon.
//
// Every message is a 16-byte header followed by a payload:
//   u32 magic "IOFW" | u16 protocol version | u16 type | u64 payload length
// all little-endian. Data lengths are 64-bit everywhere. The messages travel
// on the control connection (a Unix stream socket); the checkpoint bytes
// themselves never do (beyond small inline writes): they go over UCX.
//
//   C->S CONNECT     rank, ranks, buffer length and address, job, run, UCX worker address,
//                    packed rkey
//   C<-S ACCEPT      the daemon's answer to CONNECT (or ERROR, which is a rejection)
//   C->S WRITE_REQ   [0, length) of the registered buffer as a new version: the
//                    rank pushes it as active messages (connect_flag_push,
//                    push_header) or the daemon gets it; a small write
//                    (<= max_eager) carries its bytes inline instead
//   C<-S WRITE_DONE  the bytes are in daemon memory; the buffer may be reused
//   C->S QUERY       the state of one of the rank's versions; with `wait`, answered
//                    only once it is durable (or failed)
//   C<-S VERSION_STATE the answer: pulling, flushing, durable or failed, size, crc32c;
//                    when durable, also when its flush began and ended (monotonic_ns)
//   C->S READ_REQ    a version's bytes from daemon memory, if it still holds all of them
//   C<-S READ_DATA   a piece of them (<= max_eager bytes at an offset), then a
//                    VERSION_STATE ends the answer: state flushing = served whole
//                    (size, crc32c of what was sent), any other = not in memory
//   C->S BYE         the rank is done
//   C<-S FINISHED    everything the rank wrote is durable
//   C->S FILE_OPEN   (shim) a file the rank will write through the daemon, by path;
//                    the rank names it with its own number
//   C->S FILE_WRITE  (shim) bytes [offset, offset+length) of an open file, or, with a
//                    run list, `length` bytes spread over the runs in order (a write
//                    through an MPI file view): pulled from the rank's memory
//                    (address, packed rkey) or carried inline; answered by
//                    WRITE_DONE once the daemon holds them
//   C->S FILE_SYNC   (shim) wait for the file's writes: written (flag 0), durable
//                    (fsync), and/or closed afterwards
//   C->S FILE_DRAIN  (shim) wait until every rank's writes to a path on this node
//                    are written (before the file is opened again)
//   C<-S FILE_DONE   the answer to FILE_OPEN, FILE_SYNC and FILE_DRAIN
//   C->S PING        are you there? (sent by a rank whose wait has heard nothing for a
//                    while); answered at once, whatever else the connection waits for
//   C<-S PONG        yes
//   C->S STATUS      what are you doing? (iofwd status): the first and only request of a
//                    connection of its own, without CONNECT
//   C<-S STATUS_REPLY the daemon's state (status_msg); the daemon then closes the
//                    connection
//   both ERROR       a code and a sentence, about one WRITE_REQ (its cookie) or,
//                    with cookie 0, about the connection, which the sender then closes
//
// Decoding never trusts the peer: truncated, oversized, unknown-type,
// wrong-magic and wrong-version input is rejected with an error code and a
// sentence that says what was wrong.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <system_error>
#include <variant>
#include <vector>

namespace iofwd::proto {

inline constexpr std::uint32_t magic = 0x57464f49;  // "IOFW" in memory order
inline constexpr std::uint16_t version = 10;
inline constexpr std::size_t header_size = 16;

enum class msg_type : std::uint16_t {
    connect = 1,
    accept = 2,
    write_req = 3,
    write_done = 4,
    bye = 5,
    finished = 6,
    error = 7,
    query = 8,
    version_state = 9,
    read_req = 10,
    read_data = 11,
    file_open = 12,
    file_write = 13,
    file_sync = 14,
    file_drain = 15,
    file_done = 16,
    ping = 17,
    pong = 18,
    status = 19,
    status_reply = 20,
};

const char* to_string(msg_type t) noexcept;

// Bounds a decoder enforces; an encoder never produces more.
inline constexpr std::size_t max_name = 255;           // job, node
inline constexpr std::size_t max_blob = 16 * 1024;     // worker address, rkey
inline constexpr std::size_t max_text = 4096;          // error text, store location, transport
inline constexpr std::size_t max_eager = 64 * 1024;    // bytes a WRITE_REQ may carry inline
inline constexpr std::uint32_t max_ranks = 1u << 16;    // ranks of a job on one node
inline constexpr std::uint32_t max_nodes = 100000;      // nodes of a job

struct header {
    msg_type type{};
    std::uint64_t length = 0;  // payload bytes after the header
};

struct connect_msg {
    std::uint32_t rank = 0;    // node-local rank
    std::uint32_t ranks = 0;   // node-local ranks of this job on this node (<= max_ranks)
    std::uint32_t pid = 0;
    std::uint32_t flags = 0;   // connect_flag_*
    std::uint64_t buffer_length = 0;
    std::uint64_t buffer_address = 0;
    std::uint32_t nodes = 1;   // nodes of the job (each with its own daemon)
    std::string job;
    // Names this run of the job on every node alike (io_init_comm, IOFWD_RUN,
    // Slurm's job and step): the daemons number its versions from one record
    // in the store. Empty: unknown; each daemon numbers from what it finds.
    std::string run;
    std::vector<std::byte> worker_address;
    std::vector<std::byte> rkey;
    bool operator==(const connect_msg&) const = default;
};
inline constexpr std::uint32_t connect_flag_blocking = 1u << 0;
// A process that writes files through the daemon (the MPI shim): no registered
// buffer (length 0, no rkey); every FILE_WRITE brings its own.
inline constexpr std::uint32_t connect_flag_files = 1u << 1;
// The rank pushes large writes as UCX active messages (rendezvous: the daemon
// reads them with cma, the rank's CPU stays out of the copy) instead of
// having the daemon get them (UCX 1.13 emulates that get with the rank's CPU).
inline constexpr std::uint32_t connect_flag_push = 1u << 2;
// The rank hands small writes over through a mailbox in shared memory
// (mailbox.hpp): ACCEPT then carries its memfd and an eventfd (SCM_RIGHTS).
inline constexpr std::uint32_t connect_flag_mailbox = 1u << 3;

// A UCX worker of the daemon that reads pushed chunks (a puller), by its
// address.
struct puller_address {
    std::vector<std::byte> address;
    bool operator==(const puller_address&) const = default;
};
inline constexpr std::size_t max_pullers = 64;

struct accept_msg {
    std::uint32_t daemon_pid = 0;
    std::uint64_t staging_bytes = 0;
    std::uint64_t chunk_bytes = 0;
    std::uint64_t next_version = 0;  // the version the rank's next write creates
    std::string node;
    std::string store;      // where the data goes, for humans
    std::string store_uri;  // the same, for store::open (e.g. "dir:/scratch/ckpt")
    std::string transport;  // UCX transports of the daemon's endpoint to the rank
    // Names this connection in pushed chunks: a random number the daemon
    // tells this rank only, so that no other process can push into its writes.
    std::uint64_t session = 0;
    // Where the rank pushes its chunks: each of the daemon's pullers, which
    // read one write's chunks at once on several cores. Empty: no pushing.
    std::vector<puller_address> pullers;
    std::uint64_t mailbox_bytes = 0;  // its records' capacity; 0: no mailbox
    bool operator==(const accept_msg&) const = default;
};

// A pushed chunk: a UCX active message (id am_push) whose header says whose
// write it belongs to, and whose data are bytes [offset, offset + length) of
// it. Pushed writes are announced by a WRITE_REQ or FILE_WRITE without inline
// data; the chunks may arrive before the announcement.
inline constexpr unsigned am_push = 1;
struct push_header {
    std::uint64_t session = 0;
    std::uint64_t cookie = 0;
    std::uint64_t offset = 0;
};
inline constexpr std::size_t push_header_size = 24;
void encode_push_header(const push_header& h, std::byte (&out)[push_header_size]) noexcept;
bool decode_push_header(std::span<const std::byte> in, push_header& out) noexcept;

struct write_req_msg {
    std::uint64_t cookie = 0;
    std::uint64_t length = 0;
    std::vector<std::byte> data;  // empty: the daemon pulls; else exactly `length` bytes
    bool operator==(const write_req_msg&) const = default;
};

struct write_done_msg {
    std::uint64_t cookie = 0;
    std::uint64_t version = 0;  // the version this write created
    bool operator==(const write_done_msg&) const = default;
};

struct bye_msg {
    bool operator==(const bye_msg&) const = default;
};

struct finished_msg {
    std::uint64_t versions = 0;  // versions of this rank now durable
    std::uint64_t bytes = 0;     // their total size
    std::uint32_t others = 0;    // the node's other ranks of the job not yet finished
    bool operator==(const finished_msg&) const = default;
};

// Which category an error value belongs to, so the receiver can rebuild the
// std::error_code.
enum class error_domain : std::uint32_t { runtime = 0, system = 1, ucx = 2 };

// With a cookie, the error answers that WRITE_REQ and the connection stays
// usable; with cookie 0 it ends the connection.
struct error_msg {
    std::uint64_t cookie = 0;
    error_domain domain = error_domain::runtime;
    std::int32_t value = 0;
    std::string text;
    bool operator==(const error_msg&) const = default;

    std::error_code code() const noexcept;
    static error_msg from(const std::error_code& ec, std::string text, std::uint64_t cookie = 0);
};

enum class version_state_t : std::uint32_t {
    unknown = 0,   // not a version this rank wrote through this daemon
    pulling = 1,
    flushing = 2,  // in daemon memory, on its way to the store
    durable = 3,
    failed = 4,
};

struct query_msg {
    std::uint64_t cookie = 0;
    std::uint64_t version = 0;
    std::uint32_t wait = 0;  // 1: answer once durable or failed
    bool operator==(const query_msg&) const = default;
};

struct version_state_msg {
    std::uint64_t cookie = 0;
    std::uint64_t version = 0;
    version_state_t state = version_state_t::unknown;
    std::uint64_t size = 0;
    std::uint32_t crc32c = 0;  // valid when durable
    // When durable: the daemon's first write of the version to the store and
    // its commit, on monotonic_ns()'s clock (0 for data that never went
    // through a flush, e.g. a version found in the store).
    std::uint64_t flush_start_ns = 0;
    std::uint64_t durable_ns = 0;
    bool operator==(const version_state_msg&) const = default;
};

struct read_req_msg {
    std::uint64_t cookie = 0;
    std::uint64_t version = 0;
    bool operator==(const read_req_msg&) const = default;
};

struct read_data_msg {
    std::uint64_t cookie = 0;
    std::uint64_t offset = 0;
    std::vector<std::byte> data;
    bool operator==(const read_data_msg&) const = default;
};

inline constexpr std::size_t max_path = 4096;

struct file_open_msg {
    std::uint64_t cookie = 0;
    std::uint64_t file = 0;  // the rank's number for it, nonzero
    std::string path;        // absolute
    bool operator==(const file_open_msg&) const = default;
};

// One piece of a write through a file view: `length` bytes at `offset`.
struct file_run {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    bool operator==(const file_run&) const = default;
};
// Runs one FILE_WRITE may list; the shim sends a longer list as several writes.
inline constexpr std::size_t max_file_runs = 64 * 1024;
// The most chunks (of ACCEPT's chunk_bytes) one write may be cut into: the
// daemon keeps a crc, a size and a flag per chunk of a write in flight, sized
// up front, so a rank's length must not choose it; a rank does not push more
// either. 2^20: 16 TiB in the default 16 MiB chunks.
inline constexpr std::uint64_t max_chunks_per_write = 1u << 20;
// The chunks of `chunk` bytes a write of `length` bytes is cut into, without
// the wrap of (length + chunk - 1) / chunk for lengths near 2^64.
constexpr std::uint64_t chunks_of(std::uint64_t length, std::uint64_t chunk) noexcept
{
    return length / chunk + (length % chunk != 0);
}
// A FILE_WRITE of several runs carries at least this many bytes per run on
// average, not counting two runs (a write may start and end inside a piece
// of its view): the daemon's list of a write in flight then takes at most
// about 3/8 of the write's own staging memory, so staging bounds it. (A view
// of smaller pieces is served better by MPI-IO's data sieving anyway.)
inline constexpr std::uint64_t min_run_average = 64;
constexpr bool runs_dense_enough(std::size_t runs, std::uint64_t length) noexcept
{
    return runs <= 2 || runs - 2 <= length / min_run_average;
}

struct file_write_msg {
    std::uint64_t cookie = 0;
    std::uint64_t file = 0;
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
    std::uint64_t address = 0;      // where the bytes are in the rank (pulled)
    std::vector<std::byte> rkey;    // its packed remote key (pulled)
    std::vector<std::byte> data;    // or exactly `length` bytes inline
                                    // (neither: pushed, on a pushing connection)
    // Empty: the bytes go to [offset, offset+length). Else the stream of
    // `length` bytes fills these runs one after the other; they are in
    // increasing order, do not overlap or touch, none is empty, their lengths
    // add up to `length`, they average min_run_average bytes at least, and
    // `offset` is the first run's.
    std::vector<file_run> runs;
    bool operator==(const file_write_msg&) const = default;
};

inline constexpr std::uint32_t file_sync_durable = 1u << 0;  // fsync too
inline constexpr std::uint32_t file_sync_close = 1u << 1;    // the rank closed it

struct file_sync_msg {
    std::uint64_t cookie = 0;
    std::uint64_t file = 0;
    std::uint32_t flags = 0;
    bool operator==(const file_sync_msg&) const = default;
};

struct file_drain_msg {
    std::uint64_t cookie = 0;
    std::string path;
    bool operator==(const file_drain_msg&) const = default;
};

struct file_done_msg {
    std::uint64_t cookie = 0;
    bool operator==(const file_done_msg&) const = default;
};

struct ping_msg {
    bool operator==(const ping_msg&) const = default;
};

struct pong_msg {
    bool operator==(const pong_msg&) const = default;
};

struct status_msg {
    bool operator==(const status_msg&) const = default;
};

// What a STATUS_REPLY lists, each list cut at its limit (the counts beside
// it say how many there are); an object name or path longer than
// max_status_object is cut too.
inline constexpr std::size_t max_status_ranks = 1024;
inline constexpr std::size_t max_status_transfers = 256;
inline constexpr std::size_t max_status_recent = 64;
inline constexpr std::size_t max_status_object = 512;

// A rank's connection, by its state (session.hpp's, from CONNECT on).
enum class rank_state_t : std::uint32_t {
    serving = 1,    // connected, writing
    bye = 2,        // said BYE: waits for FINISHED until its data is durable
    finishing = 3,  // FINISHED is on its way
    finished = 4,   // got FINISHED; its connection is gone
    gone = 5,       // its connection closed without FINISHED (died); its data is still landing
};

struct status_rank {
    std::uint32_t rank = 0;  // node-local
    std::uint32_t pid = 0;
    rank_state_t state = rank_state_t::serving;
    std::uint32_t flags = 0;      // its CONNECT's connect_flag_*
    std::uint64_t versions = 0;   // its versions durable
    std::uint64_t bytes = 0;      // their bytes
    bool operator==(const status_rank&) const = default;
};

// A write on its way: pulled into staging, then flushed to the store.
struct status_transfer {
    std::string object;  // the store object, or a forwarded file's path
    std::uint32_t rank = 0;
    std::uint64_t version = 0;  // 0: a write to a forwarded file
    std::uint64_t length = 0;
    std::uint64_t pulled = 0;   // bytes in staging so far (<= length)
    std::uint64_t flushed = 0;  // bytes written to the store so far (<= length)
    std::uint64_t started_ns = 0;  // monotonic_ns() when the write arrived
    bool operator==(const status_transfer&) const = default;
};

// A version of one rank made durable lately. Durations in nanoseconds, from
// the write's arrival at the daemon.
struct status_version {
    std::uint32_t rank = 0;
    std::uint64_t version = 0;
    std::uint64_t bytes = 0;
    std::uint64_t durable_ns = 0;  // monotonic_ns() when it became durable
    std::uint64_t blocked = 0;     // until WRITE_DONE (0 for a write through the mailbox)
    std::uint64_t latency = 0;     // until durable (>= blocked)
    std::uint64_t flush = 0;       // its flush alone: first store write to durable (<= latency)
    bool operator==(const status_version&) const = default;
};

struct status_reply_msg {
    std::uint32_t daemon_pid = 0;
    std::string iod_version;
    std::string session;
    std::string node;
    std::string store;         // for humans
    std::uint64_t started_ns = 0;  // monotonic_ns() when the daemon started
    std::uint64_t now_ns = 0;      // ... when it answered (>= started_ns)
    // The job (empty: none yet) and its ranks on this node.
    std::string job;
    std::string run;
    std::uint32_t ranks = 0;
    std::uint32_t nodes = 0;
    std::uint32_t connected = 0;  // connected + finished + died <= ranks
    std::uint32_t finished = 0;   // said BYE
    std::uint32_t died = 0;       // went without BYE
    // Versions of the job on this node: in flight by state, and durable.
    std::uint64_t pulling = 0;
    std::uint64_t flushing = 0;
    std::uint64_t durable = 0;        // rank versions
    std::uint64_t durable_bytes = 0;
    // Staging memory.
    std::uint64_t staging_used = 0;   // <= staging_total
    std::uint64_t staging_total = 0;
    std::uint64_t chunk_bytes = 0;
    std::uint32_t slot_waiters = 0;   // pulls waiting for a free slot
    // Of staging_used: held by pulls UCX never completed after their rank
    // went away, until its process has exited.
    std::uint64_t staging_stalled = 0;
    // The flush queue: store writes, fsyncs and commits on the flush threads.
    std::uint32_t flush_threads = 0;
    std::uint32_t flush_running = 0;  // <= flush_threads
    std::uint32_t flush_queued = 0;
    std::uint32_t flush_held = 0;     // held back while their write is pulled (flusher.hpp)
    std::uint32_t catalog_pending = 0;  // manifests and COMPLETE records to write
    std::uint32_t retention = 0;        // 0: idle, 1: waiting (data path, spacing), 2: running
    // What went wrong.
    std::uint64_t lost_versions = 0;
    std::string manifest_error;  // the first manifest or COMPLETE that failed; empty: none
    std::uint32_t connections = 0;  // ranks' connections held (rank_list may stop short)
    std::uint32_t transfers_total = 0;  // writes in flight (transfers may stop short)
    std::vector<status_rank> rank_list;
    std::vector<status_transfer> transfers;
    std::vector<status_version> recent;  // oldest first
    bool operator==(const status_reply_msg&) const = default;
};

// In msg_type order (protocol.cpp checks it at compile time).
using message = std::variant<connect_msg, accept_msg, write_req_msg, write_done_msg, bye_msg,
                             finished_msg, error_msg, query_msg, version_state_msg, read_req_msg,
                             read_data_msg, file_open_msg, file_write_msg, file_sync_msg,
                             file_drain_msg, file_done_msg, ping_msg, pong_msg, status_msg,
                             status_reply_msg>;

msg_type type_of(const message& m) noexcept;

// The clock of the times in messages: CLOCK_MONOTONIC in nanoseconds, one
// clock for every process of a node (not comparable between nodes).
std::uint64_t monotonic_ns() noexcept;

// Largest payload a message of this type may carry.
std::uint64_t max_payload(msg_type t) noexcept;

// Header plus payload, ready to send.
std::vector<std::byte> encode(const message& m);

// Checks the first header_size bytes. On failure `why` says what was wrong.
std::error_code decode_header(std::span<const std::byte> bytes, header& out, std::string& why);

// Decodes a payload whose header has already passed decode_header.
std::error_code decode_payload(const header& h, std::span<const std::byte> payload, message& out,
                               std::string& why);

// The first whole message at the start of `bytes` (a stream's receive
// buffer): `used` is its length in bytes, or 0 when it has not all arrived
// yet (`out` untouched). On failure (header or payload) `why` says what.
std::error_code decode_frame(std::span<const std::byte> bytes, message& out, std::size_t& used,
                             std::string& why);

}  // namespace iofwd::proto
