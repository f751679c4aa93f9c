// The catalog's readers (catalog.hpp, inventory.hpp, verify.hpp) find a
// version in a pack as they find one in its own directory, and refuse a
// damaged pack or bucket record in words. The packs are built with the
// pack writer (store/pack.hpp) and put in a real directory store.
#include <catch2/catch.hpp>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "crc32c.hpp"
#include "errors.hpp"
#include "process.hpp"
#include "store/backend.hpp"
#include "store/catalog.hpp"
#include "store/counting.hpp"
#include "store/inventory.hpp"
#include "store/journal.hpp"
#include "store/pack.hpp"
#include "store/verify.hpp"

using namespace iofwd;
using namespace iofwd::store;

namespace {

std::vector<std::byte> bytes_of(std::uint64_t version, const std::string& node,
                                std::uint32_t rank)
{
    // Sizes differ by version and rank, and one part is empty.
    const std::size_t n = version == 4 && rank == 1 ? 0 : 1000 * version + 13 * rank + node.size();
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i)
        b[i] = static_cast<std::byte>((i * 37 + version * 11 + rank * 5 + node[1]) & 0xff);
    return b;
}

const std::map<std::string, std::uint32_t> node_ranks{{"na", 2}, {"nb", 1}};

// Node `node`'s pack of versions first .. last in bucket `bucket`; the
// crc32c of its index.
std::uint32_t put_pack(backend& st, std::uint64_t bucket, const std::string& node,
                       std::uint64_t first, std::uint64_t last, unsigned salt = 0)
{
    std::vector<std::vector<std::byte>> data;
    std::vector<pack_input> inputs;
    const auto ranks = node_ranks.at(node);
    for (auto v = first; v <= last; ++v)
        for (std::uint32_t r = 0; r < ranks; ++r) {
            data.push_back(bytes_of(v, node, r));
            if (salt && !data.back().empty())
                data.back()[0] ^= static_cast<std::byte>(salt);
        }
    std::size_t i = 0;
    for (auto v = first; v <= last; ++v)
        for (std::uint32_t r = 0; r < ranks; ++r)
            inputs.push_back({v, r, ranks, data[i++]});
    std::vector<std::byte> pack;
    std::string why;
    REQUIRE_FALSE(build_pack("job", node, inputs, pack, why));
    REQUIRE_FALSE(st.put(pack_object("job", bucket, node, first, last), pack));
    std::uint64_t offset = 0, length = 0;
    std::uint32_t crc = 0;
    REQUIRE_FALSE(parse_pack_trailer(std::span(pack).last(pack_trailer_size), pack.size(), offset,
                                     length, crc, why));
    return crc;
}

void put_text(backend& st, const std::string& name, const std::string& text)
{
    REQUIRE_FALSE(st.put(name, std::as_bytes(std::span(text))));
}

// Node `node`'s part of version `v` in the version's directory: its
// objects and manifest; returns the manifest and its text's crc32c.
std::uint32_t put_own_part(backend& st, std::uint64_t v, const std::string& node, manifest& m)
{
    const auto ranks = node_ranks.at(node);
    m = {"job", node, v, ranks, {}};
    for (std::uint32_t r = 0; r < ranks; ++r) {
        const auto b = bytes_of(v, node, r);
        REQUIRE_FALSE(st.put(data_object("job", v, node, r), b));
        m.entries.push_back({r, b.size(), crc32c(b)});
    }
    const auto text = format_manifest(m);
    put_text(st, manifest_object("job", v, node), text);
    return crc32c(std::as_bytes(std::span(text)));
}

// Version `v` in its own directory, both nodes, complete.
void put_own_version(backend& st, std::uint64_t v)
{
    for (const auto& [node, ranks] : node_ranks) {
        manifest m;
        const auto crc = put_own_part(st, v, node, m);
        bool completed = false;
        std::string why;
        REQUIRE_FALSE(try_complete(st, m, crc, 2, completed, why));
    }
}

// A directory store of its own, empty.
struct fresh_store {
    test::temp_dir tmp;
    std::unique_ptr<backend> st;
    fresh_store()
    {
        std::string why;
        REQUIRE_FALSE(open(tmp / "store", st, why));
    }
};

// The store of these tests: version 1 in its own directory; versions 3 to 6
// in packs of bucket 3 (node na in two packs, 3-4 and 5-6; nb in one,
// 3-6), of which the bucket's record says 3 to 5 are complete (6 is
// written, as a node does before the others have).
struct packed_store {
    test::temp_dir tmp;
    std::unique_ptr<backend> st;
    bucket_record record;

    packed_store()
    {
        std::string why;
        REQUIRE_FALSE(open(tmp / "store", st, why));
        put_own_version(*st, 1);
        record = {"job", 3, 3, 5, 2, {}};
        record.parts.push_back({"na", 2, 3, 4, put_pack(*st, 3, "na", 3, 4)});
        record.parts.push_back({"na", 2, 5, 6, put_pack(*st, 3, "na", 5, 6)});
        record.parts.push_back({"nb", 1, 3, 6, put_pack(*st, 3, "nb", 3, 6)});
        put_record();
    }
    void put_record()
    {
        put_text(*st, bucket_complete_object("job", 3, record.last), format_bucket(record));
    }
    std::string path(const std::string& name) const { return tmp / ("store/" + name); }
};

// Every rank's bytes of `version` read through the catalog equal those
// written.
void check_reads(backend& st, std::uint64_t version)
{
    version_info info;
    std::string why;
    REQUIRE_FALSE(load_version(st, "job", version, info, why));
    REQUIRE(info.record.nodes.size() == 2);
    CHECK(info.record.version == version);
    REQUIRE(info.manifests.size() == 2);
    REQUIRE(info.places.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
        const auto& m = info.manifests[i];
        CHECK(m.node == (i == 0 ? "na" : "nb"));
        CHECK(m.version == version);
        REQUIRE(m.entries.size() == node_ranks.at(m.node));
        for (std::uint32_t r = 0; r < m.ranks; ++r) {
            const auto want = bytes_of(version, m.node, r);
            CHECK(m.entries[r].size == want.size());
            CHECK(m.entries[r].crc32c == crc32c(want));
            std::vector<std::byte> got(want.size() + 3);
            REQUIRE_FALSE(read_checked(st, info.places[i][r], m.entries[r].size,
                                       m.entries[r].crc32c, got, why));
            got.resize(want.size());
            CHECK(got == want);
        }
    }
}

}  // namespace

TEST_CASE("versions in packs are found, read and checked as versions in directories are",
          "[packed]")
{
    packed_store s;
    auto& st = *s.st;
    std::string why;

    std::vector<std::uint64_t> versions;
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5});
    REQUIRE_FALSE(job_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5});
    REQUIRE_FALSE(packed_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{3, 4, 5});

    for (const std::uint64_t v : {1, 3, 4, 5})
        check_reads(st, v);

    // A version in a pack: the places are parts of the node's pack.
    version_info info;
    REQUIRE_FALSE(load_node(st, "job", 5, "nb", info, why));
    REQUIRE(info.manifests.size() == 1);
    CHECK(info.manifests[0].node == "nb");
    REQUIRE(info.places[0].size() == 1);
    CHECK(info.places[0][0].in_pack);
    CHECK(info.places[0][0].object == pack_object("job", 3, "nb", 3, 6));
    REQUIRE_FALSE(load_node(st, "job", 1, "na", info, why));
    REQUIRE(info.places[0].size() == 2);
    CHECK_FALSE(info.places[0][1].in_pack);
    CHECK(info.places[0][1].object == data_object("job", 1, "na", 1));

    bool yes = false;
    for (const std::uint64_t v : {1, 3, 5}) {
        REQUIRE_FALSE(committed(st, "job", v, yes));
        CHECK(yes);
    }
    for (const std::uint64_t v : {2, 6, 7}) {
        REQUIRE_FALSE(committed(st, "job", v, yes));
        CHECK_FALSE(yes);
    }
    CHECK(load_version(st, "job", 6, info, why) == errc::not_found);

    std::uint64_t newest = 0;
    std::string skipped;
    REQUIRE_FALSE(latest(st, "job", true, newest, skipped, why));
    CHECK(newest == 5);
    CHECK(skipped.empty());

    verify_report report;
    REQUIRE_FALSE(verify_job(st, "job", {}, {}, report, why));
    REQUIRE(report.versions.size() == 4);
    for (const auto& r : report.versions) {
        CHECK(r.state == version_state::complete);
        CHECK(r.intact());
        CHECK(r.objects.size() == 3);
    }

    version_entry e;
    REQUIRE_FALSE(inspect_version(st, "job", 4, e));
    CHECK(e.state == version_state::complete);
    CHECK(e.nodes == 2);
    CHECK(e.ranks == 3);
    CHECK(e.bytes == bytes_of(4, "na", 0).size() + bytes_of(4, "nb", 0).size());

    // A version in a pack never goes alone: refused, and still whole.
    CHECK(remove_version(st, "job", 4) == std::errc::operation_not_supported);
    check_reads(st, 4);
}

