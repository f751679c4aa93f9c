// The iofwd command against stores written by real runs: real iod processes
// and real ranks (rank_client), damage made by flipping bytes in the files,
// crashes made by SIGKILL of a daemon whose disk IOFWD_FAULT slows down.
// Every output, exit status and message is asserted exactly (the time column
// and temporary names, which differ run by run, are masked); --json output
// is read back by python3's json module.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "crc32c.hpp"
#include "fixture.hpp"
#include "format.hpp"
#include "iofwd_run.hpp"
#include "pattern.hpp"
#include "store/backend.hpp"
#include "store/layout.hpp"
#include "store/pack.hpp"

using namespace test;

namespace {

void flip_byte(const std::string& path, long at)
{
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(f);
    f.seekg(at);
    char byte = 0;
    f.read(&byte, 1);
    byte ^= 0x10;
    f.seekp(at);
    f.write(&byte, 1);
}

// Job itest: versions 1-3 by two ranks (100000 bytes each), all complete;
// then a daemon killed mid-write of version 4; then a byte flipped in rank
// 1's data of version 2 and in the manifest of version 3.
void damaged_store(cluster& c)
{
    c.unpacked();  // its damage is to objects, manifests and records of their own
    {
        auto r0 = c.rank(0, 2, {"--size", "100000", "--versions", "3"});
        auto r1 = c.rank(1, 2, {"--size", "100000", "--versions", "3"});
        require_exit(r0, 0);
        require_exit(r1, 0);
    }
    c.crash_mid_write(c.store() + "/itest/v00000004");
    flip_byte(c.store() + "/itest/v00000002/nodeA.r0001", 4242);
    flip_byte(c.store() + "/itest/v00000003/nodeA.manifest", 30);
}

std::string crc_of(const std::string& path)
{
    const auto bytes = read_file(path);
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", iofwd::crc32c(std::as_bytes(std::span(bytes))));
    return buf;
}

// The bytes rank_client wrote for `rank` of nodeA in `version`.
std::string pattern(std::uint32_t rank, std::uint64_t version, std::size_t size)
{
    std::string s(size, '\0');
    example::fill_pattern(reinterpret_cast<std::byte*>(s.data()), size,
                          example::pattern_seed("nodeA", rank, version));
    return s;
}

}  // namespace

TEST_CASE("ls: jobs, and a job's versions complete, damaged and incomplete, and leftovers",
          "[tools][ls]")
{
    cluster c;
    damaged_store(c);
    auto jobs = run_iofwd(c, {"ls"});
    CHECK(jobs.code == 0);
    CHECK(jobs.err.empty());
    CHECK(masked(jobs.out) ==
          "directory " + c.store() + ": 1 job\n"
          "JOB                      VERSIONS COMPLETE   LATEST  LATEST AT\n"
          "itest                           4        3        3  <time>              \n");

    auto ls = run_iofwd(c, {"ls", "--store", c.store(), "itest"});
    CHECK(ls.code == 0);
    CHECK(ls.err.empty());
    CHECK(masked(ls.out) ==
          "job itest in directory " + c.store() +
              ": 4 versions, 2 complete, 1 incomplete, 1 damaged\n"
              " VERSION  STATE       TIME                  NODES  RANKS       BYTES  NOTE\n"
              "       1  complete    <time>                    1      2   195.3 KiB\n"
              "       2  complete    <time>                    1      2   195.3 KiB\n"
              "       3  damaged     <time>                    0      0         0 B  version 3: "
              "manifest itest/v00000003/nodeA.manifest does not match the checksum in "
              "itest/v00000003/COMPLETE\n"
              "       4  incomplete  <time>                    0      0         0 B  no COMPLETE "
              "record, no node's manifest; can never complete (no live daemon claims the job): "
              "iofwd gc removes it\n"
              "crash leftovers (never committed; iofwd gc removes them):\n"
              "  itest/v00000004/.nodeA.r0000.tmp-P-N\n");

    auto json = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(json.code == 0);
    CHECK(py(c, json.out,
             "[(v['version'], v['state'], v['dead'], v['nodes'], v['ranks'], v['bytes']) for v in "
             "d['versions']], d['job'], d['live_nodes'], len(d['leftovers'])") ==
          "[(1, 'complete', False, 1, 2, 200000), (2, 'complete', False, 1, 2, 200000), "
          "(3, 'damaged', False, 0, 0, 0), (4, 'incomplete', True, 0, 0, 0)] itest [] 1\n");
    auto all = run_iofwd(c, {"ls", "--json"});
    CHECK(py(c, all.out, "d['store'], [(j['job'], j['versions'], j['complete'], "
                         "j['newest_complete']) for j in d['jobs']]") ==
          "dir:" + c.store() + " [('itest', 4, 3, 3)]\n");
}

TEST_CASE("verify: names the flipped byte's object, expected and found; exit 1",
          "[tools][verify]")
{
    cluster c;
    damaged_store(c);
    const auto manifest = read_file(c.store() + "/itest/v00000002/nodeA.manifest");
    const auto at = manifest.find("rank 1 size 100000 crc32c ");
    REQUIRE(at != std::string::npos);
    const std::string expected = manifest.substr(at + 26, 8);
    const std::string found = crc_of(c.store() + "/itest/v00000002/nodeA.r0001");
    REQUIRE(expected != found);

    auto v = run_iofwd(c, {"verify", "itest"});
    CHECK(v.code == 1);
    CHECK(v.err.empty());
    CHECK(v.out.find("version 1: intact (2 objects, 195.3 KiB)\n"
                     "version 2: DAMAGED itest/v00000002/nodeA.r0001: expected crc32c " +
                     expected + ", found crc32c " + found +
                     "\n"
                     "version 3: DAMAGED itest/v00000003/nodeA.manifest: expected crc32c ") == 0);
    CHECK(v.out.find("\nversion 4: incomplete (no COMPLETE record), not checked\n"
                     "job itest: 1 of 3 complete versions intact, 2 damaged objects or records; "
                     "4 objects, 293.0 KiB checked\n") != std::string::npos);

    auto one = run_iofwd(c, {"verify", "itest", "1"});
    CHECK(one.code == 0);
    CHECK(one.out == "version 1: intact (2 objects, 195.3 KiB)\n"
                     "job itest: 1 of 1 complete version intact, 0 damaged objects or records; "
                     "2 objects, 195.3 KiB checked\n");
    auto incomplete = run_iofwd(c, {"verify", "itest", "4"});
    CHECK(incomplete.code == 1);

    // On a terminal (script(1) gives it one) a progress bar on stderr, drawn
    // to the end and wiped.
    auto tty = c.run({"/usr/bin/script", "-qec",
                      build_path("IOFWD_TEST_IOFWD") + " verify itest 1", "/dev/null"});
    require_exit(tty, 0);
    CHECK(tty.output().find("\rverify itest [##############################] 100% 195.3 KiB of "
                            "195.3 KiB\r\x1b[K") != std::string::npos);

    auto json = run_iofwd(c, {"verify", "itest", "2", "--json", "--threads", "2"});
    CHECK(json.code == 1);
    CHECK(py(c, json.out, "d['intact'], d['damaged'], d['objects'], d['bytes'], "
                          "[(v['version'], v['state'], v['damage']) for v in d['versions']]") ==
          "False 1 2 100000 [(2, 'damaged', [{'expected': 'crc32c " + expected +
              "', 'found': 'crc32c " + found +
              "', 'object': 'itest/v00000002/nodeA.r0001', 'problem': 'checksum'}])]\n");

    // The example's verifier, now on the same code, says the same.
    std::string out;
    CHECK(c.verify(-1, 2, out) == 1);
    CHECK(out.find("FAIL itest/v00000002/nodeA.r0001: byte 4242 differs from the pattern of node "
                   "nodeA rank 1 version 2\n") != std::string::npos);
    CHECK(out.find("FAIL version 3: version 3: manifest itest/v00000003/nodeA.manifest does not "
                   "match the checksum in itest/v00000003/COMPLETE\n") != std::string::npos);
    CHECK(out.find("version 4: incomplete (no COMPLETE record)\n") != std::string::npos);
    INFO(out);
    CHECK(out.find(": 2 complete versions, 1 incomplete, 4 objects, 293.0 KiB checked byte for "
                   "byte: 2 FAILURES\n") != std::string::npos);
}

TEST_CASE("restore and cat: the bytes written, checked; damage refused", "[tools][restore]")
{
    cluster c;
    damaged_store(c);
    const std::string dir = c.tmp / "restored";
    auto r = run_iofwd(c, {"restore", "itest", "1", dir});
    CHECK(r.code == 0);
    CHECK(r.err.empty());
    CHECK(r.out.find(dir + "/nodeA.r0000  node nodeA rank 0  97.7 KiB  crc32c ") == 0);
    CHECK(r.out.find("restored version 1 of job itest: 2 files in " + dir + "\n") !=
          std::string::npos);
    CHECK(names_in(dir) == std::vector<std::string>{"nodeA.r0000", "nodeA.r0001"});
    CHECK(read_file(dir + "/nodeA.r0000") == pattern(0, 1, 100000));
    CHECK(read_file(dir + "/nodeA.r0001") == pattern(1, 1, 100000));

    // cat by index and by node and rank: the same bytes (cmp agrees).
    auto by_index = run_iofwd(c, {"cat", "itest", "1", "1"});
    CHECK(by_index.code == 0);
    CHECK(by_index.out == pattern(1, 1, 100000));
    auto by_name = run_iofwd(c, {"cat", "itest", "v1", "nodeA.r0001"});
    CHECK(by_name.code == 0);
    std::ofstream(c.tmp / "cat.bin", std::ios::binary) << by_name.out;
    auto cmp = c.run({"/usr/bin/cmp", c.tmp / "cat.bin", dir + "/nodeA.r0001"});
    require_exit(cmp, 0);
    auto json = run_iofwd(c, {"cat", "itest", "1", "nodeA.0", "--json"});
    CHECK(py(c, json.out, "d['object'], d['node'], d['rank'], d['index'], d['bytes'], "
                          "d['intact'], d['crc32c'] == '" +
                              crc_of(dir + "/nodeA.r0000") + "'") ==
          "itest/v00000001/nodeA.r0000 nodeA 0 0 100000 True True\n");

    // Version 2's rank 1 is damaged: not restored, named.
    const std::string dir2 = c.tmp / "restored2";
    auto bad = run_iofwd(c, {"restore", "itest", "2", dir2});
    CHECK(bad.code == 1);
    CHECK(bad.err.find("iofwd restore: itest/v00000002/nodeA.r0001 is damaged: expected crc32c ") ==
          0);
    CHECK(names_in(dir2) == std::vector<std::string>{"nodeA.r0000"});
    auto bad_cat = run_iofwd(c, {"cat", "itest", "2", "1"});
    CHECK(bad_cat.code == 1);
    CHECK(bad_cat.err.find("iofwd cat: itest/v00000002/nodeA.r0001 is damaged") == 0);
}

