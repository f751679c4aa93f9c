#include <catch2/catch.hpp>

#include <functional>

#include <fmt/format.h>

#include "errors.hpp"
#include "protocol.hpp"
#include "status_sample.hpp"

using namespace iofwd;
using namespace iofwd::proto;

namespace {

message round_trip(const message& m)
{
    const auto bytes = encode(m);
    header h;
    std::string why;
    REQUIRE_FALSE(decode_header(bytes, h, why));
    CHECK(h.type == type_of(m));
    CHECK(h.length == bytes.size() - header_size);
    message out;
    REQUIRE_FALSE(decode_payload(h, std::span(bytes).subspan(header_size), out, why));
    return out;
}

connect_msg sample_connect()
{
    connect_msg c;
    c.rank = 3;
    c.ranks = 8;
    c.pid = 4242;
    c.flags = connect_flag_blocking;
    c.buffer_length = 5ull << 30;  // over 4 GiB: lengths are 64-bit
    c.buffer_address = 0x7f0012345000ull;
    c.job = "climate-run.7";
    c.run = "slurm-4711.0";
    c.worker_address.assign(300, std::byte{0xab});
    c.rkey.assign(77, std::byte{0x11});
    return c;
}

std::error_code decode_all(std::vector<std::byte> bytes, std::string& why)
{
    header h;
    if (auto ec = decode_header(bytes, h, why))
        return ec;
    message m;
    return decode_payload(h, std::span(bytes).subspan(header_size), m, why);
}

}  // namespace

TEST_CASE("every message survives encode and decode unchanged", "[protocol]")
{
    const auto c = sample_connect();
    CHECK(std::get<connect_msg>(round_trip(c)) == c);

    accept_msg a{99, 256ull << 20, 16ull << 20, 12, "node-7", "directory /scratch/x/job",
                 "dir:/scratch/x", "cma, posix", 77,
                 {{std::vector<std::byte>(90, std::byte{3})}, {std::vector<std::byte>(91, std::byte{4})}},
                 256 * 1024};
    CHECK(std::get<accept_msg>(round_trip(a)) == a);

    write_req_msg w{17, 6ull << 30, {}};
    CHECK(std::get<write_req_msg>(round_trip(w)) == w);
    write_req_msg eager{18, 3, {std::byte{1}, std::byte{2}, std::byte{3}}};
    CHECK(std::get<write_req_msg>(round_trip(eager)) == eager);

    write_done_msg d{17, 1ull << 40};
    CHECK(std::get<write_done_msg>(round_trip(d)) == d);

    CHECK(std::holds_alternative<bye_msg>(round_trip(bye_msg{})));
    CHECK(std::holds_alternative<ping_msg>(round_trip(ping_msg{})));
    CHECK(std::holds_alternative<pong_msg>(round_trip(pong_msg{})));
    CHECK(std::holds_alternative<status_msg>(round_trip(status_msg{})));
    const auto st = test::sample_status_reply();
    CHECK(std::get<status_reply_msg>(round_trip(st)) == st);
    CHECK(std::get<status_reply_msg>(round_trip(status_reply_msg{})) == status_reply_msg{});

    query_msg q{8, 12, 1};
    CHECK(std::get<query_msg>(round_trip(q)) == q);

    version_state_msg vs{8, 12, version_state_t::durable, 5ull << 30, 0xcafef00d, 1000, 2500};
    CHECK(std::get<version_state_msg>(round_trip(vs)) == vs);

    read_req_msg rr{9, 4};
    CHECK(std::get<read_req_msg>(round_trip(rr)) == rr);
    read_data_msg rd{9, 1ull << 33, {std::byte{7}, std::byte{8}}};
    CHECK(std::get<read_data_msg>(round_trip(rd)) == rd);

    finished_msg f{3, 9ull << 30, 2};
    CHECK(std::get<finished_msg>(round_trip(f)) == f);

    file_open_msg fo{10, 3, "/scratch/run/out.h5"};
    CHECK(std::get<file_open_msg>(round_trip(fo)) == fo);
    file_write_msg fw{11, 3, 7ull << 32, 5ull << 30, 0x7f0000001000ull,
                      std::vector<std::byte>(40, std::byte{0x5a}), {}, {}};
    CHECK(std::get<file_write_msg>(round_trip(fw)) == fw);
    file_write_msg fe{12, 3, 4096, 2, 0, {}, {std::byte{9}, std::byte{8}}, {}};
    CHECK(std::get<file_write_msg>(round_trip(fe)) == fe);
    // A write through a file view: its bytes spread over runs.
    file_write_msg fr{13, 3, 100, 300, 0x7f0000002000ull, std::vector<std::byte>(40, std::byte{1}),
                      {}, {{100, 100}, {300, 100}, {1ull << 40, 100}}};
    CHECK(std::get<file_write_msg>(round_trip(fr)) == fr);
    file_sync_msg fs{13, 3, file_sync_durable | file_sync_close};
    CHECK(std::get<file_sync_msg>(round_trip(fs)) == fs);
    file_drain_msg fd{14, "/scratch/run/out.h5"};
    CHECK(std::get<file_drain_msg>(round_trip(fd)) == fd);
    file_done_msg done{14};
    CHECK(std::get<file_done_msg>(round_trip(done)) == done);

    auto e = error_msg::from(make_error_code(errc::too_large), "too big", 5);
    auto back = std::get<error_msg>(round_trip(e));
    CHECK(back == e);
    CHECK(back.code() == errc::too_large);
    CHECK(back.cookie == 5);
}