TEST_CASE("a damaged pack or bucket record is refused in words and completes nothing",
          "[packed]")
{
    packed_store s;
    auto& st = *s.st;
    std::string why;
    version_info info;
    std::vector<std::uint64_t> versions;

    SECTION("a changed byte in a part fails its read and only its version's check")
    {
        REQUIRE_FALSE(load_node(st, "job", 5, "na", info, why));
        const auto at = info.places[0][1];
        const auto size = info.manifests[0].entries[1].size;
        {
            std::fstream f(s.path(at.object), std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(static_cast<std::streamoff>(at.offset + size - 1));
            f.put('\x5a' ^ static_cast<char>(bytes_of(5, "na", 1).back()));
        }
        std::vector<std::byte> got(size);
        CHECK(read_checked(st, at, size, info.manifests[0].entries[1].crc32c, got, why) ==
              errc::corrupt);
        CHECK_THAT(why, Catch::Contains("fails its checksum") &&
                            Catch::Contains(pack_object("job", 3, "na", 5, 6)));
        verify_report report;
        REQUIRE_FALSE(verify_job(st, "job", {}, {}, report, why));
        REQUIRE(report.versions.size() == 4);
        for (const auto& r : report.versions) {
            CAPTURE(r.version);
            CHECK(r.intact() == (r.version != 5));
        }
        const auto& bad = report.versions[3].objects[1];
        CHECK_FALSE(bad.intact);
        CHECK(bad.what.kind == problem::checksum);
        CHECK(bad.name == pack_object("job", 3, "na", 5, 6) + " (version 5 rank 1)");
    }
    SECTION("a pack written again after the record is refused by its index's checksum")
    {
        put_pack(st, 3, "na", 3, 4, 0x40);
        damage what;
        CHECK(load_version(st, "job", 3, info, why, &what) == errc::corrupt);
        CHECK_THAT(why, Catch::Contains("its bucket's record says"));
        CHECK(what.object == pack_object("job", 3, "na", 3, 4));
        CHECK(what.kind == problem::record);
        check_reads(st, 5);  // na's other pack is whole
    }
    SECTION("a torn pack is refused")
    {
        std::filesystem::resize_file(s.path(pack_object("job", 3, "nb", 3, 6)), 3000);
        CHECK(load_node(st, "job", 4, "nb", info, why) == errc::corrupt);
        CHECK_THAT(why, Catch::Contains("pack") && Catch::Contains("trailer"));
        REQUIRE_FALSE(load_node(st, "job", 4, "na", info, why));  // na's pack is whole
    }
    SECTION("a pack that is missing is refused")
    {
        REQUIRE(std::filesystem::remove(s.path(pack_object("job", 3, "nb", 3, 6))));
        CHECK(load_version(st, "job", 3, info, why) == errc::corrupt);
        CHECK_THAT(why, Catch::Contains("listed as complete is unreadable"));
    }
    SECTION("without the bucket's record none of its versions is complete")
    {
        REQUIRE(std::filesystem::remove(s.path(bucket_complete_object("job", 3, 5))));
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1});
        CHECK(load_version(st, "job", 4, info, why) == errc::not_found);
        bool yes = true;
        REQUIRE_FALSE(committed(st, "job", 4, yes));
        CHECK_FALSE(yes);
    }
    SECTION("the record of the most versions is the bucket's, whatever came after it")
    {
        // A newer record that says 6 is complete too (na's second pack and
        // nb's pack hold it); then an older one, as a slow node writes it.
        s.record.last = 6;
        s.put_record();
        s.record.last = 4;
        s.record.parts.erase(s.record.parts.begin() + 1);
        s.put_record();
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5, 6});
        check_reads(st, 6);
        // A record whose name says another last version than its text is
        // not read: the newest that is, is the bucket's.
        put_text(st, bucket_complete_object("job", 3, 7), format_bucket(s.record));
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5, 6});
        CHECK(load_version(st, "job", 7, info, why) == errc::not_found);
    }
    SECTION("a record that does not parse is passed over for the one before it")
    {
        auto text = format_bucket(s.record);
        text.replace(text.find("versions 3 5"), 12, "versions 3 6");  // nb holds 6, na too
        put_text(st, bucket_complete_object("job", 3, 6), text.substr(0, text.size() - 4));
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5});
        check_reads(st, 4);
        bool yes = false;
        REQUIRE_FALSE(committed(st, "job", 6, yes));
        CHECK_FALSE(yes);
        // With no record that reads, none of the bucket's versions is
        // complete, and a reader says why.
        REQUIRE(std::filesystem::remove(s.path(bucket_complete_object("job", 3, 5))));
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1});
        damage what;
        CHECK(load_version(st, "job", 4, info, why, &what) == errc::corrupt);
        CHECK_THAT(why, Catch::Contains("COMPLETE.v00000006") && Catch::Contains("end line"));
        yes = true;
        REQUIRE_FALSE(committed(st, "job", 4, yes));
        CHECK_FALSE(yes);
    }
    SECTION("a bucket holds no version from the next bucket's first on")
    {
        // Bucket 5 (a directory, no record yet) starts inside bucket 3's
        // range: 5 is bucket 5's to complete, whatever bucket 3 says.
        REQUIRE(std::filesystem::create_directories(s.path(bucket_dir("job", 5))));
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1, 3, 4});
        CHECK(load_version(st, "job", 5, info, why) == errc::not_found);
        // Names not written the one way the layout writes them are not
        // buckets or records.
        REQUIRE(std::filesystem::remove(s.path(bucket_dir("job", 5))));
        REQUIRE(std::filesystem::create_directories(s.path("job/packs/b5")));
        std::filesystem::copy_file(s.path(bucket_complete_object("job", 3, 5)),
                                   s.path(bucket_dir("job", 3) + "/COMPLETE.v6"));
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5});
        std::uint64_t high = 0;
        REQUIRE_FALSE(highest_packed(st, "job", high));
        CHECK(high == 6);  // nb's pack of 3 to 6
    }
    SECTION("a record copied under another bucket's name is not that bucket's")
    {
        put_text(st, bucket_complete_object("job", 1, 5), format_bucket(s.record));
        CHECK(load_version(st, "job", 2, info, why) == errc::corrupt);
        CHECK_THAT(why, Catch::Contains("copied or moved"));
        // Bucket 3's versions are found in bucket 3, whatever bucket 1 holds.
        check_reads(st, 4);
    }
}