TEST_CASE("a version in a pack: ls, verify, cat and restore read it; rm removes it",
          "[tools][packed]")
{
    // Version 1 by a real run; versions 2 and 3 of the same two ranks put in
    // nodeA's pack of bucket 2 by the pack writer, as a daemon that writes
    // packs will (rank_client's pattern, 4096 and 100 bytes).
    cluster c;
    c.unpacked();
    {
        auto r0 = c.rank(0, 2, {"--size", "100000", "--versions", "1"});
        auto r1 = c.rank(1, 2, {"--size", "100000", "--versions", "1"});
        require_exit(r0, 0);
        require_exit(r1, 0);
    }
    std::unique_ptr<iofwd::store::backend> st;
    std::string why;
    REQUIRE_FALSE(iofwd::store::open(c.store(), st, why));
    std::vector<std::string> bytes;
    std::vector<iofwd::store::pack_input> inputs;
    for (std::uint64_t v = 2; v <= 3; ++v)
        for (std::uint32_t r = 0; r < 2; ++r)
            bytes.push_back(pattern(r, v, r == 0 ? 4096 : 100));
    for (std::size_t i = 0; i < bytes.size(); ++i)
        inputs.push_back({2 + i / 2, static_cast<std::uint32_t>(i % 2), 2,
                          std::as_bytes(std::span(bytes[i]))});
    std::vector<std::byte> pack;
    REQUIRE_FALSE(iofwd::store::build_pack("itest", "nodeA", inputs, pack, why));
    const auto pack_name = iofwd::store::pack_object("itest", 2, "nodeA", 2, 3);
    REQUIRE_FALSE(st->put(pack_name, pack));
    std::uint64_t index_at = 0, index_length = 0;
    std::uint32_t index_crc = 0;
    REQUIRE_FALSE(iofwd::store::parse_pack_trailer(std::span(pack).last(32), pack.size(),
                                                   index_at, index_length, index_crc, why));
    const iofwd::store::bucket_record rec{"itest", 2, 2, 3, 1, {{"nodeA", 2, 2, 3, index_crc}}};
    const auto rec_text = iofwd::store::format_bucket(rec);
    REQUIRE_FALSE(st->put(iofwd::store::bucket_complete_object("itest", 2, 3),
                          std::as_bytes(std::span(rec_text))));

    auto ls = run_iofwd(c, {"ls", "itest"});
    CHECK(ls.code == 0);
    CHECK(masked(ls.out) ==
          "job itest in directory " + c.store() + ": 3 versions, 3 complete, 0 incomplete, 0 damaged\n"
          " VERSION  STATE       TIME                  NODES  RANKS       BYTES  NOTE\n"
          "       1  complete    <time>                    1      2   195.3 KiB\n"
          "       2  complete    <time>                    1      2     4.1 KiB\n"
          "       3  complete    <time>                    1      2     4.1 KiB\n");
    // The newest complete version is packed: its time is its pack's.
    auto jobs = run_iofwd(c, {"ls"});
    CHECK(masked(jobs.out) ==
          "directory " + c.store() + ": 1 job\n"
          "JOB                      VERSIONS COMPLETE   LATEST  LATEST AT\n"
          "itest                           3        3        3  <time>              \n");

    auto v = run_iofwd(c, {"verify", "itest"});
    CHECK(v.code == 0);
    CHECK(v.out == "version 1: intact (2 objects, 195.3 KiB)\n"
                   "version 2: intact (2 objects, 4.1 KiB)\n"
                   "version 3: intact (2 objects, 4.1 KiB)\n"
                   "job itest: 3 of 3 complete versions intact, 0 damaged objects or records; "
                   "6 objects, 203.5 KiB checked\n");
    std::string out;
    CHECK(c.verify(3, 2, out) == 0);  // the example's verifier checks the pattern too

    auto cat = run_iofwd(c, {"cat", "itest", "3", "nodeA.1"});
    CHECK(cat.code == 0);
    CHECK(cat.out == pattern(1, 3, 100));
    auto json = run_iofwd(c, {"cat", "itest", "2", "0", "--json"});
    CHECK(py(c, json.out, "d['object'], d['bytes'], d['intact']") ==
          pack_name + " at 40 4096 True\n");
    const std::string dir = c.tmp / "restored";
    auto restore = run_iofwd(c, {"restore", "itest", "3", dir});
    CHECK(restore.code == 0);
    CHECK(names_in(dir) == std::vector<std::string>{"nodeA.r0000", "nodeA.r0001"});
    CHECK(read_file(dir + "/nodeA.r0000") == pattern(0, 3, 4096));
    CHECK(read_file(dir + "/nodeA.r0001") == pattern(1, 3, 100));

    // A rank's restart: io_latest_verified and io_read through the pack;
    // then a version, numbered after the pack's (not 2 again).
    {
        auto r0 = c.rank(0, 2, {"--size", "4096", "--versions", "1", "--restart"});
        auto r1 = c.rank(1, 2, {"--size", "100", "--versions", "1", "--restart"});
        require_exit(r0, 0);
        require_exit(r1, 0);
        CHECK(has_line(r0, "restart 0 3 1"));
        CHECK(has_line(r1, "restart 0 3 1"));
    }
    CHECK(names_in(c.store() + "/itest") ==
          std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "packs", "reports",
                                   "v00000001", "v00000004"});

    CHECK(run_iofwd(c, {"rm", "itest", "4"}).code == 0);
    // A version in its own directory and a packed one at once: version 2
    // goes by its bucket's mark, its bytes kept in the pack beside 3's.
    auto rm = run_iofwd(c, {"rm", "itest", "1", "2"});
    CHECK(rm.code == 0);
    CHECK(rm.out == "removed version 1 of job itest\nremoved version 2 of job itest (out of its "
                    "bucket of packs)\n1 pack keeps the bytes of versions removed beside versions "
                    "that are not, until those go too: " + pack_name + "\n");
    CHECK_FALSE(std::filesystem::exists(c.store() + "/itest/v00000001"));
    CHECK(std::filesystem::exists(c.store() + "/itest/packs/b00000002/REMOVED.v00000002"));
    CHECK(read_file(c.store() + "/" + pack_name).size() == pack.size());
    auto gone = run_iofwd(c, {"cat", "itest", "2", "0"});
    CHECK(gone.code == 2);
    CHECK(gone.err == "iofwd cat: version 2 of job itest is not in directory " + c.store() +
                          " (its versions: 3)\n");
    auto again = run_iofwd(c, {"rm", "itest", "2"});
    CHECK(again.code == 2);
    CHECK(again.err.find("version 2 of job itest") != std::string::npos);
    auto listed = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, listed.out, "[v['version'] for v in d['versions']]") == "[3]\n");
    auto keep = run_iofwd(c, {"keep", "itest", "1"});
    CHECK(keep.code == 0);
    CHECK(keep.out == "job itest: kept complete version 3; removed none\n");

    // A changed byte in version 3's rank 0, inside the pack: that part only.
    const auto part3 = std::string(reinterpret_cast<const char*>(pack.data()), pack.size())
                           .find(pattern(0, 3, 4096));
    REQUIRE(part3 != std::string::npos);
    flip_byte(c.store() + "/" + pack_name, static_cast<long>(part3 + 7));
    auto bad = run_iofwd(c, {"verify", "itest"});
    CHECK(bad.code == 1);
    CHECK(bad.out.find("version 2") == std::string::npos);
    CHECK(bad.out.find("version 3: DAMAGED " + pack_name + " (version 3 rank 0): expected crc32c ") !=
          std::string::npos);
    auto bad_cat = run_iofwd(c, {"cat", "itest", "3", "0"});
    CHECK(bad_cat.code == 1);
    CHECK(bad_cat.err.find("iofwd cat: " + pack_name + " (the part at " + std::to_string(part3) +
                           ") is damaged") == 0);

    // A bucket whose versions never completed (a pack, no record), and no
    // daemon writing the job: gc removes it, and nothing else of the packs.
    std::vector<std::byte> pack5;
    const iofwd::store::pack_input in5[] = {{5, 0, 2, std::as_bytes(std::span(bytes[0]))},
                                            {5, 1, 2, std::as_bytes(std::span(bytes[1]))}};
    REQUIRE_FALSE(iofwd::store::build_pack("itest", "nodeA", in5, pack5, why));
    REQUIRE_FALSE(st->put(iofwd::store::pack_object("itest", 5, "nodeA", 5, 5), pack5));
    auto gc = run_iofwd(c, {"gc"});
    CHECK(gc.code == 0);
    CHECK(gc.out.find("job itest: removed itest/packs/b00000005 (a bucket of packs with no "
                      "record, and no daemon is writing the job)\n") == 0);
    CHECK(gc.out.find("gc: 0 versions and 0 leftovers removed, and 1 bucket of packs\n") !=
          std::string::npos);
    CHECK(names_in(c.store() + "/itest/packs") == std::vector<std::string>{"b00000002"});
    // A bucket whose record does not read is left alone, named, exit 1.
    std::filesystem::resize_file(
        c.store() + "/" + iofwd::store::bucket_complete_object("itest", 2, 3), 20);
    auto gc_bad = run_iofwd(c, {"gc", "itest", "--json"});
    CHECK(gc_bad.code == 1);
    CHECK(py(c, gc_bad.out, "d['jobs'][0]['removed_buckets'], "
                            "[u.split(':')[0] for u in d['jobs'][0]['unreadable_buckets']]") ==
          "[] ['itest/packs/b00000002/COMPLETE.v00000003']\n");
    CHECK(std::filesystem::exists(c.store() + "/" + pack_name));
    // ls and verify name it too: versions 2 and 3 are in no list now.
    const std::string record = "itest/packs/b00000002/COMPLETE.v00000003: ";
    auto ls_bad = run_iofwd(c, {"ls", "itest"});
    CHECK(ls_bad.code == 0);
    CHECK(ls_bad.out.find("damaged bucket records (the versions only they said are complete are "
                          "not listed; iofwd verify exits 1):\n  " + record) !=
          std::string::npos);
    auto ls_json = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, ls_json.out, "[u.split(':')[0] for u in d['damaged_buckets']]") ==
          "['itest/packs/b00000002/COMPLETE.v00000003']\n");
    auto verify_bad = run_iofwd(c, {"verify", "itest"});
    CHECK(verify_bad.code == 1);
    CHECK(verify_bad.out.find("bucket record DAMAGED: " + record) != std::string::npos);
    CHECK(verify_bad.out.find(", 1 damaged object or record;") != std::string::npos);
}

