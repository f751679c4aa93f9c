#pragma once
// Running the iofwd command in the tools tests: its exit status, stdout and
// stderr apart; --json output read back by python3; output masked where it
// changes from run to run.
#include <map>
#include <string>
#include <vector>

#include "fixture.hpp"

namespace test {

struct result {
    int code = -1;
    std::string out, err;
};

// iofwd with `args`, stdout and stderr apart (the fixture's process mixes them).
result run_iofwd(cluster& c, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& extra = {});

// What a python3 expression over the JSON document `d` prints.
std::string py(cluster& c, const std::string& json, const std::string& expr);

// Times and temporary names change from run to run.
std::string masked(const std::string& text);

// The names in `dir`, sorted.
std::vector<std::string> names_in(const std::string& dir);

}  // namespace test