TEST_CASE("a bucket completes as far as every node's packs and manifests hold its versions",
          "[packed]")
{
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    std::vector<std::uint64_t> versions;
    std::uint64_t complete = 99;
    auto arrive = [&](const bucket_part& p, std::uint32_t nodes = 2) {
        return try_complete_bucket(st, "job", 3, p, nodes, complete, why);
    };
    auto complete_now = [&] {
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        return versions;
    };
    using list = std::vector<std::uint64_t>;

    // na's first pack: nb has not arrived, nothing is complete.
    const bucket_part na34{"na", 2, 3, 4, put_pack(st, 3, "na", 3, 4)};
    REQUIRE_FALSE(arrive(na34));
    CHECK(complete == 0);
    CHECK(complete_now().empty());
    // nb holds 3 to 6: versions 3 and 4 are held by both.
    REQUIRE_FALSE(arrive({"nb", 1, 3, 6, put_pack(st, 3, "nb", 3, 6)}));
    CHECK(complete == 4);
    CHECK(complete_now() == list{3, 4});
    check_reads(st, 3);
    check_reads(st, 4);
    // na's next pack holds 5 only.
    const bucket_part na55{"na", 2, 5, 5, put_pack(st, 3, "na", 5, 5)};
    REQUIRE_FALSE(arrive(na55));
    CHECK(complete == 5);
    // Version 6 is too large for na's pack: its objects and manifest, in
    // the version's directory. The version completes with nb's part in
    // nb's pack and na's in its directory.
    manifest m6;
    const auto crc6 = put_own_part(st, 6, "na", m6);
    REQUIRE_FALSE(arrive({"na", 2, 6, 6, crc6, true}));
    CHECK(complete == 6);
    CHECK(complete_now() == list{3, 4, 5, 6});
    check_reads(st, 6);
    version_info info;
    REQUIRE_FALSE(load_version(st, "job", 6, info, why));
    CHECK_FALSE(info.places[0][0].in_pack);
    CHECK(info.places[0][0].object == data_object("job", 6, "na", 0));
    CHECK(info.places[1][0].in_pack);
    // Its directory holds na's part and no COMPLETE: still complete for
    // the inventory and the verifier, and not removed alone.
    version_entry e;
    REQUIRE_FALSE(inspect_version(st, "job", 6, e));
    CHECK(e.state == version_state::complete);
    CHECK(e.ranks == 3);
    verify_report report;
    REQUIRE_FALSE(verify_job(st, "job", {6}, {}, report, why));
    REQUIRE(report.versions.size() == 1);
    CHECK(report.versions[0].intact());
    CHECK(report.versions[0].objects.size() == 3);
    CHECK(remove_version(st, "job", 6) == std::errc::operation_not_supported);
    bool packed = false;
    REQUIRE_FALSE(in_bucket(st, "job", 6, packed));
    CHECK(packed);
    REQUIRE_FALSE(in_bucket(st, "job", 7, packed));
    CHECK_FALSE(packed);
    // A retried arrival changes nothing; each record is its own object.
    REQUIRE_FALSE(arrive(na55));
    CHECK(complete == 6);
    std::vector<std::string> names;
    REQUIRE_FALSE(st.list(bucket_dir("job", 3) + "/", names));
    CHECK(names == std::vector<std::string>{"COMPLETE.v00000004", "COMPLETE.v00000005",
                                            "COMPLETE.v00000006", "na.v00000003-00000004",
                                            "na.v00000005-00000005", "nb.v00000003-00000006"});
    // A pack after a gap (7 missing on na): nothing more is complete, and
    // the arrival, which made no version's count reach 2, did not look.
    REQUIRE_FALSE(arrive({"na", 2, 8, 8, put_pack(st, 3, "na", 8, 8)}));
    CHECK(complete == 0);
    CHECK(complete_now() == list{3, 4, 5, 6});

    // The same part arriving again with another crc32c: refused in words,
    // nothing completes beyond what was.
    bucket_part liar = na55;
    liar.crc32c ^= 1;
    CHECK(arrive(liar) == errc::corrupt);
    CHECK_THAT(why, Catch::Contains("arrived twice with different parts"));
    CHECK(complete_now() == list{3, 4, 5, 6});
}

TEST_CASE("a bucket's tally is read by the arrival that completes a version, not by every one",
          "[packed]")
{
    // Four nodes, each arriving with a pack per version (the costliest
    // case: P packs per node and bucket), in turn; then out of order, with
    // a gap that a later pack fills. Before the keys, every arrival from
    // the fourth on read the whole tally: 29 reads of up to 32 arrivals.
    fresh_store fresh;
    counting_backend st(std::move(fresh.st));
    const std::vector<std::string> nodes{"n0", "n1", "n2", "n3"};
    std::string why;
    std::uint64_t complete = 0;
    auto arrive = [&](const std::string& node, std::uint64_t first, std::uint64_t last) {
        const bucket_part p{node, 1, first, last, static_cast<std::uint32_t>(first * 7 + last)};
        const auto before = st.counts();
        REQUIRE_FALSE(try_complete_bucket(st, "job", 1, p, 4, complete, why));
        return (st.counts() - before).arrival_reads;
    };
    for (std::uint64_t v = 1; v <= 8; ++v)
        for (std::size_t i = 0; i < nodes.size(); ++i) {
            // Only the last node of each version reads, and finds it complete.
            CHECK(arrive(nodes[i], v, v) == (i == 3 ? 1u : 0u));
            CHECK(complete == (i == 3 ? v : 0));
        }
    CHECK(st.counts().arrival_reads == 8);
    // Each read returned the arrivals so far: 4 per version.
    CHECK(st.counts().arrival_entries == 4 * (1 + 2 + 3 + 4 + 5 + 6 + 7 + 8));
    // n0 skips ahead to 10-11 (9 missing): 10 and 11 are nobody else's yet.
    CHECK(arrive("n0", 10, 11) == 0);
    CHECK(arrive("n1", 9, 11) == 0);
    CHECK(arrive("n2", 9, 11) == 0);
    // n3 makes the counts of 10 and 11 reach 4 and looks: n0's gap at 9
    // keeps them, so 8 is the last complete.
    CHECK(arrive("n3", 9, 11) == 1);
    CHECK(complete == 8);
    // A retry is counted once (9 stays at 3), but 11's count is 4: it looks.
    CHECK(arrive("n3", 9, 11) == 1);
    CHECK(complete == 8);
    // n0 fills 9: its key makes 9's count 4, and the look finds 11.
    CHECK(arrive("n0", 9, 9) == 1);
    CHECK(complete == 11);
    std::vector<std::uint64_t> versions;
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    const auto root = std::filesystem::path(fresh.tmp / "store");
    CHECK(std::filesystem::is_directory(root / bucket_dir("job", 1) / ".ARRIVED" / ".keys"));
    // A node alone keeps no tally while its parts follow one another: each
    // is recorded at once with what the newest record holds.
    const auto solo = st.counts();
    REQUIRE_FALSE(try_complete_bucket(st, "solo", 1, {"n0", 1, 1, 2, 5}, 1, complete, why));
    CHECK(complete == 2);
    REQUIRE_FALSE(try_complete_bucket(st, "solo", 1, {"n0", 1, 3, 3, 6}, 1, complete, why));
    CHECK(complete == 3);
    CHECK((st.counts() - solo).arrives == 0);
    CHECK_FALSE(std::filesystem::exists(root / bucket_dir("solo", 1) / ".ARRIVED"));
    // A part recorded already (a daemon that stopped before it heard) is
    // found there; the same versions with another checksum are refused.
    REQUIRE_FALSE(try_complete_bucket(st, "solo", 1, {"n0", 1, 3, 3, 6}, 1, complete, why));
    CHECK(complete == 3);
    CHECK(try_complete_bucket(st, "solo", 1, {"n0", 1, 3, 3, 7}, 1, complete, why) ==
          errc::corrupt);
    CHECK(why == "node n0 brings '1+3+1+00000007' for versions from 3 to bucket 1 of job solo, "
                 "whose record up to version 3 says '1+3+1+00000006': the same versions with "
                 "other bytes; the part stays in the node's journal (`iofwd ls solo` shows the "
                 "bucket)");
    // A part after a gap waits at the tally, and the one that fills the gap
    // records both, with what the record held.
    REQUIRE_FALSE(try_complete_bucket(st, "solo", 1, {"n0", 1, 6, 8, 9}, 1, complete, why));
    CHECK(complete == 3);  // what is complete: not this part yet
    CHECK(std::filesystem::is_directory(root / bucket_dir("solo", 1) / ".ARRIVED"));
    CHECK_FALSE(std::filesystem::exists(root / bucket_dir("solo", 1) / ".ARRIVED" / ".keys"));
    std::map<std::string, std::vector<bucket_part>> arrived;
    REQUIRE_FALSE(bucket_arrivals(st, "solo", 1, arrived, why));
    const std::vector<bucket_part> so_far{
        {"n0", 1, 1, 2, 5}, {"n0", 1, 3, 3, 6}, {"n0", 1, 6, 8, 9}};
    CHECK(arrived == std::map<std::string, std::vector<bucket_part>>{{"n0", so_far}});
    REQUIRE_FALSE(try_complete_bucket(st, "solo", 1, {"n0", 1, 4, 5, 10}, 1, complete, why));
    CHECK(complete == 8);
    std::string text;
    REQUIRE_FALSE(read_all(st, bucket_complete_object("solo", 1, 8), text));
    bucket_record rec;
    REQUIRE_FALSE(parse_bucket(text, rec, why));
    CHECK(rec.nodes == 1);
    CHECK(rec.parts == std::vector<bucket_part>{{"n0", 1, 1, 2, 5},
                                                {"n0", 1, 3, 3, 6},
                                                {"n0", 1, 4, 5, 10},
                                                {"n0", 1, 6, 8, 9}});
    // A second node that also takes the job for one is refused.
    CHECK(try_complete_bucket(st, "solo", 1, {"n1", 1, 9, 9, 11}, 1, complete, why) ==
          errc::rank_mismatch);
    CHECK(why == "bucket 1 of job solo holds the packs or parts of node n0 besides node n1, "
                 "which takes the job for one of 1 node: two jobs under one name, or nodes that "
                 "disagree on IOFWD_NODES");
    // So is one that finds only the other's pack, not yet recorded: each
    // node's pack is durable before it looks, so the later to look sees
    // the other's.
    put_text(st, pack_object("race", 1, "n0", 1, 2), "n0's pack");
    CHECK(try_complete_bucket(st, "race", 1, {"n1", 1, 1, 2, 5}, 1, complete, why) ==
          errc::rank_mismatch);
    CHECK(why == "bucket 1 of job race holds the packs or parts of node n0 besides node n1, "
                 "which takes the job for one of 1 node: two jobs under one name, or nodes that "
                 "disagree on IOFWD_NODES");
    REQUIRE_FALSE(try_complete_bucket(st, "race", 1, {"n0", 1, 1, 2, 4}, 1, complete, why));
    CHECK(complete == 2);
    // A manifest, which leaves nothing in the bucket by which another node
    // would see this one, waits at the tally as with several nodes.
    REQUIRE_FALSE(try_complete_bucket(st, "race", 1, {"n0", 1, 3, 3, 12, true}, 1, complete, why));
    CHECK(complete == 3);
    CHECK(std::filesystem::is_directory(root / bucket_dir("race", 1) / ".ARRIVED"));
    // A newest record that does not read stops the bucket in words, not
    // passed over for an older one that lacks its parts.
    REQUIRE_FALSE(try_complete_bucket(st, "alone", 1, {"n0", 1, 1, 2, 5}, 1, complete, why));
    REQUIRE_FALSE(try_complete_bucket(st, "alone", 1, {"n0", 1, 3, 3, 6}, 1, complete, why));
    {
        std::ofstream(root / bucket_complete_object("alone", 1, 3), std::ios::trunc) << "torn";
    }
    CHECK(try_complete_bucket(st, "alone", 1, {"n0", 1, 4, 4, 7}, 1, complete, why) ==
          errc::corrupt);
    CHECK(why == "the newest record of bucket 1 of job alone does not read "
                 "(alone/packs/b00000001/COMPLETE.v00000003: the bucket record does not end with "
                 "a line break (torn?)); the bucket's later versions wait, kept in the node's "
                 "journal, until it is restored");
    CHECK(bucket_arrivals(st, "alone", 1, arrived, why) == errc::corrupt);
    // A part waiting at the tally that differs from what the newest record
    // holds for the same versions: refused when the tally is read.
    REQUIRE_FALSE(try_complete_bucket(st, "both", 1, {"n0", 1, 1, 2, 5}, 1, complete, why));
    std::uint64_t count = 0;
    REQUIRE_FALSE(st.arrive(bucket_arrivals_object("both", 1), "n0.1", "1+1+2+00000009", count));
    CHECK(try_complete_bucket(st, "both", 1, {"n0", 1, 4, 4, 7}, 1, complete, why) ==
          errc::corrupt);
    CHECK(why == "node n0 brings '1+1+2+00000009' for versions from 1 to bucket 1 of job both, "
                 "whose record up to version 2 says '1+1+2+00000005': the same versions with "
                 "other bytes; the part stays in the node's journal (`iofwd ls both` shows the "
                 "bucket)");
}