TEST_CASE("rm frees a pack once every version it holds is removed", "[tools][rm-packed]")
{
    // After fill_journal's version 1, one rank writes versions 2-4 of 3000
    // bytes; the batch waits long enough that the three go into one pack,
    // written when the rank says BYE.
    cluster c;
    c.packed(64);
    fill_journal(c, 1);
    c.env["IOFWD_PACK_WAIT"] = "30";
    c.env["IOFWD_PACK_AGE"] = "30";
    {
        auto r0 = c.rank(0, 1, {"--size", "3000", "--versions", "3"}, small_journal);
        require_exit(r0, 0);
    }
    const std::string bucket = c.store() + "/itest/packs/b00000002";
    const std::string pack = bucket + "/nodeA.v00000002-00000004";
    INFO(fmt::format("{}", fmt::join(names_in(bucket), " ")) << "\nlog:\n" << c.log());
    REQUIRE(std::filesystem::exists(pack));
    const auto pack_bytes = std::filesystem::file_size(pack);
    auto rm = run_iofwd(c, {"rm", "itest", "2", "--json"});
    CHECK(rm.code == 0);
    CHECK(py(c, rm.out, "d['removed'], d['removed_from_packs'], d['packs_freed'], "
                        "d['pack_bytes_freed'], d['packs_kept'], d['pack_failures']") ==
          "[2] [2] 0 0 1 []\n");
    CHECK(std::filesystem::file_size(pack) == pack_bytes);
    auto cat = run_iofwd(c, {"cat", "itest", "3", "0"});
    CHECK(cat.code == 0);
    CHECK(cat.out == pattern(0, 3, 3000));
    // The others at once: the pack, kept at 3's removal, goes at 4's with
    // every byte it held, and rm says so once.
    auto last = run_iofwd(c, {"rm", "itest", "3", "4"});
    CHECK(last.code == 0);
    CHECK(last.out == fmt::format("removed version 3 of job itest (out of its bucket of packs)\n"
                                  "removed version 4 of job itest (out of its bucket of packs)\n"
                                  "freed {} in 1 pack that held only versions removed\n",
                                  iofwd::human_bytes(pack_bytes)));
    CHECK(last.err.empty());
    CHECK_FALSE(std::filesystem::exists(pack));
    // The bucket's record and marks stay: the versions stay removed, and
    // the next run numbers after them. (A node alone keeps no tally.)
    CHECK(names_in(bucket) ==
          std::vector<std::string>{"COMPLETE.v00000004", "REMOVED.v00000002",
                                   "REMOVED.v00000003", "REMOVED.v00000004"});
    auto ls = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, ls.out, "[v['version'] for v in d['versions']]") == "[1]\n");
    CHECK(run_iofwd(c, {"verify", "itest"}).code == 0);
    {
        auto r0 = c.rank(0, 1, {"--size", "3000", "--versions", "1"}, small_journal);
        require_exit(r0, 0);
    }
    ls = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, ls.out, "[(v['version'], v['state']) for v in d['versions']]") ==
          "[(1, 'complete'), (5, 'complete')]\n");
    CHECK(run_iofwd(c, {"cat", "itest", "5", "0"}).out == pattern(0, 5, 3000));
}

TEST_CASE("every command refuses a job kept in a newer store format, in words",
          "[tools][packed]")
{
    // A run that packs marks the job's format (2); as a newer iofwd would
    // leave it (3), no command lists, reads, removes or collects anything
    // of it.
    cluster c;
    c.packed(4);
    {
        auto r0 = c.rank(0, 1, {"--size", "1000", "--versions", "2"});
        require_exit(r0, 0);
    }
    CHECK(read_file(c.store() + "/itest/FORMAT") == "iofwd-job-format 3\n");
    CHECK(run_iofwd(c, {"ls", "itest"}).code == 0);
    {
        std::ofstream out(c.store() + "/itest/FORMAT", std::ios::trunc);
        out << "iofwd-job-format 4\n";
    }
    // Another job beside it, with a version that never completed.
    {
        auto r0 = c.rank(0, 1, {"--size", "1000", "--versions", "1"}, {{"IOFWD_JOB", "other"}});
        require_exit(r0, 0);
    }
    REQUIRE(std::filesystem::create_directory(c.store() + "/other/v00000009"));
    const auto before = names_in(c.store() + "/itest/packs/b00000001");
    const std::string why = "job itest is kept in store format 4 (itest/FORMAT), newer than "
                            "format 3, the newest this iofwd reads: use the iofwd that wrote "
                            "it, or a newer one\n";
    for (const std::vector<std::string>& cmd :
         {std::vector<std::string>{"ls", "itest"}, {"verify", "itest"}, {"rm", "itest", "1"},
          {"keep", "itest", "1"}, {"gc", "itest"}, {"cat", "itest", "2", "0"},
          {"restore", "itest", "2", c.tmp / "restored"}, {"report", "itest"}}) {
        INFO(fmt::format("{}", fmt::join(cmd, " ")));
        const auto r = run_iofwd(c, cmd);
        CHECK(r.code == 1);
        CHECK(r.err == fmt::format("iofwd {}: cannot read job itest in directory {}: {}", cmd[0],
                                   c.store(), why));
    }
    CHECK(names_in(c.store() + "/itest/packs/b00000001") == before);
    CHECK_FALSE(std::filesystem::exists(c.tmp / "restored"));
    // The whole store: that job named, the other listed and collected.
    auto ls = run_iofwd(c, {"ls"});
    CHECK(ls.code == 1);
    CHECK(ls.out.find("itest                    not read: " + why) != std::string::npos);
    CHECK(ls.out.find("\nother ") != std::string::npos);
    auto gc = run_iofwd(c, {"gc", "--json"});
    CHECK(gc.code == 1);
    CHECK(py(c, gc.out, "[(j['job'], j['refused'], j['removed_versions']) for j in d['jobs']]") ==
          "[('itest', '" + why.substr(0, why.size() - 1) + "', []), ('other', None, [9])]\n");
    CHECK_FALSE(std::filesystem::exists(c.store() + "/other/v00000009"));
    CHECK(names_in(c.store() + "/itest/packs/b00000001") == before);
}

TEST_CASE("ls names a version a node skipped", "[tools][packed]")
{
    // Version 1 by a real run; version 2, which node nodeA will never have,
    // skipped in bucket 2's record as a daemon that packs writes it.
    cluster c;
    c.unpacked();
    {
        auto r0 = c.rank(0, 1, {"--size", "1000", "--versions", "1"});
        require_exit(r0, 0);
    }
    std::unique_ptr<iofwd::store::backend> st;
    std::string why;
    REQUIRE_FALSE(iofwd::store::open(c.store(), st, why));
    iofwd::store::bucket_record rec{"itest", 2, 2, 2, 1, {}};
    iofwd::store::bucket_part skip;
    skip.node = "nodeA";
    skip.ranks = 1;
    skip.first = skip.last = 2;
    skip.skip = true;
    rec.parts.push_back(skip);
    const auto text = iofwd::store::format_bucket(rec);
    REQUIRE_FALSE(st->put(iofwd::store::bucket_complete_object("itest", 2, 2),
                          std::as_bytes(std::span(text))));
    auto ls = run_iofwd(c, {"ls", "itest"});
    CHECK(ls.code == 0);
    CHECK(masked(ls.out) ==
          "job itest in directory " + c.store() + ": 1 version, 1 complete, 0 incomplete, 0 damaged\n"
          " VERSION  STATE       TIME                  NODES  RANKS       BYTES  NOTE\n"
          "       1  complete    <time>                    1      1      1000 B\n"
          "skipped versions (a node will never have them: never complete):\n"
          "  version 2: skipped by node nodeA (bucket 2)\n");
    auto json = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, json.out, "[(k['version'], k['node'], k['bucket']) for k in d['skipped']]") ==
          "[(2, 'nodeA', 2)]\n");
}

TEST_CASE("rm, keep and gc remove exactly what they say", "[tools][clean]")
{
    cluster c;
    c.unpacked();
    {
        auto r = c.rank(0, 1, {"--size", "50000", "--versions", "4"});
        require_exit(r, 0);
    }
    c.crash_mid_write(c.store() + "/itest/v00000005");
    const std::string job = c.store() + "/itest";

    auto rm = run_iofwd(c, {"rm", "itest", "2", "--json"});
    CHECK(rm.code == 0);
    CHECK(py(c, rm.out, "d['job'], d['removed']") == "itest [2]\n");
    // Beside the versions: the claim, the node's journal, and the first job's
    // summary (reports).
    CHECK(names_in(job) == std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "reports",
                                                    "v00000001", "v00000003", "v00000004",
                                                    "v00000005"});

    auto keep = run_iofwd(c, {"keep", "itest", "1"});
    CHECK(keep.code == 0);
    CHECK(keep.out == "job itest: kept complete version 4; removed 1, 3\n");
    CHECK(names_in(job) ==
          std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "reports", "v00000004",
                                   "v00000005"});

    auto gc = run_iofwd(c, {"gc"});
    CHECK(gc.code == 0);
    // The killed daemon's lock and socket go too; its log stays (young).
    CHECK(masked(gc.out) ==
          "job itest: removed leftover itest/v00000005/.nodeA.r0000.tmp-P-N\n"
          "job itest: removed version 5 (incomplete, and no daemon is writing the job)\n"
          "runtime: removed " + c.runtime_dir() + "/s.lock\n"
          "runtime: removed " + c.runtime_dir() + "/s.sock\n"
          "gc: 1 version and 1 leftover removed\n");
    CHECK_FALSE(std::filesystem::exists(c.runtime_dir() + "/s.lock"));
    CHECK_FALSE(std::filesystem::exists(c.runtime_dir() + "/s.sock"));
    CHECK(std::filesystem::exists(c.runtime_dir() + "/s.log"));
    CHECK(names_in(job) ==
          std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "reports", "v00000004"});
    CHECK(temporaries(c.store()).empty());
    auto again = run_iofwd(c, {"gc", "--json"});
    CHECK(again.code == 0);
    CHECK(py(c, again.out, "d['jobs'], d['runtime_files']") ==
          "[{'discarded_versions': [], 'job': 'itest', 'journal_failures': [], 'kept_buckets': [], "
          "'kept_journals': [], 'kept_versions': [], 'refused': None, 'removed_buckets': [], "
          "'removed_journals': [], 'removed_leftovers': [], 'removed_versions': [], "
          "'unreadable_buckets': []}] []\n");
    std::string out;
    CHECK(c.verify(1, 1, out) == 0);

    auto kept = run_iofwd(c, {"keep", "itest", "3", "--json"});
    CHECK(py(c, kept.out, "d['keep'], d['kept'], d['removed']") == "3 [4] []\n");
}

TEST_CASE("keep counts only versions whose COMPLETE record reads", "[tools][clean]")
{
    cluster c;
    c.unpacked();
    {
        auto r = c.rank(0, 1, {"--size", "50000", "--versions", "4"});
        require_exit(r, 0);
    }
    const std::string job = c.store() + "/itest";
    // Version 4's record torn: no restart can take it, so it must not stand
    // in for version 2 among the two kept; it is left for an operator.
    std::ofstream(job + "/v00000004/COMPLETE", std::ios::trunc) << "torn";
    auto plan = run_iofwd(c, {"keep", "itest", "3", "--json"});
    CHECK(plan.code == 0);
    CHECK(py(c, plan.out, "d['kept'], d['passed_over'], d['removed']") ==
          "[1, 2, 3] [{'version': 4, 'why': 'itest/v00000004/COMPLETE: not an iofwd COMPLETE "
          "record (first line)'}] []\n");
    auto keep = run_iofwd(c, {"keep", "itest", "2"});
    CHECK(keep.code == 0);
    CHECK(keep.err == "iofwd keep: version 4 is not counted among the 2 kept, and is left as it "
                      "is: itest/v00000004/COMPLETE: not an iofwd COMPLETE record (first line); "
                      "check it with `iofwd verify itest`, then restore its record or remove it "
                      "with `iofwd rm itest 4`\n");
    CHECK(keep.out ==
          "job itest: kept complete versions 2-3; removed 1; left version 4, whose record does "
          "not read\n");
    CHECK(names_in(job) == std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "reports",
                                                    "v00000002", "v00000003", "v00000004"});
    auto v = run_iofwd(c, {"verify", "itest"});
    CHECK(v.code == 1);
    CHECK(v.out.rfind("version 2: intact (1 object, 48.8 KiB)\n"
                      "version 3: intact (1 object, 48.8 KiB)\n"
                      "version 4: DAMAGED itest/v00000004/COMPLETE: ",
                      0) == 0);
}

