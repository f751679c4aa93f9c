#include "iofwd_run.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include <catch2/catch.hpp>

namespace test {

// iofwd with `args`, stdout and stderr apart (the fixture's process mixes them).
result run_iofwd(cluster& c, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& extra)
{
    const std::string err = c.tmp / ("err" + std::to_string(c.outputs) + ".txt");
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>\"$IOFWD_TEST_ERR\"",
                                     build_path("IOFWD_TEST_IOFWD")};
    argv.insert(argv.end(), args.begin(), args.end());
    auto e = extra;
    e["IOFWD_TEST_ERR"] = err;
    auto p = c.run(argv, e);
    const auto st = p.wait(120s);
    REQUIRE(st.has_value());
    return {exit_code(*st), p.output(), read_file(err)};
}

// What a python3 expression over the JSON document `d` prints.
std::string py(cluster& c, const std::string& json, const std::string& expr)
{
    const std::string file = c.tmp / ("json" + std::to_string(c.outputs) + ".json");
    std::ofstream(file) << json;
    auto p = c.run({"/usr/bin/python3", "-c",
                    "import json, sys; d = json.load(open(sys.argv[1])); print(" + expr + ")",
                    file});
    const auto st = p.wait(60s);
    REQUIRE(st.has_value());
    INFO(p.output());
    REQUIRE(exit_code(*st) == 0);
    return p.output();
}

// Times and temporary names change from run to run.
std::string masked(const std::string& text)
{
    static const std::regex time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
    static const std::regex temp(R"(\.tmp-\d+-\d+)");
    return std::regex_replace(std::regex_replace(text, time, "<time>              "), temp,
                              ".tmp-P-N");
}

std::vector<std::string> names_in(const std::string& dir)
{
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

}  // namespace test