TEST_CASE("rm takes one version out of its bucket by a mark every reader honours",
          "[packed]")
{
    // Bucket 3 completes 3 to 6: 3-5 in both nodes' packs, 6 with na's
    // part in its own directory (too large for a pack).
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    std::uint64_t complete = 0;
    REQUIRE_FALSE(try_complete_bucket(st, "job", 3, {"na", 2, 3, 5, put_pack(st, 3, "na", 3, 5)},
                                      2, complete, why));
    REQUIRE_FALSE(try_complete_bucket(st, "job", 3, {"nb", 1, 3, 6, put_pack(st, 3, "nb", 3, 6)},
                                      2, complete, why));
    manifest m6;
    REQUIRE_FALSE(
        try_complete_bucket(st, "job", 3, {"na", 2, 6, 6, put_own_part(st, 6, "na", m6), true}, 2,
                            complete, why));
    REQUIRE(complete == 6);
    using list = std::vector<std::uint64_t>;
    const auto complete_now = [&] {
        list versions;
        REQUIRE_FALSE(complete_versions(st, "job", versions));
        return versions;
    };
    const auto bucket_names = [&] {
        std::vector<std::string> names;
        REQUIRE_FALSE(st.list(bucket_dir("job", 3) + "/", names));
        return names;
    };
    const auto pack_size = [&] {
        std::uint64_t size = 0;
        REQUIRE_FALSE(st.size(pack_object("job", 3, "nb", 3, 6), size));
        return size;
    };
    const auto nb_pack = pack_size();

    const auto pack_gone = [&](const char* node, std::uint64_t first, std::uint64_t last) {
        return !std::filesystem::exists(std::filesystem::path(fresh.tmp / "store") /
                                        pack_object("job", 3, node, first, last));
    };
    packs_freed freed;
    using names = std::vector<std::string>;

    SECTION("a packed version in the middle")
    {
        REQUIRE_FALSE(remove_packed_version(st, "job", 4, freed));
        // Both nodes' packs hold versions still listed: nothing freed.
        CHECK(freed.packs.empty());
        CHECK(freed.bytes == 0);
        CHECK(freed.kept ==
              names{pack_object("job", 3, "na", 3, 5), pack_object("job", 3, "nb", 3, 6)});
        CHECK(freed.failed.empty());
        CHECK(complete_now() == list{3, 5, 6});
        bool yes = true;
        REQUIRE_FALSE(committed(st, "job", 4, yes));
        CHECK_FALSE(yes);
        version_info info;
        CHECK(load_version(st, "job", 4, info, why) == errc::not_found);
        bool packed = true;
        REQUIRE_FALSE(in_bucket(st, "job", 4, packed));
        CHECK_FALSE(packed);
        // Its writer's own read finds nothing either.
        bytes_place at;
        std::uint64_t size = 0;
        std::uint32_t crc = 0;
        CHECK(find_own_packed(st, "job", 4, "nb", 0, at, size, crc, why) == errc::not_found);
        REQUIRE_FALSE(find_own_packed(st, "job", 5, "nb", 0, at, size, crc, why));
        CHECK(size == bytes_of(5, "nb", 0).size());
        for (const std::uint64_t v : {3, 5, 6})
            check_reads(st, v);
        std::uint64_t newest = 0;
        std::string skipped;
        REQUIRE_FALSE(latest(st, "job", true, newest, skipped, why));
        CHECK(newest == 6);
        verify_report report;
        REQUIRE_FALSE(verify_job(st, "job", {}, {}, report, why));
        CHECK(report.versions.size() == 3);
        // The mark is an empty object; the packs keep their bytes.
        std::uint64_t size_of_mark = 1;
        REQUIRE_FALSE(st.size(bucket_removed_object("job", 3, 4), size_of_mark));
        CHECK(size_of_mark == 0);
        CHECK(pack_size() == nb_pack);
        // Again: the version is no longer there.
        CHECK(remove_packed_version(st, "job", 4, freed) == errc::not_found);
    }
    SECTION("a pack whose every version is removed goes, and only that one")
    {
        std::uint64_t na_pack = 0;
        REQUIRE_FALSE(st.size(pack_object("job", 3, "na", 3, 5), na_pack));
        for (const std::uint64_t v : {3, 5}) {
            REQUIRE_FALSE(remove_packed_version(st, "job", v, freed));
            CHECK(freed.packs.empty());
        }
        // 4 was the last version na's pack 3-5 held that was still listed.
        freed = {};
        REQUIRE_FALSE(remove_packed_version(st, "job", 4, freed));
        CHECK(freed.packs == names{pack_object("job", 3, "na", 3, 5)});
        CHECK(freed.bytes == na_pack);
        CHECK(freed.kept == names{pack_object("job", 3, "nb", 3, 6)});  // it holds 6 too
        CHECK(pack_gone("na", 3, 5));
        CHECK_FALSE(pack_gone("nb", 3, 6));
        CHECK(pack_size() == nb_pack);
        // 6 is whole: na's part in its own directory, nb's in its pack.
        CHECK(complete_now() == list{6});
        check_reads(st, 6);
        verify_report report;
        REQUIRE_FALSE(verify_job(st, "job", {}, {}, report, why));
        REQUIRE(report.versions.size() == 1);
        CHECK(report.versions[0].state == version_state::complete);
        CHECK(report.damaged == 0);
        // The last version: nb's pack goes with it, and na's directory.
        freed = {};
        REQUIRE_FALSE(remove_packed_version(st, "job", 6, freed));
        CHECK(freed.packs == names{pack_object("job", 3, "nb", 3, 6)});
        CHECK(freed.bytes == nb_pack);
        CHECK(freed.kept.empty());
        CHECK(pack_gone("nb", 3, 6));
        CHECK_FALSE(std::filesystem::exists(fresh.tmp / "store/job/v00000006"));
        CHECK(complete_now().empty());
        // The bucket's records and marks stay, so that the versions stay
        // settled (a journal's record of them is never committed again).
        std::vector<std::uint64_t> removed;
        REQUIRE_FALSE(hidden_versions(st, "job", removed));
        CHECK(removed == list{3, 4, 5, 6});
        std::uint64_t high = 0;
        REQUIRE_FALSE(highest_packed(st, "job", high));
        CHECK(high == 6);
    }
    SECTION("a version removed while verify checks it is not called damaged")
    {
        // An object missing from a version still complete is damage.
        const auto na6 = std::filesystem::path(fresh.tmp / "store") / data_object("job", 6, "na", 1);
        const auto na6_copy = std::filesystem::path(fresh.tmp / "na6");
        std::filesystem::copy_file(na6, na6_copy);
        REQUIRE(std::filesystem::remove(na6));
        verify_report report;
        REQUIRE_FALSE(verify_job(st, "job", {6}, {}, report, why));
        REQUIRE(report.versions.size() == 1);
        CHECK(report.versions[0].state == version_state::complete);
        CHECK(report.damaged == 1);
        std::filesystem::copy_file(na6_copy, na6);
        // Versions 3 and 6 are checked one object after the other; while
        // the first is read, 6 goes (its mark, and na's part in its own
        // directory): verify finds that part missing, and 6 no longer
        // complete.
        verify_options o;
        o.threads = 1;
        bool once = false;
        o.content = [&](const manifest& m, const manifest_entry&, std::span<const std::byte>,
                        std::uint64_t, std::string&, damage&) {
            if (m.version == 3 && !once) {
                once = true;
                packs_freed f;
                CHECK_FALSE(remove_packed_version(st, "job", 6, f));
            }
            return true;
        };
        REQUIRE_FALSE(verify_job(st, "job", {3, 6}, o, report, why));
        REQUIRE(once);
        REQUIRE(report.versions.size() == 2);
        CHECK(report.versions[0].intact());
        CHECK(report.versions[1].state == version_state::incomplete);
        CHECK(report.versions[1].why == "removed while it was checked: retention, or iofwd rm");
        CHECK(report.damaged == 0);

    }
    SECTION("a pack that does not go is said in words and left")
    {
        REQUIRE_FALSE(remove_packed_version(st, "job", 3, freed));
        REQUIRE_FALSE(remove_packed_version(st, "job", 5, freed));
        // Something under na's pack's name that remove() cannot take.
        const auto na = std::filesystem::path(fresh.tmp / "store") / pack_object("job", 3, "na", 3, 5);
        std::filesystem::remove(na);
        std::filesystem::create_directories(na / "x");
        freed = {};
        REQUIRE_FALSE(remove_packed_version(st, "job", 4, freed));
        CHECK(freed.packs.empty());
        CHECK(freed.kept == names{pack_object("job", 3, "nb", 3, 6)});  // not na's: it failed
        CHECK_THAT(freed.failed, Catch::Contains("pack " + pack_object("job", 3, "na", 3, 5) +
                                                 ", which held only versions removed, did not "
                                                 "go: "));
        CHECK(complete_now() == list{6});
    }
    SECTION("the newest, whose node's part has its own directory")
    {
        REQUIRE(std::filesystem::exists(fresh.tmp / "store/job/v00000006"));
        REQUIRE_FALSE(remove_packed_version(st, "job", 6, freed));
        CHECK(freed.packs.empty());  // na's 3-5 and nb's 3-6 hold versions listed
        CHECK(complete_now() == list{3, 4, 5});
        CHECK_FALSE(std::filesystem::exists(fresh.tmp / "store/job/v00000006"));
        std::uint64_t newest = 0;
        std::string skipped;
        REQUIRE_FALSE(latest(st, "job", true, newest, skipped, why));
        CHECK(newest == 5);
        // A later arrival rewrites the record; the mark still holds.
        REQUIRE_FALSE(try_complete_bucket(st, "job", 3, {"na", 2, 7, 7, put_pack(st, 3, "na", 7, 7)},
                                          2, complete, why));
        REQUIRE_FALSE(try_complete_bucket(st, "job", 3, {"nb", 1, 7, 7, put_pack(st, 3, "nb", 7, 7)},
                                          2, complete, why));
        CHECK(complete == 7);
        CHECK(complete_now() == list{3, 4, 5, 7});
    }
    SECTION("a mark that is not empty, or not an object, hides nothing")
    {
        put_text(st, bucket_removed_object("job", 3, 4), "x");
        std::filesystem::create_directory(fresh.tmp / "store/job/packs/b00000003/REMOVED.v00000005");
        CHECK(complete_now() == list{3, 4, 5, 6});
    }
    SECTION("retention and the bucket's removal take the marks along")
    {
        REQUIRE_FALSE(remove_packed_version(st, "job", 5, freed));
        std::vector<std::uint64_t> removed;
        std::vector<std::uint64_t> doomed;
        std::vector<bucket_span> doomed_buckets;
        retirement retire;
        // Keep 1: 3 and 4 go by retention's mark, which reaches 5, gone already.
        REQUIRE_FALSE(prune_plan(st, "job", 1, UINT64_MAX, doomed, doomed_buckets, retire));
        CHECK(doomed == list{3, 4});
        REQUIRE_FALSE(prune_exactly(st, "job", doomed, doomed_buckets, retire, removed));
        CHECK(complete_now() == list{6});
        const auto names = bucket_names();
        CHECK(std::count(names.begin(), names.end(), "REMOVED.v00000005") == 1);
        INFO(fmt::format("{}", fmt::join(names, " ")));
        CHECK(std::count(names.begin(), names.end(), "RETIRED.v00000005") == 1);
        // na's pack held 3-5, all hidden now: gone; nb's holds 6, kept.
        CHECK(pack_gone("na", 3, 5));
        CHECK_FALSE(pack_gone("nb", 3, 6));
        check_reads(st, 6);
        // Then rm of the last one: no complete version is left to be older
        // than the retired ones, and na's pack of them is gone; a record
        // of them in na's journal is settled still, by the marks (else the
        // next claim would pack 3-5 again, beside na's arrival of 3-5).
        REQUIRE_FALSE(remove_packed_version(st, "job", 6, freed));
        CHECK(complete_now().empty());
        list hidden;
        REQUIRE_FALSE(hidden_versions(st, "job", hidden));
        CHECK(hidden == list{3, 4, 5, 6});
        for (const std::uint64_t v : {3, 4, 5, 6}) {
            const journal::record r{"job", "na", v, 0, 2, 2, 3, 0, {}};
            CHECK(standing(r, "job", "na", list{}, hidden) == record_standing::settled);
        }
        const journal::record seven{"job", "na", 7, 0, 2, 2, 3, 0, {}};
        CHECK(standing(seven, "job", "na", list{}, hidden) == record_standing::pending);
        bool gone = false;
        REQUIRE_FALSE(remove_bucket(st, "job", {3, UINT64_MAX}, gone));
        CHECK(complete_now().empty());
        CHECK_FALSE(std::filesystem::exists(fresh.tmp / "store/job/packs/b00000003"));
    }
}