namespace {

// Run r1 of two nodes: nodeA's version 2 is reported durable from its
// journal and its daemon killed before it commits it (with `packs`, before
// its pack); nodeB, without a journal, then commits its part of version 2
// and arrives. The version waits only for what nodeA's journal holds.
// Returns nodeA's environment for the job's next run (r2), as a job
// restarted after the crash has.
std::map<std::string, std::string> crash_one_node_of_two(cluster& c, bool packs)
{
    c.unpacked();  // version 1; then run r1 packs or not as asked
    fill_journal(c, 1);
    auto a = small_journal;
    a.insert({{"IOFWD_NODES", "2"}, {"IOFWD_RUN", "r1"}});
    if (packs)
        a["IOFWD_PACK_VERSIONS"] = "4";
    auto b = a;
    b["IOFWD_NODE"] = "nodeB";
    b["IOFWD_SESSION"] = "sb";
    b["IOFWD_JOURNAL_MAX"] = "0";
    // Two store writes pass: the run's record and the journal's record of
    // version 2 (with packs, the job's FORMAT first, at the claim: the
    // first run was unpacked); its object (or pack) hangs.
    auto d = stalling_daemon(c, packs ? 3 : 2, a);
    auto ra = c.rank(0, 1, {"--size", "5000", "--versions", "1", "--wait", "--skip-finalize"}, a);
    const bool answered = wait_until([&] { return has_line(ra, "durable 0 "); }, 20s);
    INFO("rank of nodeA:\n" << ra.output() << "log:\n" << c.log());
    REQUIRE(answered);
    REQUIRE(has_line(ra, "write 0 0 2 "));
    REQUIRE(has_line(ra, "durable 0 0 "));
    d.signal(SIGKILL);
    ra.signal(SIGKILL);
    REQUIRE(d.wait(10s).has_value());
    REQUIRE(ra.wait(10s).has_value());
    // Without io_finalize, which would wait for nodeA to complete the
    // version job-wide.
    auto rb = c.rank(0, 1, {"--size", "5000", "--versions", "1", "--wait", "--skip-finalize"},
                     b);
    const std::string log_b = c.runtime_dir() + "/sb.log";
    const bool committed = wait_until([&] {
        // Its manifest written and arrived with (at the version's tally or
        // at bucket 2's).
        return has_line(rb, "skipped") &&
               read_file(log_b).find(packs ? "version 2 of node nodeB committed in bucket 2 "
                                             "(1 ranks)"
                                           : "version 2 of node nodeB complete (1 ranks)") !=
                   std::string::npos;
    }, 30s);
    INFO("rank of nodeB:\n" << rb.output() << "log of nodeB:\n" << read_file(log_b));
    REQUIRE(committed);
    CHECK(has_line(rb, "write 0 0 2 "));
    CHECK(has_line(rb, "durable 0 0 "));
    rb.signal(SIGKILL);
    REQUIRE(rb.wait(10s).has_value());
    // Its auto-launched daemon gone: gc takes every node's claim.
    REQUIRE(wait_until([&] { return count(read_file(log_b), "exit status") == 1; }, 20s));
    for (const pid_t pid : daemon_pids(read_file(log_b)))
        REQUIRE(wait_until([&] { return ::kill(pid, 0) != 0; }, 10s));
    a["IOFWD_RUN"] = "r2";
    return a;
}

// The node's crash: the job's daemon (the second in the log, after
// fill_journal's) and both ranks killed; returns once the daemon is gone.
void crash_node(cluster& c, process& r0, process& r1)
{
    const auto pids = daemon_pids(c.log());
    REQUIRE(pids.size() == 2);
    REQUIRE(::kill(pids[1], SIGKILL) == 0);
    for (auto* r : {&r0, &r1}) {
        r->signal(SIGKILL);
        REQUIRE(r->wait(10s).has_value());
    }
    REQUIRE(wait_until([&] { return ::kill(pids[1], 0) != 0; }, 10s));
}

// nodeA's next run of two ranks that only read the newest version back
// (--restart: "restart <errno> <version> <match>"), each exited 0.
std::vector<process> restart_two(cluster& c)
{
    std::vector<process> ranks;
    for (const unsigned rank : {0u, 1u})
        ranks.push_back(
            c.rank(rank, 2, {"--size", "5000", "--versions", "0", "--restart"}, small_journal));
    for (auto& r : ranks) {
        const auto st = r.wait(60s);
        INFO("rank:\n" << r.output() << "log:\n" << c.log());
        REQUIRE(st.has_value());
        CHECK(exit_code(*st) == 0);
    }
    return ranks;
}


// A node without a journal (`env`) writes versions 1-4 of one rank; the
// object of version `lost` (1 or 2) fails after io_write returned, and its
// skip's arrivals fail as `skip_fault` (IOFWD_FAULT, link@+s...) says. The
// versions after it wait at a gate until the skip's first try has failed.
// Returns the daemon, still running, once the rank has exited (not 0: the
// lost version is not durable).
process lose_a_version(cluster& c, const std::map<std::string, std::string>& env, unsigned lost,
                       const std::string& skip_fault)
{
    auto denv = env;
    denv["IOFWD_FLUSH_THREADS"] = "1";
    // The lost version's object is the second pwrite (the first is the
    // job's FORMAT at the claim), or the fifth after version 1's three (as
    // in failure packs-skip); counted, the log line waited for says if that
    // changes.
    auto d = faulty_daemon(
        c, fmt::format("pwrite:EIO:{}:once,{}", lost == 1 ? 1 : 4, skip_fault), denv);
    auto r = c.rank(0, 1,
                    {"--size", "5000", "--versions", "4", "--gate-at", std::to_string(lost - 1),
                     gate(c, "before"), "--gate-at", std::to_string(lost), gate(c, "after")},
                    env);
    if (lost == 2)
        REQUIRE(wait_until([&] {
            return c.log().find("versions up to 1 of job itest complete on all 1 nodes") !=
                   std::string::npos;
        }, 20s));
    open_gate(c, "before");
    REQUIRE(wait_until([&] {
        return c.log().find(fmt::format("version {} of node nodeA: its skip could not arrive at "
                                        "bucket 1: ",
                                        lost)) != std::string::npos;
    }, 20s));
    open_gate(c, "after");
    const auto s = r.wait(60s);
    INFO("rank:\n" << r.output() << "log:\n" << c.log());
    REQUIRE(s.has_value());
    CHECK(exit_code(*s) != 0);  // io_finalize: the lost version is not durable
    return d;
}

}  // namespace

TEST_CASE("gc keeps a version whose manifest has yet to arrive at its bucket, which the node's "
          "next daemon completes",
          "[tools][gc-journal]")
{
    // The state of failure packs-crash-manifest: a node without a journal
    // commits version 1 unpacked, and its daemon is killed after the
    // manifest is in place, before its arrival at the bucket. gc took the
    // version for one that can never complete and removed it; the next
    // daemon would have arrived with the manifest.
    cluster c;
    auto env = small_journal;
    env["IOFWD_PACK_VERSIONS"] = "4";
    env["IOFWD_JOURNAL_MAX"] = "0";
    const std::string manifest = c.store() + "/itest/v00000001/nodeA.manifest";
    {
        // The ninth fsync: the manifest's directory.
        auto denv = env;
        denv["IOFWD_FAULT"] = "fsync:DELAY30:9";
        auto d = c.daemon({}, denv);
        REQUIRE(wait_until([&] { return count(c.log(), "ready:") == 1 || !d.running(); }, 20s));
        auto r = c.rank(0, 1, {"--size", "5000", "--versions", "1", "--wait", "--skip-finalize"},
                        env);
        REQUIRE(wait_until([&] { return has_line(r, "durable 0 "); }, 20s));
        REQUIRE(wait_until([&] { return std::filesystem::exists(manifest); }, 20s));
        std::this_thread::sleep_for(500ms);  // stopped at the fsync, not passing by
        d.signal(SIGKILL);
        r.signal(SIGKILL);
        REQUIRE(d.wait(10s).has_value());
        REQUIRE(r.wait(10s).has_value());
    }
    // No arrival of nodeA's (named "<member>=<note>") in the bucket's tally.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(
             c.store() + "/itest/packs/b00000001/.ARRIVED", ec))
        REQUIRE(e.path().filename().string().rfind("nodeA.", 0) != 0);
    auto listed = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, listed.out, "[(v['version'], v['dead'], v['arriving']) for v in d['versions']]") ==
          "[(1, False, ['nodeA'])]\n");
    auto gc = run_iofwd(c, {"gc", "itest"});
    INFO("gc:\n" << gc.out << gc.err);
    CHECK(gc.code == 0);
    CHECK(gc.err == "iofwd gc: job itest: kept version 1: node nodeA's manifest of it has yet to "
                    "arrive at its bucket, which the node's next daemon does when the job runs "
                    "there again, so that it can complete (iofwd rm itest 1 removes it, for a node "
                    "that will not run the job again)\n");
    CHECK(gc.out.find("removed version") == std::string::npos);
    REQUIRE(std::filesystem::exists(manifest));
    auto next = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "1"}, env);
    const auto s = next.wait(60s);
    INFO("next rank:\n" << next.output() << "log:\n" << c.log());
    REQUIRE(s.has_value());
    CHECK(has_line(next, "latest 0 1"));
    CHECK(has_line(next, "read 0 5000"));
}

TEST_CASE("gc keeps the versions that wait behind a gap in their bucket, which the node's next "
          "daemon skips",
          "[tools][gc-journal]")
{
    // A node without a journal commits each version with its object and a
    // manifest that arrives at the bucket. One version's object fails after
    // io_write returned, and so does its skip's arrival: the versions after
    // it, reported durable, arrive at the bucket's tally behind the gap. gc
    // took them for versions that can never complete and removed their
    // directories (and, with the bucket's first version lost, the bucket);
    // the node's next daemon skips the lost version and completes them.
    const unsigned lost = GENERATE(1u, 2u);
    INFO("lost version " << lost);
    cluster c;
    auto env = small_journal;
    env["IOFWD_PACK_VERSIONS"] = "4";
    env["IOFWD_JOURNAL_MAX"] = "0";
    {
        // The skip's arrival fails, and so do the daemon's tries again
        // (links whose name holds a skip's note).
        auto d = lose_a_version(c, env, lost, "link@+s:EIO");
        // Sent again after the next arrivals or at the job's end: three
        // tries at most, then the daemon leaves it to the next.
        const auto last_try = fmt::format(
            "version {} of node nodeA: its skip could not arrive at bucket 1 (try 3 of 3)", lost);
        CHECK(wait_until([&] { return c.log().find(last_try) != std::string::npos; }, 20s));
        auto status = run_iofwd(c, {"status", "--json"});
        CHECK(py(c, status.out, "d['daemons'][0]['daemon']['errors']['manifest_error']") ==
              "Input/output error\n");
        d.signal(SIGTERM);
        REQUIRE(d.wait(30s).has_value());
        CHECK(count(c.log(), fmt::format("version {} of node nodeA: its skip could not arrive",
                                         lost)) == 3);
        CHECK(c.log().find("the bucket's later versions wait until the node's next daemon skips "
                           "it, when the job runs there again") != std::string::npos);
    }
    INFO("log:\n" << c.log());
    REQUIRE(!std::filesystem::exists(c.store() + "/itest/packs/b00000001/COMPLETE.v00000004"));
    std::vector<unsigned> waiting;
    std::string listing = "[";
    for (unsigned v = 1; v <= 4; ++v) {
        if (v > lost)
            waiting.push_back(v);
        listing += fmt::format("{}({}, {}, {}, [{}])", v == 1 ? "" : ", ", v,
                               v == lost ? "True" : "False", v > lost ? "True" : "False",
                               v > lost ? std::to_string(lost) : "");
    }
    auto listed = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, listed.out,
             "[(v['version'], v['dead'], v['waiting'], v['waits_for']) for v in d['versions']]") ==
          listing + "]\n");
    auto gc = run_iofwd(c, {"gc", "itest"});
    INFO("gc:\n" << gc.out << gc.err);
    CHECK(gc.code == 0);
    const std::string why = fmt::format(
        "in bucket 1 for version {}, which node nodeA lacks: the node's next daemon skips it "
        "when the job runs there again, and then",
        lost);
    for (const auto v : waiting) {
        CHECK(gc.err.find(fmt::format("iofwd gc: job itest: kept version {}: it waits {} it "
                                      "completes\n",
                                      v, why)) != std::string::npos);
        CHECK(gc.out.find(fmt::format("removed version {}", v)) == std::string::npos);
    }
    CHECK(gc.out.find(fmt::format("job itest: removed version {} ", lost)) != std::string::npos);
    // With its first version lost, the bucket has no record: kept too.
    CHECK((gc.err.find(fmt::format("iofwd gc: job itest: kept itest/packs/b00000001 (a bucket of "
                                   "packs with no record), its versions 2, 3, 4: they wait {} "
                                   "they complete\n",
                                   why)) != std::string::npos) == (lost == 1));
    CHECK(gc.out.find("removed itest/packs") == std::string::npos);
    // The next daemon skips the lost version: the others read back whole.
    for (const auto v : waiting) {
        auto next = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe",
                                  std::to_string(v)},
                           env);
        const auto ns = next.wait(60s);
        INFO("next rank:\n" << next.output() << "log:\n" << c.log());
        REQUIRE(ns.has_value());
        CHECK(has_line(next, "latest 0 4"));
        CHECK(has_line(next, "read 0 5000"));
    }
    CHECK(read_file(c.store() + "/itest/packs/b00000001/COMPLETE.v00000004")
              .find(fmt::format("\nskip nodeA 1 {}\n", lost)) != std::string::npos);
    std::string out;
    CHECK(c.verify(4, 1, out) != 0);  // the lost version is not there
    INFO(out);
    CHECK(out.find("3 complete versions") != std::string::npos);
}