TEST_CASE("error messages carry system and UCX codes back intact", "[protocol]")
{
    auto sys = error_msg::from(std::error_code(ENOSPC, std::system_category()), "disk full");
    CHECK(std::get<error_msg>(round_trip(sys)).code() == std::error_code(ENOSPC, std::system_category()));
    auto ucx = error_msg::from(make_ucx_error(UCS_ERR_UNREACHABLE), "unreachable");
    CHECK(std::get<error_msg>(round_trip(ucx)).code() == make_ucx_error(UCS_ERR_UNREACHABLE));
}

TEST_CASE("the header is little-endian magic, version, type, 64-bit length", "[protocol]")
{
    const auto bytes = encode(write_req_msg{1, 2, {}});
    REQUIRE(bytes.size() == header_size + 20);
    CHECK(bytes[0] == std::byte{'I'});
    CHECK(bytes[1] == std::byte{'O'});
    CHECK(bytes[2] == std::byte{'F'});
    CHECK(bytes[3] == std::byte{'W'});
    CHECK(bytes[4] == std::byte{version & 0xff});
    CHECK(bytes[6] == std::byte{static_cast<unsigned char>(msg_type::write_req)});
    CHECK(bytes[8] == std::byte{20});
}

TEST_CASE("a truncated header is rejected", "[protocol]")
{
    auto bytes = encode(bye_msg{});
    bytes.resize(header_size - 1);
    header h;
    std::string why;
    CHECK(decode_header(bytes, h, why) == errc::protocol_error);
    CHECK(why.find("truncated header") != std::string::npos);
}

TEST_CASE("decode_frame takes one whole message off a stream's buffer, or waits for more",
          "[protocol]")
{
    query_msg q;
    q.cookie = 7;
    q.version = 3;
    const auto first = encode(q);
    const auto second = encode(bye_msg{});
    std::vector<std::byte> stream = first;
    stream.insert(stream.end(), second.begin(), second.end());
    message m;
    std::size_t used = 99;
    std::string why;
    // Every proper prefix of the first message is incomplete, never an error.
    for (std::size_t n = 0; n < first.size(); ++n) {
        REQUIRE_FALSE(decode_frame(std::span(stream).first(n), m, used, why));
        CHECK(used == 0);
    }
    REQUIRE_FALSE(decode_frame(stream, m, used, why));
    CHECK(used == first.size());
    CHECK(m == message(q));
    REQUIRE_FALSE(decode_frame(std::span(stream).subspan(used), m, used, why));
    CHECK(used == second.size());
    CHECK(std::holds_alternative<bye_msg>(m));
    // A bad header fails before its payload has arrived.
    auto bad = first;
    bad[0] = std::byte{'X'};
    CHECK(decode_frame(std::span(bad).first(header_size), m, used, why) == errc::protocol_error);
    CHECK(used == 0);
    CHECK(why.find("bad magic") != std::string::npos);
}

TEST_CASE("a wrong magic is rejected", "[protocol]")
{
    auto bytes = encode(bye_msg{});
    bytes[0] = std::byte{'X'};
    std::string why;
    CHECK(decode_all(bytes, why) == errc::protocol_error);
    CHECK(why.find("bad magic") != std::string::npos);
}