TEST_CASE("a version a node skipped is not complete, and the bucket goes on past it",
          "[packed]")
{
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    std::vector<std::uint64_t> versions;
    std::uint64_t complete = 99;
    auto arrive = [&](const bucket_part& p) {
        return try_complete_bucket(st, "job", 3, p, 2, complete, why);
    };
    using list = std::vector<std::uint64_t>;
    // na holds 3 to 6; nb holds 3, skips 4 (it will never have it), holds
    // 5 and 6.
    REQUIRE_FALSE(arrive({"na", 2, 3, 6, put_pack(st, 3, "na", 3, 6)}));
    REQUIRE_FALSE(arrive({"nb", 1, 3, 3, put_pack(st, 3, "nb", 3, 3)}));
    CHECK(complete == 3);
    REQUIRE_FALSE(arrive({"nb", 1, 4, 4, 0, false, true}));
    CHECK(complete == 4);
    REQUIRE_FALSE(arrive({"nb", 1, 5, 6, put_pack(st, 3, "nb", 5, 6)}));
    CHECK(complete == 6);
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == list{3, 5, 6});
    check_reads(st, 5);
    version_info info;
    CHECK(load_version(st, "job", 4, info, why) == errc::not_found);
    bool packed = true;
    REQUIRE_FALSE(in_bucket(st, "job", 4, packed));
    CHECK_FALSE(packed);
    std::string text;
    REQUIRE_FALSE(read_all(st, bucket_complete_object("job", 3, 6), text));
    CHECK(text.rfind("iofwd-bucket 2\n", 0) == 0);
    CHECK(text.find("\nskip nb 1 4\n") != std::string::npos);
    // A skip where the node already arrived with a part of that version
    // (same member, another note) is refused.
    CHECK(arrive({"nb", 1, 3, 3, 0, false, true}) == errc::corrupt);
    // A skip of more than one version cannot arrive.
    CHECK(arrive({"na", 2, 7, 8, 0, false, true}) == errc::invalid_argument);
}

