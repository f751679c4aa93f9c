// Reads a job's checkpoints back from the store and checks every byte: each
// complete version (one with a COMPLETE record) must have every node's
// manifest, every rank's object with the manifest's size and crc32c, and the
// exact bytes the checkpoint example wrote for that node, rank and version.
// The checking is the store library's (store/verify.hpp, as `iofwd verify`
// does it); what this program adds is the example's pattern.
//
//   verify --store DIR [--job checkpoint] [--expect-versions N] [--expect-ranks R]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "errors.hpp"
#include "format.hpp"
#include "pattern.hpp"
#include "store/backend.hpp"
#include "store/verify.hpp"

namespace {

struct options {
    std::string store = "iofwd-store";
    std::string job = "checkpoint";
    long expect_versions = -1;
    long expect_ranks = -1;
};

int usage(int code)
{
    std::fputs("usage: verify [--store DIR] [--job NAME] [--expect-versions N] [--expect-ranks R]\n"
               "  Checks every complete version of JOB in the store: sizes, crc32c and the\n"
               "  exact bytes of the checkpoint example's pattern. Exit 0 when all match.\n",
               code ? stderr : stdout);
    return code;
}

// The line the verifier has always printed for a damaged object.
void print_failure(const iofwd::store::object_result& o)
{
    using iofwd::store::problem;
    const auto& d = o.what;
    switch (d.kind) {
    case problem::missing:
        fmt::print("FAIL {}: {}\n", o.name, make_error_code(iofwd::errc::not_found).message());
        break;
    case problem::size: fmt::print("FAIL {}: {}, manifest says {}\n", o.name, d.found, o.size); break;
    case problem::checksum:
        fmt::print("FAIL {}: {}, manifest says {:08x}\n", o.name, d.found, o.crc32c);
        break;
    case problem::content: fmt::print("FAIL {}: {}\n", o.name, o.why); break;
    default: fmt::print("FAIL {}: {}\n", o.name, d.found); break;
    }
}

// Every block must be the example's pattern for its node, rank and version.
bool pattern_matches(const iofwd::store::manifest& m, const iofwd::store::manifest_entry& e,
                     std::span<const std::byte> block, std::uint64_t offset, std::string& why,
                     iofwd::store::damage& what)
{
    std::vector<std::byte> expect(block.size());
    example::fill_pattern(expect.data(), expect.size(),
                          example::pattern_seed(m.node, e.rank, m.version), offset);
    if (std::memcmp(block.data(), expect.data(), block.size()) == 0)
        return true;
    std::size_t i = 0;
    while (block[i] == expect[i])
        ++i;
    why = fmt::format("byte {} differs from the pattern of node {} rank {} version {}", offset + i,
                      m.node, e.rank, m.version);
    what.expected = fmt::format("byte {} = {:02x} (the example's pattern)", offset + i,
                                static_cast<unsigned>(expect[i]));
    what.found = fmt::format("{:02x}", static_cast<unsigned>(block[i]));
    return false;
}

}  // namespace

int main(int argc, char** argv)
{
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string_view a = argv[i];
        if (a == "--help")
            return usage(0);
        if (i + 1 >= argc)
            return usage(2);
        if (a == "--store") o.store = argv[++i];
        else if (a == "--job") o.job = argv[++i];
        else if (a == "--expect-versions") o.expect_versions = std::atol(argv[++i]);
        else if (a == "--expect-ranks") o.expect_ranks = std::atol(argv[++i]);
        else return usage(2);
    }
    std::unique_ptr<iofwd::store::backend> st;
    std::string why;
    if (auto ec = iofwd::store::open(o.store, st, why)) {
        fmt::print(stderr, "verify: {}\n", why);
        return 2;
    }
    // The store's own verification (iofwd verify's), plus the pattern.
    iofwd::store::verify_options vo;
    vo.threads = 2;
    vo.content = pattern_matches;
    iofwd::store::verify_report report;
    if (auto ec = iofwd::store::verify_job(*st, o.job, {}, vo, report, why)) {
        fmt::print("FAIL: job {} not found in {}: {}\n", o.job, st->describe(), ec.message());
        return 1;
    }
    long complete = 0, incomplete = 0, objects = 0, bad = 0;
    std::uint64_t bytes = 0;
    for (const auto& v : report.versions) {
        if (v.state == iofwd::store::version_state::incomplete) {
            fmt::print("version {}: incomplete ({})\n", v.version, v.why);
            ++incomplete;
            continue;
        }
        if (v.state == iofwd::store::version_state::damaged) {
            fmt::print("FAIL version {}: {}\n", v.version, v.why);
            ++bad;
            continue;
        }
        ++complete;
        long ranks = 0;
        for (const auto& obj : v.objects) {
            ++objects;
            ++ranks;
            if (obj.intact) {
                bytes += obj.size;
            } else {
                print_failure(obj);
                ++bad;
            }
        }
        if (o.expect_ranks >= 0 && ranks != o.expect_ranks) {
            fmt::print("FAIL version {}: {} ranks, expected {}\n", v.version, ranks, o.expect_ranks);
            ++bad;
        }
    }
    if (o.expect_versions >= 0 && complete != o.expect_versions) {
        fmt::print("FAIL: {} complete versions, expected {}\n", complete, o.expect_versions);
        ++bad;
    }
    fmt::print("verify {}: {} complete versions, {} incomplete, {} objects, {} checked byte for "
               "byte: {}\n",
               st->describe() + "/" + o.job, complete, incomplete, objects,
               iofwd::human_bytes(bytes), bad ? fmt::format("{} FAILURES", bad) : "all match");
    return bad ? 1 : 0;
}