TEST_CASE("a skip whose arrival failed is sent again when the node's next part arrives, and the "
          "versions behind it complete in the same run",
          "[tools][gc-journal]")
{
    // As above, version 2 lost after io_write returned; its skip's first
    // arrival fails, its second (after version 3's manifest arrived) does
    // not. Before, versions 3 and 4 waited until the node's next daemon.
    cluster c;
    auto env = small_journal;
    env["IOFWD_PACK_VERSIONS"] = "4";
    env["IOFWD_JOURNAL_MAX"] = "0";
    {
        auto d = lose_a_version(c, env, 2, "link@+s:EIO:0:once");
        // The log line comes once the daemon has taken the arrival in.
        REQUIRE(wait_until([&] {
            return std::filesystem::exists(c.store() +
                                           "/itest/packs/b00000001/COMPLETE.v00000004") &&
                   c.log().find("version 2 of job itest skipped by node nodeA in bucket 1 (try "
                                "2 of 3)") != std::string::npos;
        }, 20s));
        // The skip's failure is no longer the daemon's error once it arrived.
        auto status = run_iofwd(c, {"status", "--json"});
        CHECK(py(c, status.out, "d['daemons'][0]['daemon']['errors']['manifest_error']") ==
              "None\n");
        d.signal(SIGTERM);
        REQUIRE(d.wait(30s).has_value());
    }
    const auto log = c.log();
    INFO("log:\n" << log);
    CHECK(log.find("the bucket's later versions wait for it: it is sent again after another part "
                   "of the node's arrives, or when the job ends on the node") != std::string::npos);
    CHECK(log.find("version 2 of job itest skipped by node nodeA in bucket 1 (try 2 of 3) (a "
                   "rank's part failed") != std::string::npos);
    CHECK(count(log, "its skip could not arrive") == 1);
    CHECK(read_file(c.store() + "/itest/packs/b00000001/COMPLETE.v00000004")
              .find("\nskip nodeA 1 2\n") != std::string::npos);
    std::string out;
    CHECK(c.verify(4, 1, out) != 0);  // version 2 is not there
    INFO(out);
    CHECK(out.find("3 complete versions") != std::string::npos);
}

TEST_CASE("a node's next daemon skips a gap in a bucket of packs its journal no longer holds",
          "[tools][gc-journal]")
{
    // Version 3 goes past the journal and its object fails; its skip's
    // arrival fails too. Version 4, packed, arrives at bucket 2 (versions 2
    // to 4) behind the gap, and its journal record settles; version 5
    // completes in the next bucket. The next daemon found nothing that
    // said how many nodes the job had (no journal record, no manifest of
    // the node's in the bucket) and skipped nothing: version 4 stayed
    // incomplete for good. It reads the bucket's record now.
    cluster c;
    auto env = small_journal;
    env["IOFWD_PACK_VERSIONS"] = "4";
    fill_journal(c, 1, env);  // version 1; the run's bucket starts at 2
    env["IOFWD_JOURNAL_MAX"] = "65536";
    {
        // The fourth pwrite of the run is version 3's object (its journal
        // record and version 2's pack and record come first; counted, the
        // log line waited for below says if that changes). Its skip's
        // arrivals fail, the daemon's tries again too.
        auto d = faulty_daemon(c, "pwrite:EIO:3:once,link@+s:EIO", env);
        auto r = c.rank(0, 1,
                        {"--size", "200000", "--versions", "4", "--size-at", "0", "5000",
                         "--size-at", "2", "5000", "--size-at", "3", "5000", "--gate-at", "1",
                         gate(c, "before"), "--gate-at", "2", gate(c, "after")},
                        env);
        REQUIRE(wait_until([&] {
            return c.log().find("versions up to 2 of job itest complete on all 1 nodes") !=
                   std::string::npos;
        }, 20s));
        open_gate(c, "before");
        const bool skip_failed = wait_until([&] {
            return c.log().find("version 3 of node nodeA: its skip could not arrive at bucket 2") !=
                   std::string::npos;
        }, 20s);
        INFO("log:\n" << c.log());
        REQUIRE(skip_failed);
        open_gate(c, "after");
        const auto s = r.wait(60s);
        INFO("rank:\n" << r.output() << "log:\n" << c.log());
        REQUIRE(s.has_value());
        CHECK(exit_code(*s) != 0);  // io_finalize: version 3 is not durable
        d.signal(SIGTERM);
        REQUIRE(d.wait(30s).has_value());
    }
    INFO("log:\n" << c.log());
    for (const char* v : {"4", "5"}) {
        auto next = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", v}, env);
        const auto ns = next.wait(60s);
        INFO("next rank:\n" << next.output());
        REQUIRE(ns.has_value());
        CHECK(has_line(next, "latest 0 5"));
        CHECK(has_line(next, "read 0 5000"));
    }
    CHECK(c.log().find("version 3 of job itest skipped by node nodeA in bucket 2: the daemon "
                       "before stopped") != std::string::npos);
    CHECK(read_file(c.store() + "/itest/packs/b00000002/COMPLETE.v00000004")
              .find("\nskip nodeA 1 3\n") != std::string::npos);
}

