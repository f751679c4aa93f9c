// Writes the harnesses' seed corpus, tests/fuzz/corpus/<target>/, from the
// project's own encoders, so that no seed is typed by hand and every one
// still means what its name says after the formats change:
//   protocol/  one valid message of each type (encode()), a stream of two,
//              and near misses: truncated, wrong magic or version, unknown
//              type, over the limit, fields that break a rule, a list that
//              claims more records than follow;
//   mailbox/   scripts (mailbox_script.hpp) that put records with the real
//              writer, wrap around the area, freeze, and break the format as
//              tests/libio/test_mailbox.cpp does;
//   store/     a manifest, a COMPLETE record and a run record (format_*), a
//              version directory name, a pack and its index (build_pack),
//              and near misses of each.
//
//   fuzz_corpus_gen DIR           (re)writes DIR/<target>/<seed>
//   fuzz_corpus_gen --check DIR   exit 1 when DIR differs from what it would write
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "store/layout.hpp"
#include "store/pack.hpp"
#include "mailbox.hpp"
#include "mailbox_script.hpp"
#include "protocol.hpp"
#include "../support/status_sample.hpp"

using namespace iofwd;
namespace fs = std::filesystem;

namespace {

using bytes = std::vector<std::uint8_t>;
using corpus = std::map<std::string, bytes>;  // "<target>/<seed>" -> contents

bytes from(const std::vector<std::byte>& b)
{
    bytes out(b.size());
    std::transform(b.begin(), b.end(), out.begin(),
                   [](std::byte x) { return std::to_integer<std::uint8_t>(x); });
    return out;
}

bytes from(const std::string& s) { return bytes(s.begin(), s.end()); }

std::vector<std::byte> blob(std::size_t n, unsigned char fill)
{
    return std::vector<std::byte>(n, static_cast<std::byte>(fill));
}

void put_u64(bytes& b, std::size_t at, std::uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

void protocol_seeds(corpus& c)
{
    using namespace proto;
    connect_msg conn{3, 8, 4242, connect_flag_blocking | connect_flag_mailbox, 1u << 20,
                     0x7f0012345000ull, 2, "job", "run-1", blob(12, 0xab), blob(8, 0x11)};
    const status_reply_msg status = test::sample_status_reply();
    const std::vector<std::pair<std::string, message>> valid = {
        {"connect", conn},
        {"accept", accept_msg{99, 256u << 20, 16u << 20, 12, "node-7", "directory /s/job",
                              "dir:/s", "cma", 77, {{blob(12, 3)}, {blob(12, 4)}}, 4096}},
        {"write_req", write_req_msg{5, 1u << 20, {}}},
        {"write_done", write_done_msg{5, 12}},
        {"bye", bye_msg{}},
        {"finished", finished_msg{3, 3u << 20, 1}},
        {"error", error_msg{5, error_domain::system, 28, "no space left on /s"}},
        {"query", query_msg{6, 12, 1}},
        {"version_state",
         version_state_msg{6, 12, version_state_t::durable, 1u << 20, 0xdeadbeef, 100, 200}},
        {"read_req", read_req_msg{7, 12}},
        {"read_data", read_data_msg{7, 64, blob(16, 0x42)}},
        {"file_open", file_open_msg{8, 1, "/tmp/out.h5"}},
        {"file_write", file_write_msg{9, 1, 4096, 16, 0, {}, blob(16, 0x24), {}}},
        {"file_write_runs",
         file_write_msg{9, 1, 4096, 192, 0, {}, {}, {{4096, 64}, {8192, 128}}}},
        {"file_sync", file_sync_msg{10, 1, file_sync_durable | file_sync_close}},
        {"file_drain", file_drain_msg{11, "/tmp/out.h5"}},
        {"file_done", file_done_msg{11}},
        {"ping", ping_msg{}},
        {"pong", pong_msg{}},
        {"status", status_msg{}},
        {"status_reply", status},
    };
    for (const auto& [name, m] : valid)
        c["protocol/valid-" + name] = from(encode(m));

    auto stream = from(encode(write_req_msg{12, 4, blob(4, 0x77)}));
    const auto query = from(encode(query_msg{12, 13, 0}));
    stream.insert(stream.end(), query.begin(), query.end());
    c["protocol/stream-write_req-query"] = stream;

    auto truncated = from(encode(conn));
    truncated.resize(truncated.size() - 3);
    c["protocol/miss-truncated-connect"] = truncated;

    auto wrong_magic = from(encode(write_done_msg{1, 1}));
    wrong_magic[0] ^= 0x20;
    c["protocol/miss-wrong-magic"] = wrong_magic;

    auto old_version = from(encode(write_done_msg{1, 1}));
    old_version[4] = static_cast<std::uint8_t>(version - 1);
    c["protocol/miss-old-version"] = old_version;

    auto unknown_type = from(encode(file_done_msg{1}));
    unknown_type[6] = static_cast<std::uint8_t>(msg_type::status_reply) + 1;
    c["protocol/miss-unknown-type"] = unknown_type;

    auto over_limit = from(encode(write_done_msg{1, 1}));
    put_u64(over_limit, 8, max_payload(msg_type::write_done) + 1);
    over_limit.push_back(0);
    c["protocol/miss-over-limit"] = over_limit;

    auto trailing = from(encode(query_msg{1, 1, 0}));
    trailing.push_back(0);
    put_u64(trailing, 8, trailing.size() - header_size);
    c["protocol/miss-trailing-byte"] = trailing;

    auto no_ranks = conn;
    no_ranks.ranks = 0;
    c["protocol/miss-connect-ranks-0"] = from(encode(no_ranks));
    auto rank_too_big = conn;
    rank_too_big.rank = conn.ranks;
    c["protocol/miss-connect-rank-not-below-ranks"] = from(encode(rank_too_big));
    c["protocol/miss-write_req-inline-length"] = from(encode(write_req_msg{1, 10, blob(5, 1)}));
    c["protocol/miss-query-wait-2"] = from(encode(query_msg{1, 1, 2}));
    c["protocol/miss-version_state-durable-before-flush"] = from(
        encode(version_state_msg{1, 1, version_state_t::durable, 1, 1, 200, 100}));
    c["protocol/miss-file_write-overflow"] =
        from(encode(file_write_msg{1, 1, UINT64_MAX - 1, 4, 0, {}, {}, {}}));
    c["protocol/miss-file_write-data-and-rkey"] =
        from(encode(file_write_msg{1, 1, 0, 4, 0, blob(4, 9), blob(4, 8), {}}));
    c["protocol/miss-file_write-runs-touch"] =
        from(encode(file_write_msg{1, 1, 0, 8, 0, {}, blob(8, 3), {{0, 4}, {4, 4}}}));
    c["protocol/miss-file_open-relative"] = from(encode(file_open_msg{1, 1, "out.h5"}));
    c["protocol/miss-file_sync-flags"] = from(encode(file_sync_msg{1, 1, 4}));
    c["protocol/miss-error-domain"] =
        from(encode(error_msg{1, static_cast<error_domain>(3), 1, "x"}));
    auto dead_rank = status;
    dead_rank.rank_list[1].state = static_cast<rank_state_t>(9);
    c["protocol/miss-status_reply-rank-state"] = from(encode(dead_rank));
    auto overflushed = status;
    overflushed.transfers[0].flushed = overflushed.transfers[0].length + 1;
    c["protocol/miss-status_reply-flushed-over-length"] = from(encode(overflushed));
    // Three list counts end the message: claim more recent versions than follow.
    auto bare = status;
    bare.rank_list.clear();
    bare.transfers.clear();
    bare.recent.clear();
    auto claims = from(encode(bare));
    claims[claims.size() - 4] = 3;
    c["protocol/miss-status_reply-list-longer-than-payload"] = claims;
}

void mailbox_seeds(corpus& c)
{
    using fuzz::mailbox_script::builder;
    constexpr std::uint16_t area = mailbox::header_bytes;
    auto u32 = [](std::uint32_t v) {
        return bytes{static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
                     static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
    };
    auto seed = [&](const std::string& name, const builder& b) {
        c["mailbox/" + name] = b.bytes();
    };

    seed("valid-version-record", builder(1024, 0).put(false, 1, 100, 1).drain());
    seed("valid-file-record", builder(1024, 0).put(true, 2, 200, 2).drain());
    seed("valid-max-length", builder(1024, 0).put(false, 1, 1024 / 2 - 32, 3).drain());
    {
        // Records of 64 and 128 bytes in a 256-byte area: they wrap, and a
        // 128-byte one that finds 64 bytes of room leaves a pad record.
        builder b(256, 0);
        const std::uint16_t lengths[] = {40, 10, 40, 90, 10, 40, 60, 1, 96, 33, 40, 10};
        for (std::uint8_t i = 0; i < std::size(lengths); ++i)
            b.put(i % 3 == 0, static_cast<std::uint8_t>(i + 1), lengths[i], i).next().release();
        seed("valid-wrap-around", b.drain());
    }
    seed("valid-frozen",
         builder(1024, 1).put(false, 1, 100, 1).freeze().put(false, 2, 100, 2).drain());
    seed("valid-full-then-release",
         builder(512, 0).put(false, 1, 200, 1).put(false, 2, 200, 2).put(false, 3, 200, 3)
             .next().release().put(false, 3, 200, 3).drain());

    // One 100-byte record takes 192 bytes of the area.
    seed("miss-tail-beyond", builder(1024, 0).put(false, 1, 100, 1).tail(3 * 1024).next());
    seed("miss-tail-misaligned", builder(1024, 0).put(false, 1, 100, 1).tail(193).next());
    seed("miss-tail-behind", builder(1024, 0).put(false, 1, 100, 1).next().tail(0).next());
    seed("miss-garbage-head",
         builder(1024, 0).put(false, 1, 100, 1).poke(area, bytes(32, 0x5a)).next());
    seed("miss-length-past-tail",
         builder(1024, 0).put(false, 1, 100, 1).poke(area + 4, u32(2000)).next());
    seed("miss-longer-than-daemon-takes", builder(1024, 4 * 10 + 3).put(false, 1, 100, 1).next());
    seed("miss-cookie-0", builder(1024, 0).put(false, 0, 100, 1).next());
    {
        // A record the rank forged by hand: head, 8 bytes, published.
        bytes forged = u32(fuzz::mailbox_script::version_magic);
        for (std::uint32_t v : {8u, 9u, 0u, 1u, 0u, 0u, 0u})
            for (auto x : u32(v))
                forged.push_back(x);
        forged.insert(forged.end(), 8, 0xee);
        seed("valid-forged-record", builder(1024, 2).poke(area, forged).advance(1).drain());
    }
    // A pad at the start of the area that fills a whole lap; the daemon's
    // head moved past it (as a release would), then a record.
    bytes head_256(8, 0);
    put_u64(head_256, 0, 256);
    // The rank's own tail and the daemon's head moved to 6 bytes before the
    // end of a 4096-byte area: a writer that read the tail back wrote a pad
    // head past the area (found by the fuzzer, 2026-11-26). It writes at its
    // own tail and refuses the head; the daemon finds the tail impossible.
    bytes head_4090(8, 0);
    put_u64(head_4090, 0, 4090);
    seed("miss-writer-tail-moved",
         builder(4096, 0).tail(4090).poke(fuzz::mailbox_script::head_at, head_4090)
             .put(false, 5, 1, 7).next());
    seed("valid-forged-pad", builder(256, 0)
                                 .poke(area, u32(fuzz::mailbox_script::pad_magic))
                                 .tail(256)
                                 .next()
                                 .poke(fuzz::mailbox_script::head_at, head_256)
                                 .put(false, 1, 40, 1)
                                 .drain());
}

void store_seeds(corpus& c)
{
    using namespace store;
    const manifest m{"job", "node-1", 12, 2, {{0, 1048576, 0xdeadbeef}, {1, 4096, 0x1234}}};
    const auto mtext = format_manifest(m);
    c["store/valid-manifest"] = from(mtext);
    c["store/valid-manifest-bucket"] =
        from(format_manifest(manifest{"job", "node-1", 70, 1, {{0, 4096, 7}}, 65, 3}));
    const complete_record cr{"job", 12, {{"node-1", 2, 0xcafef00d}, {"node-2", 4, 7}}};
    const auto ctext = format_complete(cr);
    c["store/valid-complete"] = from(ctext);
    const auto rtext = format_run(run_record{"job", "slurm-4711.0", 13, 2});
    c["store/valid-run"] = from(rtext);
    c["store/valid-run-packs"] = from(format_run(run_record{"job", "slurm-4711.0", 13, 2, 64}));
    c["store/valid-version-dir"] = from(version_dir("job", 12).substr(4));

    auto edit = [](std::string s, const std::string& from, const std::string& to) {
        const auto at = s.find(from);
        if (at != std::string::npos)
            s.replace(at, from.size(), to);
        return s;
    };
    c["store/miss-manifest-no-end"] = from(edit(mtext, "end\n", ""));
    c["store/miss-manifest-rank-order"] = from(edit(mtext, "rank 0 ", "rank 1 "));
    c["store/miss-manifest-crc-9-digits"] = from(edit(mtext, "deadbeef", "deadbeef0"));
    c["store/miss-manifest-ranks-0"] = from(edit(mtext, "ranks 2", "ranks 0"));
    c["store/valid-manifest-upper-hex"] = from(edit(mtext, "deadbeef", "DEADBEEF"));
    c["store/miss-complete-nodes-0"] = from(edit(ctext, "nodes 2", "nodes 0"));
    c["store/miss-complete-node-no-ranks"] = from(edit(ctext, "node-2 ranks 4", "node-2 4"));
    c["store/miss-complete-name-with-ranks"] =
        from(edit(ctext, "node-2 ranks", "node-2 ranks 1 ranks"));
    c["store/miss-run-first-version-0"] = from(edit(rtext, "first-version 13", "first-version 0"));
    c["store/miss-run-truncated"] = from(rtext.substr(0, rtext.size() / 2));
    c["store/miss-version-dir-sign"] = from(std::string("v+0000012"));

    // A pack of two versions of 2 ranks, whole; its index alone; torn.
    const std::vector<std::byte> a(100, std::byte{1}), b(3, std::byte{2});
    const std::vector<pack_input> parts{{12, 0, 2, a}, {12, 1, 2, b}, {13, 0, 2, b}, {13, 1, 2, a}};
    std::vector<std::byte> pack;
    std::string why;
    if (build_pack("job", "node-1", parts, pack, why)) {
        std::fprintf(stderr, "fuzz_corpus_gen: %s\n", why.c_str());
        std::exit(1);
    }
    c["store/valid-pack"] = from(pack);
    // The index as the harness takes it: its offset (8 bytes), then its text.
    const std::string whole(reinterpret_cast<const char*>(pack.data()), pack.size());
    const std::uint64_t at = whole.find("iofwd-pack 1\n");
    std::string index(8, '\0');
    std::memcpy(index.data(), &at, 8);
    index += whole.substr(at, whole.size() - at - pack_trailer_size);
    c["store/valid-pack-index"] = from(index);
    c["store/miss-pack-torn"] = from(std::vector<std::byte>(pack.begin(), pack.end() - 1));

    // A bucket's record of two nodes, one with two packs; one with a gap.
    const bucket_record bucket{"job", 65, 66, 70, 2,
                               {{"node-1", 2, 65, 67, 0x1234abcd}, {"node-1", 2, 68, 70, 7},
                                {"node-2", 1, 66, 72, 0xffffffff}}};
    const std::string btext = format_bucket(bucket);
    c["store/valid-bucket"] = from(btext);
    // One node skips version 67 (the second layout).
    const bucket_record with_skip{"job", 65, 66, 68, 2,
                                  {{"node-1", 2, 65, 68, 1}, {"node-2", 1, 66, 66, 2},
                                   {"node-2", 1, 67, 67, 0, false, true},
                                   {"node-2", 1, 68, 68, 3, true}}};
    c["store/valid-bucket-skip"] = from(format_bucket(with_skip));
    c["store/miss-bucket-gap"] = from(edit(btext, "68 70", "69 70"));
}

bytes read_file(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv)
{
    const bool check = argc == 3 && std::string(argv[1]) == "--check";
    if (argc != 2 && !check) {
        fmt::print(stderr, "usage: {} [--check] CORPUS_DIR\n", argv[0]);
        return 2;
    }
    const fs::path dir = argv[argc - 1];
    corpus c;
    protocol_seeds(c);
    mailbox_seeds(c);
    store_seeds(c);

    int differ = 0;
    for (const auto& [name, contents] : c) {
        const fs::path p = dir / name;
        if (check) {
            if (!fs::exists(p) || read_file(p) != contents) {
                fmt::print(stderr, "{}: {}\n", p.string(), fs::exists(p) ? "differs" : "missing");
                ++differ;
            }
            continue;
        }
        fs::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary)
            .write(reinterpret_cast<const char*>(contents.data()),
                   static_cast<std::streamsize>(contents.size()));
    }
    // Seeds no longer generated: stale in a check, removed on a write.
    for (const char* target : {"protocol", "mailbox", "store"}) {
        if (!fs::is_directory(dir / target))
            continue;
        for (const auto& e : fs::directory_iterator(dir / target)) {
            const auto name = std::string(target) + "/" + e.path().filename().string();
            if (c.contains(name))
                continue;
            if (check) {
                fmt::print(stderr, "{}: not generated\n", e.path().string());
                ++differ;
            } else {
                fs::remove(e.path());
            }
        }
    }
    if (check) {
        if (differ)
            fmt::print(stderr, "{} seeds differ from the generator's: run {} {}\n", differ,
                       argv[0], dir.string());
        else
            fmt::print("{} seeds as generated\n", c.size());
        return differ ? 1 : 0;
    }
    fmt::print("wrote {} seeds under {}\n", c.size(), dir.string());
    return 0;
}