TEST_CASE("another protocol version is rejected as a version mismatch", "[protocol]")
{
    auto bytes = encode(bye_msg{});
    bytes[4] = std::byte{static_cast<unsigned char>(version + 1)};
    std::string why;
    CHECK(decode_all(bytes, why) == errc::version_mismatch);
    CHECK(why.find(fmt::format("version {}", version + 1)) != std::string::npos);
}

TEST_CASE("an unknown message type is rejected", "[protocol]")
{
    for (unsigned t : {0u, 21u, 0xffffu}) {
        auto bytes = encode(bye_msg{});
        bytes[6] = std::byte{static_cast<unsigned char>(t & 0xff)};
        bytes[7] = std::byte{static_cast<unsigned char>(t >> 8)};
        std::string why;
        CHECK(decode_all(bytes, why) == errc::protocol_error);
        CHECK(why.find("unknown message type") != std::string::npos);
    }
}

TEST_CASE("an oversized length is rejected before any payload is read", "[protocol]")
{
    auto bytes = encode(write_req_msg{1, 2, {}});
    bytes[8 + 7] = std::byte{0x01};  // length 2^56 + 20
    header h;
    std::string why;
    CHECK(decode_header(bytes, h, why) == errc::protocol_error);
    CHECK(why.find("exceeds the limit") != std::string::npos);
    // A BYE may carry nothing at all.
    auto bye = encode(bye_msg{});
    bye[8] = std::byte{1};
    CHECK(decode_header(bye, h, why) == errc::protocol_error);
}

TEST_CASE("a payload shorter than its fields is rejected for every message type", "[protocol]")
{
    const std::vector<message> all = {sample_connect(),
                                      accept_msg{1, 2, 3, 4, "n", "s", "u", "t", 5, {}},
                                      query_msg{1, 2, 1},
                                      version_state_msg{1, 2, version_state_t::failed, 3, 4},
                                      read_req_msg{1, 2},
                                      read_data_msg{1, 2, {std::byte{3}}},
                                      write_req_msg{1, 2, {}},
                                      write_done_msg{1, 2},
                                      finished_msg{1, 2, 3},
                                      file_open_msg{1, 2, "/a"},
                                      file_write_msg{1, 2, 3, 1, 0, {}, {std::byte{4}}, {}},
                                      file_sync_msg{1, 2, 1},
                                      file_drain_msg{1, "/a"},
                                      file_done_msg{1},
                                      test::sample_status_reply(),
                                      error_msg::from(make_error_code(errc::corrupt), "x")};
    for (const auto& m : all) {
        const auto full = encode(m);
        const std::size_t payload = full.size() - header_size;
        for (std::size_t cut = 0; cut < payload; ++cut) {
            header h;
            std::string why;
            REQUIRE_FALSE(decode_header(full, h, why));
            message out;
            const auto ec = decode_payload(h, std::span(full).subspan(header_size, cut), out, why);
            CHECK(ec == errc::protocol_error);
        }
        // The header's own length matters too: claim one byte less.
        header h;
        std::string why;
        REQUIRE_FALSE(decode_header(full, h, why));
        h.length -= 1;
        message out;
        CHECK(decode_payload(h, std::span(full).subspan(header_size, h.length), out, why) ==
              errc::protocol_error);
    }
}

TEST_CASE("trailing bytes after the fields are rejected", "[protocol]")
{
    auto bytes = encode(sample_connect());
    bytes.push_back(std::byte{0});
    const std::uint64_t len = bytes.size() - header_size;
    for (int i = 0; i < 8; ++i)
        bytes[8 + i] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
    std::string why;
    CHECK(decode_all(bytes, why) == errc::protocol_error);
    CHECK(why.find("1 unexpected trailing bytes") != std::string::npos);
    // For a fixed-size message the header check already refuses the extra byte.
    auto req = encode(finished_msg{1, 2, 3});
    req.push_back(std::byte{0});
    req[8] = std::byte{21};
    CHECK(decode_all(req, why) == errc::protocol_error);
}