TEST_CASE("a bucket's versions every node brought wait behind a gap a node's next daemon skips",
          "[packed]")
{
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    std::uint64_t complete = 0;
    auto arrive = [&](const bucket_part& p) {
        return try_complete_bucket(st, "job", 3, p, 2, complete, why);
    };
    using list = std::vector<std::uint64_t>;
    bucket_wait w;
    // Nothing arrived: nothing waits.
    REQUIRE_FALSE(bucket_waiting(st, "job", 3, w, why));
    CHECK((w.whole.empty() && w.gaps.empty()));
    // Both nodes hold 3; na holds 4 to 7, nb 5 and 6 but not 4 (a daemon
    // that stopped while committing it).
    REQUIRE_FALSE(arrive({"na", 2, 3, 3, put_pack(st, 3, "na", 3, 3)}));
    REQUIRE_FALSE(arrive({"nb", 1, 3, 3, put_pack(st, 3, "nb", 3, 3)}));
    REQUIRE(complete == 3);
    REQUIRE_FALSE(arrive({"na", 2, 4, 7, put_pack(st, 3, "na", 4, 7)}));
    REQUIRE_FALSE(arrive({"nb", 1, 5, 6, put_pack(st, 3, "nb", 5, 6)}));
    CHECK(complete == 3);
    REQUIRE_FALSE(arrive({"nb", 1, 8, 8, put_pack(st, 3, "nb", 8, 8)}));
    REQUIRE_FALSE(bucket_waiting(st, "job", 3, w, why));
    CHECK(w.bucket == 3);
    CHECK(w.nodes == 2);           // the record's
    CHECK(w.whole == list{5, 6});  // 7 and 8: one node's each
    CHECK(w.gaps == list{4});
    CHECK(w.lacking == std::vector<std::string>{"nb"});  // not na, which lacks only 8
    CHECK(describe_wait(w) ==
          "it waits in bucket 3 for version 4, which node nb lacks: the node's next daemon "
          "skips it when the job runs there again (in a run with a name, IOFWD_RUN), and then "
          "it completes");
    // nb skips 4: 5 and 6 complete; 7 and 8 wait for no gap.
    REQUIRE_FALSE(arrive({"nb", 1, 4, 4, 0, false, true}));
    CHECK(complete == 6);
    REQUIRE_FALSE(bucket_waiting(st, "job", 3, w, why));
    CHECK((w.whole.empty() && w.gaps.empty() && w.lacking.empty()));
    // A bucket of packs with no record and no manifest (its first version
    // lost): nothing says the job's nodes, not a single claim (a node that
    // has not started claims nothing), nor a run's record (the newest named
    // run before it need not be the one that numbered it).
    std::unique_ptr<claim> held;
    REQUIRE_FALSE(st.claim_job("job", "na", held));
    REQUIRE_FALSE(try_complete_bucket(st, "job", 9, {"na", 2, 10, 11, put_pack(st, 9, "na", 10, 11)},
                                      1, complete, why));
    CHECK(complete == 0);
    run_record run;
    REQUIRE_FALSE(join_run(st, "job", "late", 1, "na", 9, 4, run, why));
    REQUIRE_FALSE(bucket_waiting(st, "job", 9, w, why));
    CHECK((w.nodes == 0 && w.whole.empty() && w.gaps.empty()));
    // Its manifest says: a version past the journal, among the packs.
    manifest m;
    put_own_part(st, 12, "na", m);
    m.bucket = 9;
    m.nodes = 1;
    const auto text = format_manifest(m);
    put_text(st, manifest_object("job", 12, "na"), text);
    const auto crc = crc32c(std::as_bytes(std::span(text)));
    REQUIRE_FALSE(try_complete_bucket(st, "job", 9, {"na", 2, 12, 12, crc, true}, 1, complete,
                                      why));
    REQUIRE_FALSE(bucket_waiting(st, "job", 9, w, why));
    CHECK(w.nodes == 1);
    CHECK(w.whole == list{10, 11, 12});
    CHECK(w.gaps == list{9});
    CHECK(w.lacking == std::vector<std::string>{"na"});
    CHECK(describe_wait(w, true) ==
          "they wait in bucket 9 for version 9, which node na lacks: the node's next daemon "
          "skips it when the job runs there again, and then they complete");
    // Past the newest few buckets no claim looks for gaps: nothing waits.
    for (const std::uint64_t b : {13, 17, 21})
        put_pack(st, b, "na", b, b);
    REQUIRE_FALSE(bucket_waiting(st, "job", 9, w, why));
    CHECK(w.whole == list{10, 11, 12});
    put_pack(st, 25, "na", 25, 25);
    REQUIRE_FALSE(bucket_waiting(st, "job", 9, w, why));
    CHECK((w.whole.empty() && w.gaps.empty()));
    // Unless a newer one is about to go (gc judges the buckets that stay).
    const std::set<std::uint64_t> going{25};
    REQUIRE_FALSE(bucket_waiting(st, "job", 9, w, why, &going));
    CHECK(w.whole == list{10, 11, 12});
}

TEST_CASE("a bucket's arrivals are refused when they cannot be a record's lines", "[packed]")
{
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    std::uint64_t complete = 0;
    // Outside the bucket, a manifest of several versions, no ranks.
    CHECK(try_complete_bucket(st, "job", 3, {"na", 2, 2, 4, 0}, 2, complete, why) ==
          errc::invalid_argument);
    CHECK_THAT(why, Catch::Contains("cannot arrive at bucket 3"));
    CHECK(try_complete_bucket(st, "job", 3, {"na", 2, 3, 4, 0, true}, 2, complete, why) ==
          errc::invalid_argument);
    CHECK(try_complete_bucket(st, "job", 3, {"na", 0, 3, 4, 0}, 2, complete, why) ==
          errc::invalid_argument);
    CHECK(try_complete_bucket(st, "job", 3, {std::string(199, 'n'), 1, 3, 4, 0}, 2, complete,
                              why) == errc::invalid_argument);
    // Three nodes in a job of two.
    REQUIRE_FALSE(try_complete_bucket(st, "job", 3, {"na", 2, 3, 3, 1}, 2, complete, why));
    REQUIRE_FALSE(try_complete_bucket(st, "job", 3, {"nb", 1, 3, 3, 2}, 3, complete, why));
    CHECK(try_complete_bucket(st, "job", 3, {"nc", 1, 3, 3, 3}, 2, complete, why) ==
          errc::rank_mismatch);
    CHECK_THAT(why, Catch::Contains("the parts of 3 nodes (na, nb, nc) but the job has 2"));
    // Two parts of one node over each other.
    fresh_store second;
    REQUIRE_FALSE(try_complete_bucket(*second.st, "job", 3, {"na", 2, 3, 5, 1}, 1, complete, why));
    CHECK(complete == 5);
    CHECK(try_complete_bucket(*second.st, "job", 3, {"na", 2, 4, 6, 2}, 1, complete, why) ==
          errc::corrupt);
    CHECK_THAT(why, Catch::Contains("node na brought versions 4 to 6 (2 ranks) over its other"));
    CHECK(try_complete_bucket(*second.st, "job", 0, {"na", 2, 1, 1, 2}, 1, complete, why) ==
          errc::invalid_argument);

    // Another node's arrival that no record may hold (70000 ranks, as a
    // daemon of another build or a hand in the store might bring): the
    // record it would make is refused before it is written, and the
    // records there stay the bucket's.
    fresh_store third;
    auto& owned = third.st;
    REQUIRE_FALSE(try_complete_bucket(*owned, "job", 3, {"na", 2, 3, 4, 1}, 2, complete, why));
    std::uint64_t count = 0;
    REQUIRE_FALSE(owned->arrive_keyed(bucket_arrivals_object("job", 3), "nb.3",
                                      "70000+3+3+00000002", 3, 5, count));
    CHECK(try_complete_bucket(*owned, "job", 3, {"na", 2, 5, 5, 3}, 2, complete, why) ==
          errc::corrupt);
    CHECK_THAT(why, Catch::Contains("would not be read") && Catch::Contains("70000"));
    std::vector<std::string> names;
    REQUIRE_FALSE(owned->list(bucket_dir("job", 3) + "/", names));
    CHECK(names.empty());
}