TEST_CASE("gc keeps a version a node's journal holds, for the node's next daemon to complete",
          "[tools][gc-journal]")
{
    // Removing version 2 (or its bucket) would lose nodeB's part of it for
    // good: nodeA's next daemon commits its own part from the journal, and
    // the version can complete only beside nodeB's.
    const bool packs = GENERATE(false, true);
    INFO("packs: " << packs);
    cluster c;
    const auto a = crash_one_node_of_two(c, packs);
    const std::string v2 = c.store() + "/itest/v00000002";
    REQUIRE(std::filesystem::exists(v2 + "/nodeB.manifest"));

    SECTION("kept, and completed by the node's next daemon")
    {
        auto gc = run_iofwd(c, {"gc", "itest"});
        INFO("gc:\n" << gc.out << gc.err);
        CHECK(gc.code == 0);
        const std::string advice =
            ", which the node's next daemon commits when the job runs there again, so that they "
            "can complete (iofwd gc --discard-journals itest drops them, for a node that will "
            "not run the job again)\n";
        CHECK(gc.err ==
              "iofwd gc: job itest: kept version 2: node nodeA's journal holds its parts" +
                  advice +
                  (packs ? "iofwd gc: job itest: kept itest/packs/b00000002 (a bucket of packs "
                           "with no record): node nodeA's journal holds parts of its version 2" +
                               advice
                         : std::string()));
        CHECK(gc.out.find("removed version") == std::string::npos);
        CHECK(std::filesystem::exists(v2 + "/nodeB.manifest"));
        CHECK(std::filesystem::exists(v2 + "/nodeB.r0000"));
        auto rm = run_iofwd(c, {"rm", "itest", "2"});
        CHECK(rm.code == 3);
        CHECK(rm.err == "iofwd rm: not removing version 2 of job itest: node nodeA's journal holds "
                        "its parts, which the node's next daemon commits (iofwd gc "
                        "--discard-journals itest drops them and removes it)\n");
        auto listed = run_iofwd(c, {"ls", "itest", "--json"});
        CHECK(py(c, listed.out,
                 "[(v['version'], v['dead'], v['journaled_by']) for v in d['versions']]") ==
              "[(1, False, []), (2, False, ['nodeA'])]\n");
        auto json = run_iofwd(c, {"gc", "itest", "--json"});
        CHECK(py(c, json.out, "d['jobs'][0]['kept_versions'], d['jobs'][0]['kept_buckets']") ==
              std::string("[{'nodes': ['nodeA'], 'version': 2}] ") +
                  (packs ? "[{'bucket': 2, 'nodes': ['nodeA'], 'versions': [2]}]\n" : "[]\n"));
        // --journals: nodeB's journal holds nothing to commit and goes;
        // nodeA's holds version 2's parts and stays.
        const std::string ja = c.store() + "/itest/.nodeA.journal";
        const std::string jb = c.store() + "/itest/.nodeB.journal";
        REQUIRE(std::filesystem::exists(jb));
        struct stat jb_stat {};
        REQUIRE(::stat(jb.c_str(), &jb_stat) == 0);
        const auto jb_bytes = static_cast<std::uint64_t>(jb_stat.st_blocks) * 512;
        auto journals = run_iofwd(c, {"gc", "itest", "--journals", "--json"});
        CHECK(journals.code == 0);
        CHECK(py(c, journals.out,
                 "d['jobs'][0]['removed_journals'], d['jobs'][0]['kept_journals'], "
                 "d['jobs'][0]['kept_versions'], d['jobs'][0]['journal_failures']") ==
              fmt::format("[{{'bytes': {}, 'node': 'nodeB'}}] [\"node nodeA's journal holds "
                          "records of version 2, which the node's next daemon of the job acts "
                          "on\"] [{{'nodes': ['nodeA'], 'version': 2}}] []\n",
                          jb_bytes));
        CHECK_FALSE(std::filesystem::exists(jb));
        CHECK(std::filesystem::exists(ja));

        auto next = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "2"}, a);
        require_exit(next, 0);
        INFO("rank:\n" << next.output() << "log:\n" << c.log());
        CHECK(has_line(next, "latest 0 2"));
        CHECK(has_line(next, "read 0 5000"));
        CHECK(std::filesystem::exists(packs ? c.store() + "/itest/packs/b00000002/COMPLETE.v00000002"
                                            : v2 + "/COMPLETE"));
        std::string b(5000, '\0');
        example::fill_pattern(reinterpret_cast<std::byte*>(b.data()), b.size(),
                              example::pattern_seed("nodeB", 0, 2));
        CHECK(read_file(v2 + "/nodeB.r0000") == b);
        auto verify = run_iofwd(c, {"verify", "itest"});
        INFO("verify:\n" << verify.out << verify.err);
        CHECK(verify.code == 0);
        auto ls = run_iofwd(c, {"ls", "itest", "--json"});
        CHECK(py(c, ls.out, "[(v['version'], v['state'], v['nodes']) for v in d['versions']]") ==
              "[(1, 'complete', 1), (2, 'complete', 2)]\n");
        // Version 2 committed, nodeA's journal holds nothing to commit
        // either: it goes now, and the node's next run writes a new one.
        struct stat ja_stat {};
        REQUIRE(::stat(ja.c_str(), &ja_stat) == 0);
        const auto ja_bytes = static_cast<std::uint64_t>(ja_stat.st_blocks) * 512;
        auto last = run_iofwd(c, {"gc", "itest", "--journals"});
        INFO("gc:\n" << last.out << last.err);
        CHECK(last.code == 0);
        CHECK(last.out.find(fmt::format("job itest: removed node nodeA's journal ({}; every "
                                        "record in it settled)\n",
                                        iofwd::human_bytes(ja_bytes))) != std::string::npos);
        CHECK(last.err.empty());
        CHECK(last.out.find(fmt::format("gc: 0 versions and 0 leftovers removed, and 1 journal "
                                        "({})\n",
                                        iofwd::human_bytes(ja_bytes))) != std::string::npos);
        CHECK_FALSE(std::filesystem::exists(ja));
        auto again = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "2"}, a);
        require_exit(again, 0);
        CHECK(has_line(again, "read 0 5000"));
        CHECK(std::filesystem::exists(ja));
    }
    SECTION("removed with what the journal held on request")
    {
        auto everywhere = run_iofwd(c, {"gc", "--discard-journals"});
        CHECK(everywhere.code == 2);
        CHECK(everywhere.err == "iofwd gc: --discard-journals needs JOB: it drops what the "
                                "journals of that job's nodes hold\n");
        auto gc = run_iofwd(c, {"gc", "itest", "--discard-journals"});
        INFO("gc:\n" << gc.out << gc.err);
        CHECK(gc.code == 0);
        CHECK(gc.err.empty());
        CHECK(gc.out.find("job itest: dropped version 2 from the journal of node nodeA "
                          "(--discard-journals)\n") != std::string::npos);
        CHECK(gc.out.find("job itest: removed version 2 (incomplete, and no daemon is writing "
                          "the job)\n") != std::string::npos);
        CHECK_FALSE(std::filesystem::exists(v2));
        CHECK_FALSE(std::filesystem::exists(c.store() + "/itest/packs/b00000002"));
        // The next daemon finds nothing to commit: version 1 is the newest.
        auto next = c.rank(0, 1, {"--size", "5000", "--versions", "0", "--probe", "1"}, a);
        require_exit(next, 0);
        INFO("rank:\n" << next.output() << "log:\n" << c.log());
        CHECK(has_line(next, "latest 0 1"));
        CHECK(c.log().find("from the node's journal") == std::string::npos);
        CHECK_FALSE(std::filesystem::exists(v2));
    }
    SECTION("a journal that is a link is not read: the job is left whole, in words")
    {
        // Someone swapped nodeA's journal for a symlink (to the real one,
        // moved aside): what it says is not to be trusted, so gc cannot
        // tell whether version 2 will complete, and removes nothing.
        const std::string journal = c.store() + "/itest/.nodeA.journal";
        const std::string aside = c.tmp / "journal-aside";
        std::filesystem::rename(journal, aside);
        std::filesystem::create_symlink(aside, journal);
        auto gc = run_iofwd(c, {"gc", "itest"});
        INFO("gc:\n" << gc.out << gc.err);
        CHECK(gc.code == 1);
        CHECK(gc.err.rfind("iofwd gc: not touching job itest: cannot open node nodeA's journal "
                           "of job itest: ",
                           0) == 0);
        CHECK(gc.err.find(": " + journal + " is a symlink\n") != std::string::npos);
        CHECK(std::filesystem::exists(v2 + "/nodeB.manifest"));
        auto rm = run_iofwd(c, {"rm", "itest", "2"});
        CHECK(rm.code == 1);
        CHECK(rm.err.find("cannot open node nodeA's journal of job itest: ") != std::string::npos);
        CHECK(std::filesystem::exists(v2 + "/nodeB.manifest"));
        auto ls = run_iofwd(c, {"ls", "itest", "--json"});
        CHECK(py(c, ls.out, "[(v['version'], v['dead']) for v in d['versions']]") ==
              "[(1, False), (2, False)]\n");
        // Put back, the journal reads again and gc keeps the version as
        // before.
        std::filesystem::remove(journal);
        std::filesystem::rename(aside, journal);
        auto again = run_iofwd(c, {"gc", "itest"});
        CHECK(again.code == 0);
        CHECK(again.err.rfind("iofwd gc: job itest: kept version 2: node nodeA's journal holds "
                              "its parts",
                              0) == 0);
        CHECK(std::filesystem::exists(v2 + "/nodeB.manifest"));
    }
}

TEST_CASE("rm and gc refuse a version a live daemon may be writing, and say who holds it",
          "[tools][live]")
{
    cluster c;
    c.unpacked();
    fill_journal(c, 2);
    // Version 1 complete (its journal started over when its daemon ended);
    // version 2 complete through the journal; rank 0 has written version
    // 3, rank 1 is stuck before it: the daemon lives, holding the job's
    // claim.
    auto r0 = c.rank(0, 2, {"--size", "60000", "--versions", "2"}, small_journal);
    auto r1 = c.rank(1, 2, {"--size", "60000", "--versions", "2", "--stall-at", "1"},
                     small_journal);
    REQUIRE(wait_until([&] { return has_line(r1, "stalled") && has_line(r0, "write 1 0 3 "); },
                       60s));
    REQUIRE(wait_until([&] {
        return exists(c.store() + "/itest/v00000003/nodeA.r0000") &&
               exists(c.store() + "/itest/v00000002/COMPLETE");
    }, 30s));
    const std::string live = "a live daemon on node nodeA holds job itest's claim (it is writing "
                             "the job)";

    auto ls = run_iofwd(c, {"ls", "itest"});
    CHECK(ls.code == 0);
    CHECK(masked(ls.out).find("live: " + live + "\n") != std::string::npos);
    CHECK(masked(ls.out).find("       3  incomplete  <time>                    0      1    58.6 "
                              "KiB  no COMPLETE record, no node's manifest\n") !=
          std::string::npos);

    auto rm = run_iofwd(c, {"rm", "itest", "3"});
    CHECK(rm.code == 3);
    CHECK(rm.out.empty());
    CHECK(rm.err == "iofwd rm: not touching version 3 of job itest: it is not complete and " +
                        live + "; try again when the job has finished\n");
    auto gc = run_iofwd(c, {"gc"});
    CHECK(gc.code == 3);
    CHECK(gc.err == "iofwd gc: not touching job itest: " + live + "\n");
    CHECK(gc.out == "gc: 0 versions and 0 leftovers removed\n");
    CHECK(exists(c.store() + "/itest/v00000003/nodeA.r0000"));
    // The newest complete version is in the live daemon's journal: were
    // it removed, the node's next daemon would find its records newer than
    // every complete version, should this one die before version 3
    // completes, and commit it again.
    auto newest = run_iofwd(c, {"rm", "itest", "2"});
    CHECK(newest.code == 3);
    CHECK(newest.out.empty());
    CHECK(newest.err == "iofwd rm: not removing version 2 of job itest: " + live +
                            ", and node nodeA's journal holds parts of version 2, which the "
                            "node's next daemon would put back; try again when the job has "
                            "finished\n");
    CHECK(exists(c.store() + "/itest/v00000002/COMPLETE"));
    // A complete version nobody writes any more may go while the job runs.
    auto rm1 = run_iofwd(c, {"rm", "itest", "1"});
    CHECK(rm1.code == 0);
    CHECK_FALSE(exists(c.store() + "/itest/v00000001"));
    // The daemon was not disturbed: alive, still holding the claim.
    const auto pids = daemon_pids(c.log());
    REQUIRE(pids.size() == 2);  // fill_journal's, gone; this run's
    CHECK(::kill(pids[1], 0) == 0);
    CHECK(run_iofwd(c, {"ls", "itest"}).out.find("live: " + live + "\n") != std::string::npos);

    // The daemon first: one that saw its ranks die would write the job's
    // summary (reports/) before its own end.
    ::kill(pids[1], SIGKILL);
    r0.signal(SIGKILL);
    r1.signal(SIGKILL);
    REQUIRE(wait_until([&] { return run_iofwd(c, {"gc", "itest"}).code == 0; }, 30s));
    CHECK(names_in(c.store() + "/itest") ==
          std::vector<std::string>{".nodeA.claim", ".nodeA.journal", "reports", "v00000002"});
}

TEST_CASE("keep retires a kept bucket's older versions while a live daemon writes the job",
          "[tools][live-packed]")
{
    // Packs in buckets of 64: version 1 in bucket 1, then versions 2-5 of
    // two ranks complete in bucket 2 (a daemon's buckets start at its first
    // version); rank 1 waits at a gate before version 6, so the daemon
    // lives, holding the job's claim. The versions keep retires are settled
    // by the bucket's record, whatever the daemon does next: keep may
    // retire them while it runs, and leaves version 6 to it, which then
    // completes in the same bucket.
    cluster c;
    c.packed(64);
    fill_journal(c, 2);
    const std::string late = gate(c, "late");
    auto r0 = c.rank(0, 2, {"--size", "5000", "--versions", "5"}, small_journal);
    auto r1 = c.rank(1, 2, {"--size", "5000", "--versions", "5", "--gate-at", "4", late},
                     small_journal);
    const std::string bucket = c.store() + "/itest/packs/b00000002";
    const bool ready = wait_until([&] {
        return has_line(r1, "gated 4") && has_line(r0, "write 4 0 6 ") &&
               exists(bucket + "/COMPLETE.v00000005");
    }, 60s);
    INFO("rank 0:\n" << r0.output() << "rank 1:\n" << r1.output() << "log:\n" << c.log());
    REQUIRE(ready);

    auto keep = run_iofwd(c, {"keep", "itest", "2"});
    CHECK(keep.code == 0);
    CHECK(keep.err.empty());
    CHECK(keep.out == "job itest: kept complete versions 4-5; removed 1-3\n");
    CHECK_FALSE(exists(c.store() + "/itest/packs/b00000001"));
    CHECK(exists(bucket + "/RETIRED.v00000003"));
    auto gone = run_iofwd(c, {"cat", "itest", "3", "0"});
    CHECK(gone.code == 2);
    // Version 6 is the live daemon's: neither keep nor gc touches it.
    auto gc = run_iofwd(c, {"gc"});
    CHECK(gc.code == 3);
    // The daemon was not disturbed (fill_journal's is gone; this run's lives).
    const auto pids = daemon_pids(c.log());
    REQUIRE(pids.size() == 2);
    CHECK(::kill(pids[1], 0) == 0);

    // The daemon goes on: version 6 completes in the bucket keep retired
    // part of, and the retired versions stay gone.
    open_gate(c, "late");
    for (auto* r : {&r0, &r1}) {
        const auto st = r->wait(60s);
        REQUIRE(st.has_value());
        CHECK(exit_code(*st) == 0);
    }
    CHECK(exists(bucket + "/COMPLETE.v00000006"));
    CHECK(exists(bucket + "/RETIRED.v00000003"));
    CHECK(run_iofwd(c, {"cat", "itest", "3", "0"}).code == 2);
    auto ls = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(ls.code == 0);
    CHECK(py(c, ls.out, "[v['version'] for v in d['versions'] if v['state'] == 'complete']") ==
          "[4, 5, 6]\n");
    std::string out;
    CHECK(c.verify(3, 2, out) == 0);
}