TEST_CASE("a string longer than its limit or than the payload is rejected", "[protocol]")
{
    auto c = sample_connect();
    c.job = std::string(max_name + 1, 'j');
    std::string why;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    CHECK(why.find("'job'") != std::string::npos);
    c = sample_connect();
    c.run = std::string(max_name + 1, 'r');
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    CHECK(why.find("'run'") != std::string::npos);

    // A blob length field that claims more than what follows.
    auto bytes = encode(sample_connect());
    const std::size_t job_len_at = header_size + 36;
    bytes[job_len_at] = std::byte{200};
    CHECK(decode_all(bytes, why) == errc::protocol_error);
}

TEST_CASE("CONNECT with impossible ranks or empty keys is rejected", "[protocol]")
{
    std::string why;
    auto c = sample_connect();
    c.rank = 8;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    CHECK(why.find("not below ranks") != std::string::npos);
    c = sample_connect();
    c.ranks = 0;
    c.rank = 0;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    c = sample_connect();
    c.rkey.clear();
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    c = sample_connect();
    c.worker_address.clear();
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
}

TEST_CASE("ACCEPT with an empty puller address or too many pullers is rejected", "[protocol]")
{
    std::string why;
    const std::vector<std::byte> addr(40, std::byte{7});
    accept_msg a{1, 2, 3, 4, "n", "s", "u", "t", 5, {{addr}, {}}, 0};
    CHECK(decode_all(encode(a), why) == errc::protocol_error);
    CHECK(why.find("an empty puller address") != std::string::npos);
    a.pullers.pop_back();
    CHECK_FALSE(decode_all(encode(a), why));
    // The encoder cuts the list at its limit, as every list's.
    a.pullers.assign(max_pullers + 1, puller_address{addr});
    CHECK(std::get<accept_msg>(round_trip(a)).pullers.size() == max_pullers);
}

TEST_CASE("QUERY with a bad wait flag and an unknown state are rejected", "[protocol]")
{
    std::string why;
    auto q = encode(query_msg{1, 2, 1});
    q[header_size + 16] = std::byte{2};
    CHECK(decode_all(q, why) == errc::protocol_error);
    auto vs = encode(version_state_msg{1, 2, version_state_t::durable, 3, 4});
    vs[header_size + 16] = std::byte{9};
    CHECK(decode_all(vs, why) == errc::protocol_error);
    CHECK(why.find("unknown version state 9") != std::string::npos);
}

TEST_CASE("VERSION_STATE that is durable before its flush started is rejected", "[protocol]")
{
    std::string why;
    CHECK_FALSE(decode_all(encode(version_state_msg{1, 2, version_state_t::durable, 3, 4, 50, 50}),
                           why));
    CHECK(decode_all(encode(version_state_msg{1, 2, version_state_t::durable, 3, 4, 51, 50}),
                     why) == errc::protocol_error);
    CHECK(why.find("durable at 50 ns, before its flush started at 51 ns") != std::string::npos);
}

TEST_CASE("inline data must match the write's length and the eager limit", "[protocol]")
{
    std::string why;
    CHECK(decode_all(encode(write_req_msg{1, 5, std::vector<std::byte>(4)}), why) ==
          errc::protocol_error);
    CHECK(why.find("inline data of 4 bytes for a write of 5") != std::string::npos);
    CHECK(decode_all(encode(write_req_msg{1, max_eager + 1, std::vector<std::byte>(max_eager + 1)}),
                     why) == errc::protocol_error);
}

TEST_CASE("CONNECT with zero nodes is rejected", "[protocol]")
{
    auto c = sample_connect();
    c.nodes = 0;
    std::string why;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
}

TEST_CASE("an ERROR with an unknown domain is rejected", "[protocol]")
{
    auto bytes = encode(error_msg::from(make_error_code(errc::corrupt), "x"));
    bytes[header_size + 8] = std::byte{9};
    std::string why;
    CHECK(decode_all(bytes, why) == errc::protocol_error);
}

