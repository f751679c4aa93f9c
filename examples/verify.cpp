// Reads a job's checkpoints back from the store and checks every byte: each
// complete version (one with a COMPLETE record) must have every node's
// manifest, every rank's object with the manifest's size and crc32c, and the
// exact bytes the checkpoint example wrote for that node, rank and version.
//
//   verify --store DIR [--job checkpoint] [--expect-versions N] [--expect-ranks R]
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "crc32c.hpp"
#include "errors.hpp"
#include "format.hpp"
#include "store/layout.hpp"
#include "pattern.hpp"
#include "store/backend.hpp"
#include "store/catalog.hpp"

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

// Checks one object: size, checksum, and the pattern, a block at a time.
bool check_object(iofwd::store::backend& st, const std::string& name,
                  const iofwd::store::manifest& m, const iofwd::store::manifest_entry& e,
                  std::vector<std::byte>& block)
{
    std::uint64_t size = 0;
    if (auto ec = st.size(name, size)) {
        fmt::print("FAIL {}: {}\n", name, ec.message());
        return false;
    }
    if (size != e.size) {
        fmt::print("FAIL {}: {} bytes, manifest says {}\n", name, size, e.size);
        return false;
    }
    const std::uint64_t seed = example::pattern_seed(m.node, e.rank, m.version);
    std::vector<std::byte> expect(block.size());
    std::uint32_t crc = 0;
    for (std::uint64_t off = 0; off < size; off += block.size()) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(block.size(), size - off));
        if (auto ec = st.read(name, off, std::span(block.data(), n))) {
            fmt::print("FAIL {}: read at {}: {}\n", name, off, ec.message());
            return false;
        }
        crc = iofwd::crc32c(std::span(block.data(), n), crc);
        example::fill_pattern(expect.data(), n, seed, off);
        if (std::memcmp(block.data(), expect.data(), n) != 0) {
            std::size_t i = 0;
            while (block[i] == expect[i])
                ++i;
            fmt::print("FAIL {}: byte {} differs from the pattern of node {} rank {} version {}\n",
                       name, off + i, m.node, e.rank, m.version);
            return false;
        }
    }
    if (crc != e.crc32c) {
        fmt::print("FAIL {}: crc32c {:08x}, manifest says {:08x}\n", name, crc, e.crc32c);
        return false;
    }
    return true;
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
    std::vector<std::string> versions;
    if (auto ec = st->list(o.job + "/", versions)) {
        fmt::print("FAIL: job {} not found in {}: {}\n", o.job, st->describe(), ec.message());
        return 1;
    }
    std::vector<std::byte> block(16 << 20);
    long complete = 0, incomplete = 0, objects = 0, bad = 0;
    std::uint64_t bytes = 0;
    for (const auto& vdir : versions) {
        const auto version = iofwd::store::parse_version_dir(vdir);
        if (!version)
            continue;
        std::uint64_t ignored = 0;
        if (st->size(iofwd::store::complete_object(o.job, *version), ignored)) {
            fmt::print("version {}: incomplete (no COMPLETE record)\n", *version);
            ++incomplete;
            continue;
        }
        iofwd::store::version_info info;
        if (auto ec = iofwd::store::load_version(*st, o.job, *version, info, why)) {
            fmt::print("FAIL version {}: {}\n", *version, why);
            ++bad;
            continue;
        }
        ++complete;
        long ranks = 0;
        for (const auto& m : info.manifests) {
            for (const auto& e : m.entries) {
                const auto name = iofwd::store::data_object(o.job, m.version, m.node, e.rank);
                ++objects;
                ++ranks;
                if (check_object(*st, name, m, e, block))
                    bytes += e.size;
                else
                    ++bad;
            }
        }
        if (o.expect_ranks >= 0 && ranks != o.expect_ranks) {
            fmt::print("FAIL version {}: {} ranks, expected {}\n", *version, ranks, o.expect_ranks);
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