TEST_CASE("a version rm took out of its bucket is not committed again from the journal",
          "[tools][rm-packed]")
{
    // Two ranks write versions 2-4 in packs of bucket 2 and wait at a gate;
    // the daemon is killed then, so their records stay in the node's
    // journal (a daemon that exits starts it over). rm takes the newest, 4,
    // out of the bucket. The next daemon's claim replays the journal:
    // version 4's records are settled by the mark, not packed again, and
    // the restart reads version 3.
    cluster c;
    c.packed(64);
    fill_journal(c, 2);
    const std::string late = gate(c, "late");
    const std::string bucket = c.store() + "/itest/packs/b00000002";
    {
        auto r0 = c.rank(0, 2, {"--size", "5000", "--versions", "4", "--gate-at", "3", late},
                         small_journal);
        auto r1 = c.rank(1, 2, {"--size", "5000", "--versions", "4", "--gate-at", "3", late},
                         small_journal);
        const bool ready = wait_until([&] {
            return has_line(r0, "gated 3") && has_line(r1, "gated 3") &&
                   exists(bucket + "/COMPLETE.v00000004");
        }, 60s);
        INFO("rank 0:\n" << r0.output() << "rank 1:\n" << r1.output() << "log:\n" << c.log());
        REQUIRE(ready);
        crash_node(c, r0, r1);
    }
    // Version 4's pack: freed with it when it holds no other version (the
    // batches are cut by time), kept beside 2 and 3 otherwise. Either way
    // the mark stays and settles the journal's records of 4.
    std::string pack4;
    for (const auto& n : names_in(bucket))
        if (const auto p = iofwd::store::parse_pack_name(n); p && p->first <= 4 && 4 <= p->last)
            pack4 = bucket + "/" + n;
    REQUIRE_FALSE(pack4.empty());
    const bool alone = pack4.ends_with(".v00000004-00000004");
    const auto pack4_bytes = std::filesystem::file_size(pack4);
    auto rm = run_iofwd(c, {"rm", "itest", "4"});
    CHECK(rm.code == 0);
    CHECK(rm.out == "removed version 4 of job itest (out of its bucket of packs)\n" +
                        (alone ? fmt::format("freed {} in 1 pack that held only versions removed\n",
                                             iofwd::human_bytes(pack4_bytes))
                               : "1 pack keeps the bytes of versions removed beside versions that "
                                 "are not, until those go too: " +
                                     pack4.substr(c.store().size() + 1) + "\n"));
    CHECK(std::filesystem::exists(pack4) == !alone);
    const auto before = c.log().size();

    const auto next = restart_two(c);
    CHECK(has_line(next[0], "restart 0 3 1"));
    CHECK(has_line(next[1], "restart 0 3 1"));
    const auto after = c.log().substr(before);
    INFO("the next daemon's log:\n" << after);
    CHECK(after.find("from the node's journal") == std::string::npos);
    CHECK(after.find("version 4") == std::string::npos);
    auto ls = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, ls.out, "[v['version'] for v in d['versions'] if v['state'] == 'complete']") ==
          "[1, 2, 3]\n");
    CHECK(exists(bucket + "/REMOVED.v00000004"));
}

TEST_CASE("a version rm removed from its own directory is not committed again from the journal",
          "[tools][rm-journal]")
{
    // Versions in their own directories (no packs): two ranks write
    // versions 2-4 through the node's journal and wait at a gate; the
    // daemon is killed then, so the records stay in the journal. A record
    // is settled while no newer version than its own is complete: with
    // version 4 removed, its records would be pending again and the node's
    // next daemon would commit version 4 complete again.
    cluster c;
    c.unpacked();
    fill_journal(c, 2);
    const std::string late = gate(c, "late");
    const std::string v4 = c.store() + "/itest/v00000004";
    // `ahead`: rank 0 writes version 5 too (durable in the journal only
    // for rank 1 never writes it), which the next daemon has to commit.
    const auto crash = [&](bool ahead) {
        auto r0 = c.rank(0, 2, {"--size", "5000", "--versions", ahead ? "5" : "4", "--wait",
                                "--gate-at", ahead ? "4" : "3", late},
                         small_journal);
        auto r1 = c.rank(1, 2, {"--size", "5000", "--versions", "4", "--wait", "--gate-at", "3",
                                late},
                         small_journal);
        // Every version complete: one older than the newest complete is
        // settled (not restored by the claim) even while it is not.
        const bool ready = wait_until([&] {
            return has_line(r0, ahead ? "gated 4" : "gated 3") && has_line(r1, "gated 3") &&
                   exists(c.store() + "/itest/v00000002/COMPLETE") &&
                   exists(c.store() + "/itest/v00000003/COMPLETE") && exists(v4 + "/COMPLETE");
        }, 60s);
        INFO("rank 0:\n" << r0.output() << "rank 1:\n" << r1.output() << "log:\n" << c.log());
        REQUIRE(ready);
        REQUIRE(has_line(r0, "durable 2 0 "));
        if (ahead)
            REQUIRE(has_line(r0, "durable 3 0 "));
        crash_node(c, r0, r1);
    };
    const auto restart_reads = [&](const std::string& line) {
        const auto before = c.log().size();
        const auto next = restart_two(c);
        CHECK(has_line(next[0], line));
        CHECK(has_line(next[1], line));
        const auto after = c.log().substr(before);
        INFO("the next daemon's log:\n" << after);
        CHECK(after.find("from the node's journal") == std::string::npos);
        auto ls = run_iofwd(c, {"ls", "itest", "--json"});
        CHECK(py(c, ls.out, "[v['version'] for v in d['versions'] if v['state'] == 'complete']") ==
              "[1, 2, 3]\n");
        CHECK_FALSE(exists(v4));
    };

    SECTION("the journal holds nothing else to commit: started over, then the version goes")
    {
        crash(false);
        auto rm = run_iofwd(c, {"rm", "itest", "4", "--json"});
        INFO("rm:\n" << rm.out << rm.err);
        CHECK(rm.code == 0);
        CHECK(py(c, rm.out, "d['removed'], d['journals_started_over']") == "[4] ['nodeA']\n");
        CHECK_FALSE(exists(v4));
        restart_reads("restart 0 3 1");
    }
    SECTION("in words")
    {
        crash(false);
        auto rm = run_iofwd(c, {"rm", "itest", "3", "4"});
        INFO("rm:\n" << rm.out << rm.err);
        CHECK(rm.code == 0);
        CHECK(rm.err.empty());
        CHECK(rm.out == "started node nodeA's journal over: it held parts of versions 3, 4, which "
                        "the node's next daemon would have put back\n"
                        "removed version 3 of job itest\nremoved version 4 of job itest\n");
        const auto before = c.log().size();
        CHECK(has_line(restart_two(c)[0], "restart 0 2 1"));
        INFO("the next daemon's log:\n" << c.log().substr(before));
        CHECK(c.log().substr(before).find("from the node's journal") == std::string::npos);
    }
    SECTION("one at a time: a version removed before comes back with the newest")
    {
        // rm 3 leaves the journal alone (its record is settled while 4 is
        // complete); rm 4 would make the records of both 3 and 4 pending.
        crash(false);
        auto rm3 = run_iofwd(c, {"rm", "itest", "3"});
        CHECK(rm3.code == 0);
        CHECK(rm3.out == "removed version 3 of job itest\n");
        auto rm4 = run_iofwd(c, {"rm", "itest", "4"});
        INFO("rm:\n" << rm4.out << rm4.err);
        CHECK(rm4.code == 0);
        CHECK(rm4.out == "started node nodeA's journal over: it held parts of versions 3, 4, "
                         "which the node's next daemon would have put back\n"
                         "removed version 4 of job itest\n");
        CHECK(has_line(restart_two(c)[0], "restart 0 2 1"));
        auto ls = run_iofwd(c, {"ls", "itest", "--json"});
        CHECK(py(c, ls.out, "[v['version'] for v in d['versions']]") == "[1, 2]\n");
    }
    SECTION("beside a version that may yet complete: refused, nothing changed")
    {
        // Versions 2-4 complete; then both ranks' version 5 is durable in
        // the journal, and its objects never written (the daemon's store
        // writes after the first 21 hang: 19 for versions 2-4, then
        // version 5's two records). Its next daemon would commit 5.
        auto d = stalling_daemon(c, 21, small_journal);
        auto r0 = c.rank(0, 2, {"--size", "5000", "--versions", "4", "--wait", "--gate-at", "3",
                                late},
                         small_journal);
        auto r1 = c.rank(1, 2, {"--size", "5000", "--versions", "4", "--wait", "--gate-at", "3",
                                late},
                         small_journal);
        const bool gated = wait_until([&] {
            return has_line(r0, "gated 3") && has_line(r1, "gated 3") &&
                   exists(c.store() + "/itest/v00000002/COMPLETE") &&
                   exists(c.store() + "/itest/v00000003/COMPLETE") && exists(v4 + "/COMPLETE");
        }, 30s);
        INFO("rank 0:\n" << r0.output() << "rank 1:\n" << r1.output() << "log:\n" << c.log());
        REQUIRE(gated);
        open_gate(c, "late");
        REQUIRE(wait_until([&] {
            return has_line(r0, "durable 3 0 ") && has_line(r1, "durable 3 0 ");
        }, 30s));
        const std::string v5 = c.store() + "/itest/v00000005";
        REQUIRE_FALSE(exists(v5 + "/COMPLETE"));
        d.signal(SIGKILL);
        REQUIRE(d.wait(10s).has_value());
        for (auto* r : {&r0, &r1}) {
            r->signal(SIGKILL);
            REQUIRE(r->wait(10s).has_value());
        }
        const std::string journal = c.store() + "/itest/.nodeA.journal";
        const auto journal_bytes = read_file(journal);
        auto rm = run_iofwd(c, {"rm", "itest", "4"});
        INFO("rm:\n" << rm.out << rm.err);
        CHECK(rm.code == 3);
        CHECK(rm.out.empty());
        CHECK(rm.err == "iofwd rm: not removing version 4 of job itest: node nodeA's journal holds "
                        "parts of version 4, which the node's next daemon would put back, "
                        "beside parts of version 5, which it commits so that they can complete; "
                        "remove it after the job's "
                        "next run on node nodeA (its daemon commits what the journal holds and "
                        "starts it over), or drop what the journal holds first (iofwd gc "
                        "--discard-journals itest, for a node that will not run the job again)\n");
        CHECK(exists(v4 + "/COMPLETE"));
        CHECK(read_file(journal) == journal_bytes);
        // As it says: the next run commits version 5 and starts the
        // journal over; version 4 then goes alone.
        const auto next = restart_two(c);
        CHECK(has_line(next[0], "restart 0 5 1"));
        CHECK(has_line(next[1], "restart 0 5 1"));
        auto again = run_iofwd(c, {"rm", "itest", "4"});
        INFO("rm again:\n" << again.out << again.err);
        CHECK(again.code == 0);
        CHECK(again.out == "removed version 4 of job itest\n");
        auto ls = run_iofwd(c, {"ls", "itest", "--json"});
        CHECK(py(c, ls.out, "[v['version'] for v in d['versions'] if v['state'] == 'complete']") ==
              "[1, 2, 3, 5]\n");
    }
    SECTION("beside parts of a version that cannot complete: started over all the same")
    {
        // Rank 0's version 5 is in the journal, rank 1's never will be:
        // the version cannot complete, and its part goes with the journal.
        crash(true);
        auto rm = run_iofwd(c, {"rm", "itest", "4"});
        INFO("rm:\n" << rm.out << rm.err);
        CHECK(rm.code == 0);
        CHECK(rm.out == "started node nodeA's journal over: it held parts of version 4, which "
                        "the node's next daemon would have put back\n"
                        "removed version 4 of job itest\n");
        restart_reads("restart 0 3 1");
    }
}