TEST_CASE("STATUS carries nothing; STATUS_REPLY's impossible values are rejected",
          "[protocol]")
{
    std::string why;
    auto extra = encode(status_msg{});
    extra.push_back(std::byte{0});
    extra[8] = std::byte{1};
    CHECK(decode_all(extra, why) == errc::protocol_error);
    CHECK(why.find("STATUS payload of 1 bytes exceeds the limit of 0") != std::string::npos);

    const std::vector<std::pair<std::function<void(status_reply_msg&)>, std::string>> bad = {
        {[](auto& r) { r.now_ns = r.started_ns - 1; }, "answered at 999 ns, before the daemon "
                                                       "started at 1000 ns"},
        {[](auto& r) { r.died = 1; }, "1 ranks connected, 1 finished and 1 died of 2"},
        {[](auto& r) { r.nodes = max_nodes + 1; }, "100001 nodes is more than the limit"},
        {[](auto& r) { r.staging_used = r.staging_total + 1; }, "bytes of staging used of"},
        {[](auto& r) { r.staging_stalled = r.staging_used + 1; },
         "33554433 bytes of staging stalled of 33554432 used"},
        {[](auto& r) { r.flush_running = 3; }, "3 flushes running on 2 threads"},
        {[](auto& r) { r.retention = 3; }, "unknown retention state 3"},
        {[](auto& r) { r.connections = 1; }, "2 ranks listed of 1 connections"},
        {[](auto& r) { r.transfers_total = 0; }, "1 transfers listed of 0"},
        {[](auto& r) { r.rank_list[1].state = static_cast<rank_state_t>(6); },
         "rank 1 in unknown state 6"},
        {[](auto& r) { r.rank_list[0].state = static_cast<rank_state_t>(0); },
         "rank 0 in unknown state 0"},
        {[](auto& r) { r.transfers[0].flushed = r.transfers[0].length + 1; },
         "with 5368709120 pulled and 5368709121 flushed"},
        {[](auto& r) { r.recent[0].blocked = 2001; }, "blocked 2001 ns"},
        {[](auto& r) { r.recent[0].flush = 2001; }, "flushed in 2001 ns, but durable after 2000"},
        {[](auto& r) { r.job = std::string(max_name + 1, 'j'); }, "field 'job' is 256 bytes"},
    };
    for (const auto& [edit, words] : bad) {
        auto r = test::sample_status_reply();
        edit(r);
        why.clear();
        CHECK(decode_all(encode(r), why) == errc::protocol_error);
        INFO(why);
        CHECK(why.find("bad STATUS_REPLY: ") == 0);
        CHECK(why.find(words) != std::string::npos);
    }

    // The lists' counts: over the limit, or more records than the payload holds.
    auto empty = test::sample_status_reply();
    empty.rank_list.clear();
    empty.transfers.clear();
    empty.recent.clear();
    auto over = encode(empty);
    const std::size_t ranks_count_at = over.size() - 12;
    over[ranks_count_at] = std::byte{0x01};
    over[ranks_count_at + 1] = std::byte{0x04};  // 1025
    CHECK(decode_all(over, why) == errc::protocol_error);
    CHECK(why.find("list 'rank_list' has 1025 entries, more than the limit of 1024") !=
          std::string::npos);
    auto claims = encode(empty);
    claims[claims.size() - 4] = std::byte{5};  // five recent versions, none there
    CHECK(decode_all(claims, why) == errc::protocol_error);
    CHECK(why.find("truncated at field 'rank'") != std::string::npos);
}

TEST_CASE("STATUS_REPLY's encoder cuts its lists and names at their limits", "[protocol]")
{
    auto r = test::sample_status_reply();
    r.connections = static_cast<std::uint32_t>(max_status_ranks + 5);
    r.rank_list.assign(max_status_ranks + 5, r.rank_list[0]);
    r.transfers_total = static_cast<std::uint32_t>(max_status_transfers + 1);
    r.transfers.assign(max_status_transfers + 1, r.transfers[0]);
    r.transfers[0].object = std::string(max_status_object + 9, 'o');
    r.recent.assign(max_status_recent + 2, r.recent[0]);
    r.store = std::string(max_text + 1, 's');
    const auto bytes = encode(r);
    CHECK(bytes.size() - header_size <= max_payload(msg_type::status_reply));
    const auto back = std::get<status_reply_msg>(round_trip(r));
    CHECK(back.rank_list.size() == max_status_ranks);
    CHECK(back.connections == max_status_ranks + 5);
    CHECK(back.transfers.size() == max_status_transfers);
    CHECK(back.transfers[0].object == std::string(max_status_object, 'o'));
    CHECK(back.recent.size() == max_status_recent);
    CHECK(back.store == std::string(max_text, 's'));
}

