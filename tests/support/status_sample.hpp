#pragma once
// A daemon mid-job as its STATUS_REPLY says it: two ranks (one writing, one
// finished), one 5 GiB write flushing, one version durable, an error. The
// protocol's unit tests and the fuzz seeds (tests/fuzz/corpus_gen.cpp)
// start from it.
#include "protocol.hpp"

namespace test {

inline iofwd::proto::status_reply_msg sample_status_reply()
{
    using namespace iofwd::proto;
    status_reply_msg r;
    r.daemon_pid = 4711;
    r.iod_version = "0.1.0";
    r.session = "nodeA-12";
    r.node = "nodeA";
    r.store = "directory /scratch/ckpt";
    r.started_ns = 1000;
    r.now_ns = 9000;
    r.job = "climate";
    r.run = "slurm-4711.0";
    r.ranks = 2;
    r.nodes = 4;
    r.connected = 1;
    r.finished = 1;
    r.flushing = 1;
    r.durable = 1;
    r.durable_bytes = 5ull << 30;
    r.staging_used = 32ull << 20;
    r.staging_stalled = 16ull << 20;
    r.staging_total = 256ull << 20;
    r.chunk_bytes = 16ull << 20;
    r.flush_threads = 2;
    r.flush_running = 2;
    r.flush_queued = 7;
    r.catalog_pending = 1;
    r.retention = 1;
    r.lost_versions = 1;
    r.manifest_error = "No space left on device";
    r.connections = 2;
    r.transfers_total = 1;
    r.rank_list = {{0, 100, rank_state_t::serving, connect_flag_push, 1, 5ull << 30},
                   {1, 101, rank_state_t::finished, connect_flag_mailbox, 0, 0}};
    r.transfers = {{"climate/v00000002/nodeA.r0000", 0, 2, 5ull << 30, 5ull << 30, 1u << 20, 4000}};
    r.recent = {{0, 1, 5ull << 30, 3000, 100, 2000, 1500}};
    return r;
}

}  // namespace test
