#include <catch2/catch.hpp>

#include "errors.hpp"
#include "store/layout.hpp"

using namespace iofwd;
using namespace iofwd::store;

TEST_CASE("object names keep jobs, versions, nodes and ranks apart", "[layout]")
{
    CHECK(data_object("job", 12, "node-3", 7) == "job/v00000012/node-3.r0007");
    CHECK(manifest_object("job", 12, "node-3") == "job/v00000012/node-3.manifest");
    CHECK(data_object("a", 1, "n", 1) != data_object("b", 1, "n", 1));
    CHECK(data_object("a", 1, "n", 1) != data_object("a", 2, "n", 1));
    CHECK(data_object("a", 1, "n", 1) != data_object("a", 1, "m", 1));
    CHECK(data_object("a", 1, "n", 1) != data_object("a", 1, "n", 2));
    CHECK(parse_version_dir("v00000012") == 12u);
    CHECK(parse_version_dir("v123456789012") == 123456789012u);
    CHECK_FALSE(parse_version_dir("v"));
    CHECK_FALSE(parse_version_dir("x0001"));
    CHECK_FALSE(parse_version_dir("v12a"));
}

TEST_CASE("a manifest round-trips through its text form", "[layout]")
{
    manifest m{"job", "node-1", 5, 3, {{0, 100, 0xdeadbeef}, {1, 5ull << 30, 1}, {2, 0, 0}}};
    const auto text = format_manifest(m);
    CHECK(text.rfind("iofwd-manifest 1\njob job\nnode node-1\nversion 5\nranks 3\n", 0) == 0);
    manifest back;
    std::string why;
    REQUIRE_FALSE(parse_manifest(text, back, why));
    CHECK(back == m);
    // A version a bucket commits: the second layout names the bucket and
    // the job's nodes.
    manifest b{"job", "node-1", 70, 1, {{0, 4096, 7}}, 65, 3};
    const auto btext = format_manifest(b);
    CHECK(btext == "iofwd-manifest 2\njob job\nnode node-1\nversion 70\nranks 1\n"
                   "bucket 65 nodes 3\nrank 0 size 4096 crc32c 00000007\nend\n");
    REQUIRE_FALSE(parse_manifest(btext, back, why));
    CHECK(back == b);
    for (const char* bad : {"bucket 71 nodes 3", "bucket 0 nodes 3", "bucket 65 nodes 0",
                            "bucket 65", "bucket 65 nodes x", "nodes 3 bucket 65",
                            "bucket 065 nodes 3", "bucket 65 nodes 03", "bucket 65 nodes 100001",
                            "bucket 65  nodes 3"}) {
        auto t = btext;
        t.replace(t.find("bucket 65 nodes 3"), 17, bad);
        CHECK(parse_manifest(t, back, why) == errc::corrupt);
    }
    // The first layout with a bucket line, or the second without one.
    auto v1 = btext;
    v1.replace(0, 16, "iofwd-manifest 1");
    CHECK(parse_manifest(v1, back, why) == errc::corrupt);
    auto v2 = text;
    v2.replace(0, 16, "iofwd-manifest 2");
    CHECK(parse_manifest(v2, back, why) == errc::corrupt);
}

TEST_CASE("truncated or altered manifests are rejected as corrupt", "[layout]")
{
    manifest m{"job", "n", 1, 2, {{0, 10, 0xabcdef01}, {1, 20, 0x12345678}}};
    const auto text = format_manifest(m);
    manifest out;
    std::string why;
    for (std::size_t cut = 0; cut + 1 < text.size(); ++cut)
        CHECK(parse_manifest(text.substr(0, cut), out, why) == errc::corrupt);
    auto swapped = text;
    swapped.replace(swapped.find("rank 1"), 6, "rank 0");
    CHECK(parse_manifest(swapped, out, why) == errc::corrupt);
    auto bad_crc = text;
    bad_crc.replace(bad_crc.find("abcdef01"), 8, "zzzzzzzz");
    CHECK(parse_manifest(bad_crc, out, why) == errc::corrupt);
}

