// iod's options: the defaults are the settings table's, written once.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "config.hpp"
#include "options.hpp"
#include "store/journal.hpp"

using namespace iofwd;

namespace {

// No IOFWD_* setting in the environment while it lives; after, exactly
// those there before (what a test set goes also when a REQUIRE stopped it).
class environment_cleared {
public:
    environment_cleared()
    {
        for (const auto& v : config::variables()) {
            const std::string name(v.name);
            if (const char* value = std::getenv(name.c_str())) {
                saved_[name] = value;
                ::unsetenv(name.c_str());
            }
        }
    }
    ~environment_cleared()
    {
        for (const auto& v : config::variables())
            ::unsetenv(std::string(v.name).c_str());
        for (const auto& [name, value] : saved_)
            ::setenv(name.c_str(), value.c_str(), 1);
    }
    environment_cleared(const environment_cleared&) = delete;
    environment_cleared& operator=(const environment_cleared&) = delete;

private:
    std::map<std::string, std::string> saved_;
};

iod::parse_result parse(std::vector<std::string> args, iod::options& out)
{
    args.insert(args.begin(), "iod");
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    return iod::parse_options(static_cast<int>(args.size()), argv.data(), out);
}

}  // namespace

TEST_CASE("iod without settings takes every default from the settings table", "[options]")
{
    environment_cleared cleared;
    iod::options plain;
    REQUIRE(parse({}, plain) == iod::parse_result::run);
    // The documented figures (README's configuration table).
    CHECK(plain.store == "iofwd-store");
    CHECK_FALSE(plain.store_group);
    CHECK(plain.staging_bytes == 256ull << 20);
    CHECK(plain.chunk_bytes == 16ull << 20);
    CHECK(plain.mailbox_bytes == 4ull << 20);
    CHECK(plain.flush_threads == 2);
    CHECK(plain.pull_threads == 2);
    CHECK(plain.journal_max == 1ull << 20);
    CHECK(plain.journal_bytes == 16ull << 20);
    CHECK(plain.pack_versions == 64);
    CHECK(plain.pack_wait == 0.02);
    CHECK(plain.pack_age == 1);
    CHECK(plain.keep == 0);
    CHECK(plain.log_level == "info");
    CHECK(plain.progress_interval == 5);
    CHECK(plain.transports == "self,posix,cma");
    CHECK(plain.ceph_user == "client.admin");
    CHECK(plain.idle_timeout == 0);  // none in the table: 300 s with --auto-exit, else never
    CHECK_FALSE(plain.node.empty());  // the host's name

    // A setting given its default is the same options.
    iod::options given;
    REQUIRE(parse({"--pack-versions=64", "--staging-size=256M"}, given) == iod::parse_result::run);
    CHECK(given == plain);
}

TEST_CASE("iod's environment beats the table's default, and its command line both",
          "[options]")
{
    environment_cleared cleared;
    ::setenv("IOFWD_PACK_VERSIONS", "8", 1);
    ::setenv("IOFWD_STAGING_SIZE", "64M", 1);
    iod::options from_env;
    REQUIRE(parse({}, from_env) == iod::parse_result::run);
    CHECK(from_env.pack_versions == 8);
    CHECK(from_env.staging_bytes == 64ull << 20);
    CHECK(from_env.chunk_bytes == 16ull << 20);  // not given: the default

    iod::options from_argv;
    REQUIRE(parse({"--pack-versions=16"}, from_argv) == iod::parse_result::run);
    CHECK(from_argv.pack_versions == 16);
    CHECK(from_argv.staging_bytes == 64ull << 20);
}

TEST_CASE("iod refuses a journal max larger than a journal record may be", "[options]")
{
    // A claim reads each record of the journal whole into memory, and
    // takes none larger than store::journal::max_record: the settings
    // table's range for IOFWD_JOURNAL_MAX ends there.
    environment_cleared cleared;
    CHECK(store::journal::max_record == 1ull << 30);
    iod::options o;
    CHECK(parse({"--journal-max=1G"}, o) == iod::parse_result::run);
    CHECK(o.journal_max == 1ull << 30);
    iod::options refused;
    CHECK(parse({"--journal-max=1025M"}, refused) == iod::parse_result::exit_error);
}
