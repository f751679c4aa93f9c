// iod's options: the defaults are the settings table's, written once.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config.hpp"
#include "options.hpp"

using namespace iofwd;

namespace {

// No IOFWD_* setting in the environment while it lives; put back after.
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
    // Spot checks against the documented figures.
    CHECK(plain.staging_bytes == 256ull << 20);
    CHECK(plain.pack_versions == 64);
    CHECK(plain.transports == "self,posix,cma");
    CHECK(plain.ceph_user == "client.admin");
    CHECK(plain.keep == 0);
    CHECK(plain.log_level == "info");

    // Each daemon setting given its default explicitly changes nothing.
    std::set<std::string> compared;
    for (const auto& v : config::variables()) {
        if (v.flag.empty() || v.fallback.empty())
            continue;
        INFO(v.name << " given as " << v.flag << "=" << v.fallback);
        iod::options given;
        REQUIRE(parse({std::string(v.flag) + "=" + std::string(v.fallback)}, given) ==
                iod::parse_result::run);
        CHECK(given == plain);
        compared.insert(std::string(v.name));
    }
    for (const char* name : {"IOFWD_STORE", "IOFWD_STAGING_SIZE", "IOFWD_PACK_VERSIONS",
                             "IOFWD_TRANSPORTS", "IOFWD_CEPH_USER", "IOFWD_KEEP"})
        CHECK(compared.contains(name));

    // And a value that is not the default does change it.
    iod::options other;
    REQUIRE(parse({"--pack-versions=8"}, other) == iod::parse_result::run);
    CHECK(other.pack_versions == 8);
    CHECK_FALSE(other == plain);
}