TEST_CASE("random bytes never crash the decoder", "[protocol]")
{
    std::uint64_t s = 12345;
    auto rnd = [&] {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    };
    int accepted = 0;
    for (int i = 0; i < 20000; ++i) {
        auto bytes = encode(sample_connect());
        // Flip a few bytes anywhere, header included.
        for (int k = 0; k < 3; ++k)
            bytes[rnd() % bytes.size()] = static_cast<std::byte>(rnd());
        std::string why;
        if (!decode_all(bytes, why))
            ++accepted;
    }
    // Flips inside opaque blobs (address, key) still decode; the rest must not.
    CHECK(accepted < 20000);
}

TEST_CASE("file messages with relative paths, bad flags or no bytes are rejected", "[protocol]")
{
    std::string why;
    CHECK(decode_all(encode(file_open_msg{1, 2, "out.h5"}), why) == errc::protocol_error);
    CHECK(why.find("not absolute") != std::string::npos);
    CHECK(decode_all(encode(file_open_msg{1, 0, "/a"}), why) == errc::protocol_error);
    CHECK(why.find("file number 0") != std::string::npos);
    CHECK(decode_all(encode(file_open_msg{1, 2, std::string("/a\0b", 4)}), why) ==
          errc::protocol_error);
    CHECK(why.find("NUL") != std::string::npos);
    CHECK(decode_all(encode(file_drain_msg{1, ""}), why) == errc::protocol_error);
    CHECK(decode_all(encode(file_sync_msg{1, 2, 4}), why) == errc::protocol_error);
    CHECK(why.find("unknown sync flags") != std::string::npos);
    CHECK(decode_all(encode(file_write_msg{1, 2, 0, 0, 0, {}, {}, {}}), why) == errc::protocol_error);
    CHECK(why.find("0 bytes") != std::string::npos);
    CHECK(decode_all(encode(file_write_msg{1, 2, 0, 3, 0, {}, {std::byte{1}}, {}}), why) ==
          errc::protocol_error);
    CHECK(why.find("inline data of 1 bytes") != std::string::npos);
    CHECK(decode_all(encode(file_write_msg{1, 2, ~0ull, 2, 0, {std::byte{1}}, {}, {}}), why) ==
          errc::protocol_error);
    CHECK(why.find("overflows") != std::string::npos);
    // Run lists: each rule of protocol.hpp's FILE_WRITE, broken once.
    const auto runs_why = [&](std::uint64_t offset, std::uint64_t length,
                              std::vector<file_run> runs) {
        std::string w;
        const auto ec = decode_all(
            encode(file_write_msg{1, 2, offset, length, 0, {}, {}, std::move(runs)}), w);
        return ec == errc::protocol_error ? w : std::string("accepted");
    };
    CHECK(runs_why(0, 128, {{0, 64}, {100, 64}}) == "accepted");
    CHECK(runs_why(4, 128, {{0, 64}, {100, 64}}).find("not the first run's") != std::string::npos);
    CHECK(runs_why(0, 64, {{0, 64}, {100, 0}}).find("run 1 is empty") != std::string::npos);
    CHECK(runs_why(0, 128, {{0, 64}, {64, 64}}).find("does not come after") != std::string::npos);
    CHECK(runs_why(100, 128, {{100, 64}, {0, 64}}).find("does not come after") !=
          std::string::npos);
    CHECK(runs_why(0, 128, {{0, 64}, {32, 64}}).find("does not come after") != std::string::npos);
    CHECK(runs_why(0, 129, {{0, 64}, {100, 64}}).find("hold 128 bytes for a write of 129") !=
          std::string::npos);
    CHECK(runs_why(0, 128, {{0, 64}, {~0ull - 1, 64}}).find("overflows") != std::string::npos);
    // Small pieces: two runs of any size pass (a write may start and end
    // inside a piece); beyond two, 64 bytes per run on average.
    CHECK(runs_why(0, 8, {{0, 8}}) == "accepted");
    CHECK(runs_why(0, 8, {{0, 4}, {100, 4}}) == "accepted");
    CHECK(runs_why(0, 126, {{0, 42}, {100, 42}, {200, 42}}) == "accepted");  // 1 run counted
    CHECK(runs_why(0, 60, {{0, 20}, {100, 20}, {200, 20}}).find("fewer than 64 bytes per run") !=
          std::string::npos);
    CHECK(runs_why(0, 100, {{0, 10}, {100, 30}, {200, 50}, {300, 10}}).find("fewer than 64") !=
          std::string::npos);
    std::vector<file_run> too_many(max_file_runs + 1);
    for (std::size_t i = 0; i < too_many.size(); ++i)
        too_many[i] = {128 * i, 64};
    {
        // An encoder cuts a longer list at the limit: what arrives no longer adds up.
        std::string w;
        auto frame = encode(file_write_msg{1, 2, 0, 64 * too_many.size(), 0, {}, {}, too_many});
        CHECK(decode_all(frame, w) == errc::protocol_error);
    }
    // A file-writing rank registers no buffer: CONNECT without a key is fine then.
    auto c = sample_connect();
    c.rkey.clear();
    c.buffer_length = 0;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    c.flags |= connect_flag_files;
    CHECK_FALSE(decode_all(encode(c), why));
}