TEST_CASE("retention removes a bucket whole once all its versions are older than those kept",
          "[packed]")
{
    // Versions 1 and 2 in their own directories; bucket 3 (versions 3 to
    // 5, na's part of 4 in its own directory, too large for its pack);
    // bucket 6 (6 to 8, na's part of 7 in its own directory); bucket 9
    // (9), the newest.
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    put_own_version(st, 1);
    put_own_version(st, 2);
    std::uint64_t complete = 0;
    auto arrive = [&](std::uint64_t bucket, const bucket_part& p) {
        REQUIRE_FALSE(try_complete_bucket(st, "job", bucket, p, 2, complete, why));
    };
    auto large = [&](std::uint64_t v) {
        manifest m;
        return bucket_part{"na", 2, v, v, put_own_part(st, v, "na", m), true};
    };
    arrive(3, {"na", 2, 3, 3, put_pack(st, 3, "na", 3, 3)});
    arrive(3, large(4));
    arrive(3, {"na", 2, 5, 5, put_pack(st, 3, "na", 5, 5)});
    arrive(3, {"nb", 1, 3, 5, put_pack(st, 3, "nb", 3, 5)});
    CHECK(complete == 5);
    arrive(6, {"na", 2, 6, 6, put_pack(st, 6, "na", 6, 6)});
    arrive(6, large(7));
    arrive(6, {"na", 2, 8, 8, put_pack(st, 6, "na", 8, 8)});
    arrive(6, {"nb", 1, 6, 8, put_pack(st, 6, "nb", 6, 8)});
    CHECK(complete == 8);
    arrive(9, {"na", 2, 9, 9, put_pack(st, 9, "na", 9, 9)});
    arrive(9, {"nb", 1, 9, 9, put_pack(st, 9, "nb", 9, 9)});
    CHECK(complete == 9);
    // A stray directory in bucket 3's span (nb's part of 5, as a daemon
    // with packs off would have left it): it goes with the bucket.
    manifest stray;
    put_own_part(st, 5, "nb", stray);
    std::vector<std::uint64_t> versions;
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9});

    // Keep 2 (8 and 9): bucket 3 and versions 1, 2 go; bucket 6 stays for
    // 8, its 6 and 7 retired (with the directory of na's part of 7);
    // bucket 9 as the newest.
    std::vector<std::uint64_t> doomed;
    std::vector<bucket_span> doomed_buckets;
    retirement retire;
    REQUIRE_FALSE(prune_plan(st, "job", 2, UINT64_MAX, doomed, doomed_buckets, retire));
    CHECK(doomed == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6, 7});
    CHECK(doomed_buckets == std::vector<bucket_span>{{3, 6}});
    CHECK(retire.bucket == 6);
    CHECK(retire.upto == 7);
    CHECK(retire.dirs == std::vector<std::uint64_t>{7});
    // Versions from 4 on are still being committed: bucket 3 stays, only
    // its 3 retired.
    REQUIRE_FALSE(prune_plan(st, "job", 2, 4, doomed, doomed_buckets, retire));
    CHECK(doomed == std::vector<std::uint64_t>{1, 2, 3});
    CHECK(doomed_buckets.empty());
    CHECK(retire.bucket == 3);
    CHECK(retire.upto == 3);
    CHECK(retire.dirs.empty());

    // Paused after the first removal, then on to the end.
    std::vector<std::uint64_t> removed;
    CHECK(prune(st, "job", 2, removed, [] { return true; }) == std::errc::operation_canceled);
    CHECK(removed == std::vector<std::uint64_t>{3, 4, 5});  // the bucket, whole
    removed.clear();
    REQUIRE_FALSE(prune(st, "job", 2, removed));
    CHECK(removed == std::vector<std::uint64_t>{1, 2, 6, 7});
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{8, 9});
    std::vector<std::string> names;
    REQUIRE_FALSE(st.list("job/", names));
    CHECK(names == std::vector<std::string>{"packs"});
    REQUIRE_FALSE(st.list("job/packs/", names));
    CHECK(names == std::vector<std::string>{"b00000006", "b00000009"});
    for (const std::uint64_t v : {8, 9})
        check_reads(st, v);
    // The retired versions are gone to every reader; their packs stay
    // beside 8's, under the bucket's mark.
    for (const std::uint64_t v : {6, 7}) {
        bool yes = true;
        REQUIRE_FALSE(committed(st, "job", v, yes));
        CHECK_FALSE(yes);
        version_info info;
        CHECK(load_version(st, "job", v, info, why) == errc::not_found);
    }
    CHECK(std::filesystem::exists(fresh.tmp /
                                  ("store/" + bucket_retired_object("job", 6, 7))));
    // Nothing hidden is left of bucket 3 (its tally, a temporary).
    CHECK_FALSE(std::filesystem::exists(fresh.tmp / ("store/" + bucket_dir("job", 3))));
    CHECK_FALSE(std::filesystem::exists(fresh.tmp / "store/job/v00000004"));
    // Nothing more to do at keep 2; at keep 1 bucket 6 goes whole, with
    // its mark.
    removed.clear();
    REQUIRE_FALSE(prune(st, "job", 2, removed));
    CHECK(removed.empty());
    REQUIRE_FALSE(prune(st, "job", 1, removed));
    CHECK(removed == std::vector<std::uint64_t>{8});
    REQUIRE_FALSE(st.list("job/packs/", names));
    CHECK(names == std::vector<std::string>{"b00000009"});
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{9});

    // Bucket 9 grows to 12; keep 1 retires 9 to 11 in two steps, and the
    // later mark replaces the earlier one.
    arrive(9, {"na", 2, 10, 11, put_pack(st, 9, "na", 10, 11)});
    arrive(9, {"nb", 1, 10, 11, put_pack(st, 9, "nb", 10, 11)});
    CHECK(complete == 11);
    removed.clear();
    REQUIRE_FALSE(prune(st, "job", 1, removed));
    CHECK(removed == std::vector<std::uint64_t>{9, 10});
    arrive(9, {"na", 2, 12, 12, put_pack(st, 9, "na", 12, 12)});
    arrive(9, {"nb", 1, 12, 12, put_pack(st, 9, "nb", 12, 12)});
    removed.clear();
    REQUIRE_FALSE(prune(st, "job", 1, removed));
    CHECK(removed == std::vector<std::uint64_t>{11});
    REQUIRE_FALSE(st.list(bucket_dir("job", 9) + "/", names));
    CHECK(std::count_if(names.begin(), names.end(), [](const std::string& n) {
              return n.rfind("RETIRED.", 0) == 0;
          }) == 1);
    CHECK(std::find(names.begin(), names.end(), "RETIRED.v00000011") != names.end());
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{12});
    // The node's own read of a retired part finds nothing either.
    bytes_place at;
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    CHECK(find_own_packed(st, "job", 11, "na", 0, at, size, crc, why) == errc::not_found);
    REQUIRE_FALSE(find_own_packed(st, "job", 12, "na", 0, at, size, crc, why));
    // Something else under a mark's name hides nothing: a directory, or a
    // mark with bytes in it.
    REQUIRE(std::filesystem::create_directory(
        fresh.tmp / ("store/" + bucket_retired_object("job", 9, 12))));
    { std::ofstream(fresh.tmp / ("store/" + bucket_retired_object("job", 9, 13))) << "x"; }
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{12});
}