TEST_CASE("versions retention retired and rm removed stay settled once their packs are gone",
          "[tools][rm-packed]")
{
    // One rank writes versions 2-4 in packs of bucket 2, 100 ms apart (a
    // pack each, mostly), with IOFWD_KEEP=1: retention retires 2 and 3
    // and frees the packs that held only them. The daemon is killed at
    // the gate, so the journal keeps the records of 2-4; rm takes 4, the
    // last version listed, and its pack. No complete version is left to
    // be older than 2-4: the next claim must still take their records as
    // settled (by the bucket's marks), not pack them again, and number the
    // next version after them.
    cluster c;
    c.packed(64);
    fill_journal(c, 1);
    auto env = small_journal;
    env["IOFWD_KEEP"] = "1";
    const std::string late = gate(c, "late");
    const std::string bucket = c.store() + "/itest/packs/b00000002";
    {
        auto r0 = c.rank(0, 1,
                         {"--size", "5000", "--versions", "4", "--pause-ms", "100", "--gate-at",
                          "3", late},
                         env);
        // Until retention has retired 3 and then removed the packs that
        // held only 2 and 3 (it writes the mark first).
        const auto retired_packs_gone = [&] {
            for (const auto& n : names_in(bucket))
                if (const auto p = iofwd::store::parse_pack_name(n); p && p->last < 4)
                    return false;
            return true;
        };
        const bool ready = wait_until([&] {
            return has_line(r0, "gated 3") && exists(bucket + "/COMPLETE.v00000004") &&
                   exists(bucket + "/RETIRED.v00000003") && retired_packs_gone();
        }, 60s);
        INFO("rank 0:\n" << r0.output() << "log:\n" << c.log() << "bucket: "
                           << fmt::format("{}", fmt::join(names_in(bucket), " ")));
        REQUIRE(ready);
        const auto pids = daemon_pids(c.log());
        REQUIRE(pids.size() == 2);
        REQUIRE(::kill(pids[1], SIGKILL) == 0);
        r0.signal(SIGKILL);
        REQUIRE(r0.wait(10s).has_value());
        REQUIRE(wait_until([&] { return ::kill(pids[1], 0) != 0; }, 10s));
    }
    // Every pack left holds 4; those of 2 and 3 alone went with the mark.
    for (const auto& n : names_in(bucket))
        if (const auto p = iofwd::store::parse_pack_name(n)) {
            INFO(n);
            CHECK(p->last == 4);
        }
    auto rm = run_iofwd(c, {"rm", "itest", "4"});
    CHECK(rm.code == 0);
    for (const auto& n : names_in(bucket))
        CHECK_FALSE(iofwd::store::parse_pack_name(n));
    CHECK(py(c, run_iofwd(c, {"ls", "itest", "--json"}).out,
             "[v['version'] for v in d['versions']]") == "[]\n");
    const auto before = c.log().size();

    auto r0 = c.rank(0, 1, {"--size", "5000", "--versions", "1"}, small_journal);
    require_exit(r0, 0);
    CHECK(has_line(r0, "init 0"));
    const auto after = c.log().substr(before);
    INFO("rank:\n" << r0.output() << "the next daemon's log:\n" << after);
    CHECK(after.find("from the node's journal") == std::string::npos);
    CHECK(after.find("does not read") == std::string::npos);
    auto ls = run_iofwd(c, {"ls", "itest", "--json"});
    CHECK(py(c, ls.out, "[(v['version'], v['state']) for v in d['versions']]") ==
          "[(5, 'complete')]\n");
    CHECK(run_iofwd(c, {"cat", "itest", "5", "0"}).out == pattern(0, 5, 5000));
    CHECK(run_iofwd(c, {"verify", "itest"}).code == 0);
}

TEST_CASE("every bad argument: a sentence and exit status 2", "[tools][args]")
{
    cluster c;
    {
        auto r = c.rank(0, 1, {"--size", "1000", "--versions", "2"});
        require_exit(r, 0);
    }
    const std::string store = "directory " + c.store();
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"ls", "nojob"}, "iofwd ls: job 'nojob' is not in " + store + " (its jobs: itest)\n"},
        {{"verify", "itest", "9"},
         "iofwd verify: version 9 of job itest is not in " + store + " (its versions: 1-2)\n"},
        {{"verify", "itest", "x1"},
         "iofwd verify: version 'x1' is not a version number (iofwd ls itest lists them)\n"},
        {{"rm", "itest", "1", "7"},
         "iofwd rm: version 7 of job itest is not in " + store + " (its versions: 1-2)\n"},
        {{"keep", "itest", "two"}, "iofwd keep: K 'two' is not a whole number\n"},
        {{"keep", "itest", "0"},
         "iofwd keep: K 0 is not from 1 to 1000000000 (iofwd rm removes versions by number)\n"},
        {{"cat", "itest", "1", "nodeB.0"},
         "iofwd cat: version 1 of job itest has no rank nodeB.0 (it has 1 rank, indexes 0-0, on "
         "node nodeA; give RANK as INDEX or NODE.RANK)\n"},
        {{"cat", "itest", "1", "nodeA.x"}, "iofwd cat: rank 'x' is not a whole number\n"},
        {{"ls", "--store", c.tmp / "nothere"},
         "iofwd ls: store " + c.tmp / "nothere" + " does not exist (" + c.tmp / "nothere" +
             ": No such file or directory); give --store or IOFWD_STORE\n"},
        {{"ls", "--store", "s3:bucket"},
         std::string("iofwd ls: cannot open store s3:bucket: unknown store type 's3' in "
                     "'s3:bucket' (known: dir:PATH") +
             (IOFWD_HAVE_RADOS ? ", rados:POOL)\n" : "; this build has no rados)\n")},
        {{"frob"}, "iofwd: unknown subcommand 'frob' (one of: ls, verify, restore, cat, rm, keep, "
                   "gc, report, status, config; see iofwd --help)\n"},
        {{}, "iofwd: A subcommand is required (see iofwd --help)\n"},
        {{"verify"}, "iofwd verify: JOB is required (see iofwd verify --help)\n"},
        {{"ls", "--colour"},
         "iofwd ls: The following argument was not expected: --colour (see iofwd ls --help)\n"},
        {{"verify", "itest", "--threads", "0"}, "iofwd verify: --threads 0 is not from 1 to 64\n"},
        {{"report"}, "iofwd report: JOB is required (see iofwd report --help)\n"},
        {{"report", "nojob"},
         "iofwd report: job 'nojob' is not in " + store + " (its jobs: itest)\n"},
        {{"report", "itest", "--plot"},
         "iofwd report: --plot: 1 required FILE missing (see iofwd report --help)\n"},
        {{"status", "--watch", "abc"},
         "iofwd status: --watch 'abc' is not a number of seconds from 0.1 to 86400\n"},
        {{"status", "--watch", "0"},
         "iofwd status: --watch '0' is not a number of seconds from 0.1 to 86400\n"},
        {{"status", "--timeout", "x"},
         "iofwd status: --timeout 'x' is not a number of seconds from 0.01 to 600\n"},
        {{"status", "now"},
         "iofwd status: The following argument was not expected: now (see iofwd status "
         "--help)\n"},
    };
    for (const auto& [args, message] : cases) {
        auto r = run_iofwd(c, args);
        INFO(r.out);
        CHECK(r.err == message);
        CHECK(r.code == 2);
        CHECK(r.out.empty());
    }
    // An existing file is not overwritten.
    const std::string dir = c.tmp / "r";
    std::filesystem::create_directory(dir);
    std::ofstream(dir + "/nodeA.r0000") << "mine";
    auto r = run_iofwd(c, {"restore", "itest", "2", dir});
    CHECK(r.code == 2);
    CHECK(r.err == "iofwd restore: " + dir + "/nodeA.r0000 exists: not overwriting it\n");
    CHECK(read_file(dir + "/nodeA.r0000") == "mine");
}

TEST_CASE("config: every setting, its value and source; unknown names with the nearest",
          "[tools][config]")
{
    cluster c;
    auto good = run_iofwd(c, {"config"}, {{"IOFWD_CHUNK_SIZE", "1M"}});
    CHECK(good.code == 0);
    CHECK(good.out.find("SETTING                  VALUE                FROM         READ BY\n") ==
          0);
    CHECK(good.out.find("\nIOFWD_CHUNK_SIZE         1M                   environment  daemon\n") !=
          std::string::npos);
    CHECK(good.out.find("\nIOFWD_STAGING_SIZE       256M                 default      daemon\n") !=
          std::string::npos);
    CHECK(good.out.find("\nIOFWD_RUN                -                    unset        client\n") !=
          std::string::npos);

    auto bad = run_iofwd(c, {"config", "--json"},
                     {{"IOFWD_STAGIN_SIZE", "1G"}, {"IOFWD_KEEP", "abc"}, {"IOFWD_ZZZZZZZZZZZ", "1"}});
    CHECK(bad.code == 1);
    CHECK(py(c, bad.out, "sorted((u['name'], u['nearest']) for u in d['unknown'])") ==
          "[('IOFWD_STAGIN_SIZE', 'IOFWD_STAGING_SIZE'), ('IOFWD_ZZZZZZZZZZZ', None)]\n");
    CHECK(py(c, bad.out,
             "[(s['value'], s['source'], s['valid'], s['problem'], s['read_by'], s['flag']) for s "
             "in d['settings'] if s['name'] in ('IOFWD_KEEP', 'IOFWD_STORE', 'IOFWD_JOB')]") ==
          "[('" + c.store() + "', 'environment', True, None, 'both', '--store'), "
          "('itest', 'environment', True, None, 'client', None), "
          "('abc', 'environment', False, \"IOFWD_KEEP='abc' is not a whole number from 0 to "
          "1000000000\", 'daemon', '--keep')]\n");
    // The other subcommands warn, as iod and the library do.
    auto warned = run_iofwd(c, {"ls"}, {{"IOFWD_STAGIN_SIZE", "1G"}});
    CHECK(warned.err == "iofwd: warning: IOFWD_STAGIN_SIZE is not an iofwd setting (did you mean "
                        "IOFWD_STAGING_SIZE?)\n"
                        "iofwd ls: store " + c.store() + " does not exist (" + c.store() +
                        ": No such file or directory); give --store or IOFWD_STORE\n");
    CHECK(warned.code == 2);
    auto text = run_iofwd(c, {"config"}, {{"IOFWD_STAGIN_SIZE", "1G"}});
    CHECK(text.code == 1);
    CHECK(text.out.find("\nunknown: IOFWD_STAGIN_SIZE is not an iofwd setting (did you mean "
                        "IOFWD_STAGING_SIZE?)\n") != std::string::npos);
}