TEST_CASE("a COMPLETE record round-trips and rejects damage", "[layout]")
{
    complete_record c{"job", 7, {{"node-a", 4, 0x01020304}, {"node-b", 2, 0xffffffff}}};
    const auto text = format_complete(c);
    CHECK(complete_object("job", 7) == "job/v00000007/COMPLETE");
    complete_record back;
    std::string why;
    REQUIRE_FALSE(parse_complete(text, back, why));
    CHECK(back == c);
    for (std::size_t cut = 0; cut + 1 < text.size(); ++cut)
        CHECK(parse_complete(text.substr(0, cut), back, why) == errc::corrupt);
    auto bad = text;
    bad.replace(bad.find("ranks 4"), 7, "ranks x");
    CHECK(parse_complete(bad, back, why) == errc::corrupt);
}

TEST_CASE("a run record round-trips and refuses damaged text", "[layout]")
{
    CHECK(run_object("job", "r1") == "job/runs/r1");
    const run_record r{"job", "20261123T164512-3f9a2b7c01d4e5f6", 17, 4};
    const auto text = format_run(r);
    CHECK(text == "iofwd-run 1\njob job\nrun 20261123T164512-3f9a2b7c01d4e5f6\nfirst-version 17\n"
                  "nodes 4\nend\n");
    run_record back;
    std::string why;
    REQUIRE_FALSE(parse_run(text, back, why));
    CHECK(back == r);
    CHECK(parse_run(text.substr(0, text.size() - 4), back, why) == errc::corrupt);
    CHECK(why.find("end line") != std::string::npos);
    CHECK(parse_run("iofwd-run 1\njob j\nrun r\nfirst-version 0\nnodes 1\nend\n", back, why) ==
          errc::corrupt);
    CHECK(why.find("first-version") != std::string::npos);
    CHECK(parse_run("iofwd-run 1\njob j\nrun r\nfirst-version 3\nnodes x\nend\n", back, why) ==
          errc::corrupt);
    CHECK(why.find("nodes") != std::string::npos);
    // A run that packs its versions: the second layout, with the bucket size.
    const run_record p{"job", "r2", 5, 2, 64};
    const auto ptext = format_run(p);
    CHECK(ptext == "iofwd-run 2\njob job\nrun r2\nfirst-version 5\nnodes 2\npack-versions 64\n"
                   "end\n");
    REQUIRE_FALSE(parse_run(ptext, back, why));
    CHECK(back == p);
    CHECK(parse_run("iofwd-run 2\njob j\nrun r\nfirst-version 3\nnodes 1\nend\n", back, why) ==
          errc::corrupt);
    CHECK(why.find("pack-versions") != std::string::npos);
    CHECK(parse_run("iofwd-run 2\njob j\nrun r\nfirst-version 3\nnodes 1\npack-versions 0\nend\n",
                    back, why) == errc::corrupt);
    CHECK(parse_run("iofwd-run 2\njob j\nrun r\nfirst-version 3\nnodes 1\npack-versions 65537\n"
                    "end\n",
                    back, why) == errc::corrupt);
    CHECK(parse_run("iofwd-run 1\njob j\nrun r\nfirst-version 3\nnodes 1\npack-versions 8\nend\n",
                    back, why) == errc::corrupt);
}

TEST_CASE("a pack's name gives its node and versions, only in the form written", "[layout]")
{
    const auto name = pack_object("job", 65, "node.v1", 65, 70);
    CHECK(name == "job/packs/b00000065/node.v1.v00000065-00000070");
    const auto p = parse_pack_name("node.v1.v00000065-00000070");
    REQUIRE(p);
    CHECK(p->node == "node.v1");
    CHECK(p->first == 65);
    CHECK(p->last == 70);
    CHECK(parse_pack_last("node.v1.v00000065-00000070") == 70u);
    for (const char* bad : {"nodeA.v65-70", "nodeA.v00000070-00000065", ".v00000001-00000002",
                            "nodeA.v00000001-00000002x", "nodeA.v00000001", "nodeA",
                            "nodeA.v00000000-00000002"})
        CHECK_FALSE(parse_pack_name(bad));
}