TEST_CASE("retention removes versions in their own directories after the newest bucket",
          "[packed]")
{
    // Version 1 in its own directory, bucket 2 (2 and 3), then 4 to 6 in
    // their own directories (a run with packs off), and 7 incomplete.
    fresh_store fresh;
    auto& st = *fresh.st;
    std::string why;
    put_own_version(st, 1);
    std::uint64_t complete = 0;
    REQUIRE_FALSE(
        try_complete_bucket(st, "job", 2, {"na", 2, 2, 3, put_pack(st, 2, "na", 2, 3)}, 2,
                            complete, why));
    REQUIRE_FALSE(
        try_complete_bucket(st, "job", 2, {"nb", 1, 2, 3, put_pack(st, 2, "nb", 2, 3)}, 2,
                            complete, why));
    for (const std::uint64_t v : {4, 5, 6})
        put_own_version(st, v);
    manifest m;
    put_own_part(st, 7, "na", m);
    std::vector<std::uint64_t> doomed;
    std::vector<bucket_span> doomed_buckets;
    retirement retire;
    REQUIRE_FALSE(prune_plan(st, "job", 1, UINT64_MAX, doomed, doomed_buckets, retire));
    CHECK(doomed == std::vector<std::uint64_t>{1, 2, 3, 4, 5});
    CHECK(doomed_buckets.empty());
    // Bucket 2 is the newest: it stays, 2 and 3 retired (no further than
    // its record, which settles nothing after 3).
    CHECK(retire.bucket == 2);
    CHECK(retire.upto == 3);
    CHECK(retire.dirs.empty());
    // Paused after the mark: what it retired is reported, being gone from
    // every listing; the directories go on the next call.
    std::vector<std::uint64_t> removed;
    CHECK(prune_exactly(st, "job", doomed, doomed_buckets, retire, removed,
                        [] { return true; }) == std::errc::operation_canceled);
    CHECK(removed == std::vector<std::uint64_t>{2, 3});
    std::vector<std::uint64_t> listed;
    REQUIRE_FALSE(complete_versions(st, "job", listed));
    CHECK(listed == std::vector<std::uint64_t>{1, 4, 5, 6});
    removed.clear();
    REQUIRE_FALSE(prune_plan(st, "job", 1, UINT64_MAX, doomed, doomed_buckets, retire));
    CHECK(doomed == std::vector<std::uint64_t>{1, 4, 5});
    CHECK(retire.bucket == 0);
    REQUIRE_FALSE(prune_exactly(st, "job", doomed, doomed_buckets, retire, removed));
    CHECK(removed == std::vector<std::uint64_t>{1, 4, 5});
    std::vector<std::uint64_t> versions;
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{6});
    std::vector<std::string> names;
    REQUIRE_FALSE(st.list("job/", names));
    CHECK(names == std::vector<std::string>{"packs", "v00000006", "v00000007"});
}

TEST_CASE("a bucket a crash left half removed, or whose record does not read", "[packed]")
{
    packed_store s;
    auto& st = *s.st;
    std::vector<bucket_span> unfinished;
    std::vector<std::string> unreadable;
    REQUIRE_FALSE(unfinished_buckets(st, "job", unfinished, unreadable));
    CHECK(unfinished.empty());
    CHECK(unreadable.empty());
    // Bucket 7: a pack, and its record gone as remove_bucket removes it
    // first; bucket 3's record damaged.
    put_pack(st, 7, "na", 7, 7);
    std::filesystem::resize_file(s.path(bucket_complete_object("job", 3, 5)), 40);
    REQUIRE_FALSE(unfinished_buckets(st, "job", unfinished, unreadable));
    CHECK(unfinished == std::vector<bucket_span>{{7, UINT64_MAX}});
    REQUIRE(unreadable.size() == 1);
    CHECK_THAT(unreadable[0], Catch::Contains(bucket_complete_object("job", 3, 5)));
    bool records_gone = false;
    REQUIRE_FALSE(remove_bucket(st, "job", unfinished[0], records_gone));
    CHECK(records_gone);  // none was there: nothing of it is complete
    CHECK_FALSE(std::filesystem::exists(s.path(bucket_dir("job", 7))));
    // What a crash after the packs leaves: an empty directory, removed.
    REQUIRE(std::filesystem::create_directories(s.path(bucket_dir("job", 8))));
    REQUIRE_FALSE(remove_bucket(st, "job", {8, UINT64_MAX}, records_gone));
    CHECK_FALSE(std::filesystem::exists(s.path(bucket_dir("job", 8))));
    // Bucket 3 is untouched.
    CHECK(std::filesystem::exists(s.path(pack_object("job", 3, "nb", 3, 6))));
}

TEST_CASE("a job's FORMAT is written once, and a newer one is refused in words by every reader",
          "[packed]")
{
    packed_store s;
    auto& st = *s.st;
    std::string why;
    const auto read_format = [&] {
        std::ifstream in(s.path(format_object("job")));
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    // None: format 1, read as before.
    REQUIRE_FALSE(check_format(st, "job", why));
    REQUIRE_FALSE(mark_format(st, "job", why));
    CHECK(read_format() == "iofwd-job-format 3\n");
    REQUIRE_FALSE(mark_format(st, "job", why));  // there: checked, kept
    CHECK(read_format() == "iofwd-job-format 3\n");
    // An older iofwd's mark is raised: this one may record buckets that
    // the older one would read wrong, and it must refuse the job then.
    REQUIRE_FALSE(st.remove(format_object("job")));
    put_text(st, format_object("job"), "iofwd-job-format 2\n");
    REQUIRE_FALSE(check_format(st, "job", why));
    REQUIRE_FALSE(mark_format(st, "job", why));
    CHECK(read_format() == "iofwd-job-format 3\n");
    std::vector<std::uint64_t> versions;
    REQUIRE_FALSE(complete_versions(st, "job", versions));
    CHECK(versions == std::vector<std::uint64_t>{1, 3, 4, 5});
    check_reads(st, 5);

    // A newer iofwd's job: nothing that lists it, or looks for a version
    // in packs, goes on as if it knew where the versions are.
    REQUIRE_FALSE(st.remove(format_object("job")));
    put_text(st, format_object("job"), "iofwd-job-format 4\n");
    CHECK(check_format(st, "job", why) == errc::newer_format);
    CHECK_THAT(why, Catch::Contains("job job is kept in store format 4 (job/FORMAT), newer than "
                                    "format 3, the newest this iofwd reads"));
    CHECK(to_errno(errc::newer_format) == EPROTONOSUPPORT);
    CHECK(mark_format(st, "job", why) == errc::newer_format);
    CHECK(read_format() == "iofwd-job-format 4\n");
    CHECK(complete_versions(st, "job", versions) == errc::newer_format);
    CHECK(job_versions(st, "job", versions) == errc::newer_format);
    version_info info;
    CHECK(load_version(st, "job", 5, info, why) == errc::newer_format);
    CHECK_THAT(why, Catch::Contains("store format 4"));
    CHECK(load_node(st, "job", 5, "nb", info, why) == errc::newer_format);
    bool yes = true;
    CHECK(in_bucket(st, "job", 5, yes) == errc::newer_format);
    std::uint64_t newest = 0;
    std::string skipped;
    CHECK(latest(st, "job", false, newest, skipped, why) == errc::newer_format);
    CHECK_THAT(why, Catch::StartsWith("job job is kept in store format 4"));
    CHECK(committed(st, "job", 5, yes) == errc::newer_format);
    std::vector<std::uint64_t> doomed;
    std::vector<bucket_span> doomed_buckets;
    retirement retire;
    CHECK(prune_plan(st, "job", 1, UINT64_MAX, doomed, doomed_buckets, retire) ==
          errc::newer_format);
    CHECK(doomed.empty());
    verify_report report;
    CHECK(verify_job(st, "job", {}, {}, report, why) == errc::newer_format);
    // A version in its own directory is where every format keeps it.
    REQUIRE_FALSE(load_version(st, "job", 1, info, why));

    // One that does not read says so, and is refused as well.
    // (1 is what no FORMAT means: none says so.)
    for (const std::string& bad : std::vector<std::string>{
             "iofwd-job-format 02\n", "iofwd-job-format 2", "iofwd-job-format \n",
          "iofwd-job-format 1\n", "iofwd-job-format 0\n", "iofwd-job-format 99999999999\n",
          "iofwd-job-format 2\n\n", std::string("iofwd-job-format 2\0\n", 20), "format 2\n"}) {
        INFO(bad);
        REQUIRE_FALSE(st.remove(format_object("job")));
        put_text(st, format_object("job"), bad);
        CHECK(check_format(st, "job", why) == errc::corrupt);
        CHECK_THAT(why, Catch::Contains("job/FORMAT does not read as \"iofwd-job-format N\""));
        CHECK(complete_versions(st, "job", versions) == errc::corrupt);
        // Not taken for a version not complete yet (io_finalize would wait).
        CHECK(committed(st, "job", 5, yes) == errc::corrupt);
    }
    REQUIRE_FALSE(st.remove(format_object("job")));
    put_text(st, format_object("job"), std::string(65, 'x'));
    CHECK(check_format(st, "job", why) == errc::corrupt);
    CHECK(why == "job/FORMAT is 65 bytes, not the line \"iofwd-job-format N\" of a job's format; "
                 "cannot tell where job job keeps its versions (an iofwd writes that one line: "
                 "restore it, or move the job aside)");
}