TEST_CASE("a pushed chunk's header round-trips and must be exactly 24 bytes", "[protocol]")
{
    std::byte raw[push_header_size];
    encode_push_header(push_header{7, 1ull << 40, 16ull << 20}, raw);
    push_header h;
    REQUIRE(decode_push_header(raw, h));
    CHECK(h.session == 7);
    CHECK(h.cookie == 1ull << 40);
    CHECK(h.offset == 16ull << 20);
    CHECK_FALSE(decode_push_header(std::span<const std::byte>(raw, 23), h));
    std::vector<std::byte> longer(25);
    CHECK_FALSE(decode_push_header(longer, h));
}

TEST_CASE("CONNECT with more ranks or nodes than the limits is rejected", "[protocol]")
{
    std::string why;
    auto c = sample_connect();
    c.ranks = max_ranks + 1;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    CHECK(why.find("more than the limit of 65536") != std::string::npos);
    c = sample_connect();
    c.ranks = 0xffffffffu;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    c = sample_connect();
    c.nodes = max_nodes + 1;
    CHECK(decode_all(encode(c), why) == errc::protocol_error);
    CHECK(why.find("nodes is more than the limit") != std::string::npos);
    c = sample_connect();
    c.ranks = max_ranks;
    CHECK(std::get<connect_msg>(round_trip(c)) == c);
}

TEST_CASE("the size limit of each message is its fields' limits added up", "[protocol]")
{
    // CONNECT: 5 u32 and 2 u64 fields, two names and two blobs with their lengths.
    CHECK(max_payload(msg_type::connect) == 5 * 4 + 2 * 8 + 2 * (4 + max_name) + 2 * (4 + max_blob));
    CHECK(max_payload(msg_type::finished) == 8 + 8 + 4);
    CHECK(max_payload(msg_type::bye) == 0);
    CHECK(max_payload(msg_type::ping) == 0);
    CHECK(max_payload(msg_type::file_done) == 8);
    // ACCEPT: a u32 and 4 u64, a name, three texts, and the pullers' addresses.
    CHECK(max_payload(msg_type::accept) == 4 + 3 * 8 + (4 + max_name) + 3 * (4 + max_text) + 8 +
                                               (4 + max_pullers * (4 + max_blob)) + 8);
    CHECK(max_payload(msg_type::status) == 0);
    // STATUS_REPLY: its own fields, then each list's count and records at
    // their limits (a rank 4 u32 + 2 u64, a transfer a name + u32 + 5 u64,
    // a version u32 + 6 u64).
    CHECK(max_payload(msg_type::status_reply) ==
          4 + 3 * (4 + max_name) + (4 + max_text) + 2 * 8 + 2 * (4 + max_name) + 5 * 4 + 4 * 8 +
              3 * 8 + 4 + 8 + 6 * 4 + 8 + (4 + max_text) + 2 * 4 +
              (4 + max_status_ranks * (4 * 4 + 2 * 8)) +
              (4 + max_status_transfers * ((4 + max_status_object) + 4 + 5 * 8)) +
              (4 + max_status_recent * (4 + 6 * 8)));
    CHECK(max_payload(msg_type::status_reply) < 256 * 1024);
    // Every encoding of a full-size message fits its limit.
    auto c = sample_connect();
    c.job.assign(max_name, 'j');
    c.run.assign(max_name, 'r');
    c.worker_address.assign(max_blob, std::byte{1});
    c.rkey.assign(max_blob, std::byte{2});
    CHECK(encode(c).size() - header_size == max_payload(msg_type::connect));
    auto e = error_msg::from(make_error_code(errc::corrupt), std::string(2 * max_text, 'x'));
    CHECK(encode(e).size() - header_size == max_payload(msg_type::error));
}
