// iofwd config: the effective configuration, every IOFWD_* setting of the
// one table (libio/common/config.hpp) with its value and where it came from,
// and the IOFWD_* variables set that iofwd does not know, with the nearest
// real name. Exit status 1 when a value is bad or a variable unknown.
#include <cstdlib>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "config.hpp"

namespace iofwd::tool {
namespace {

int run(bool json)
{
    nlohmann::json settings = nlohmann::json::array();
    bool problems = false;
    if (!json)
        fmt::print("{:<24} {:<20} {:<12} {}\n", "SETTING", "VALUE", "FROM", "READ BY");
    for (const auto& v : config::variables()) {
        const char* env = std::getenv(std::string(v.name).c_str());
        const bool from_env = env && *env;
        std::string problem;
        const bool valid = !from_env || config::check(v, env, problem);
        problems = problems || !valid;
        const char* source = from_env ? "environment" : v.fallback.empty() ? "unset" : "default";
        const std::string value = from_env ? env : std::string(v.fallback);
        settings.push_back({{"name", v.name},
                            {"value", from_env || !v.fallback.empty() ? nlohmann::json(value)
                                                                     : nlohmann::json(nullptr)},
                            {"source", source},
                            {"valid", valid},
                            {"problem", valid ? nlohmann::json(nullptr) : nlohmann::json(problem)},
                            {"read_by", config::reader_name(v.who)},
                            {"flag", v.flag.empty() ? nlohmann::json(nullptr)
                                                    : nlohmann::json(std::string(v.flag))},
                            {"help", v.help}});
        if (!json)
            fmt::print("{:<24} {:<20} {:<12} {}{}\n", v.name, value.empty() ? "-" : value, source,
                       config::reader_name(v.who), valid ? "" : "  BAD: " + problem);
    }
    nlohmann::json unknown = nlohmann::json::array();
    const auto unknowns = config::unknown_settings();
    const auto sentences = config::unknown_in_environment();
    for (std::size_t i = 0; i < unknowns.size(); ++i) {
        unknown.push_back({{"name", unknowns[i].name},
                           {"nearest", unknowns[i].nearest.empty()
                                           ? nlohmann::json(nullptr)
                                           : nlohmann::json(unknowns[i].nearest)},
                           {"message", sentences[i]}});
        if (!json)
            fmt::print("unknown: {}\n", sentences[i]);
    }
    problems = problems || !unknowns.empty();
    if (json)
        print_json({{"settings", settings}, {"unknown", unknown}});
    return problems ? damaged : ok;
}

}  // namespace

void add_config(CLI::App& app, int& status)
{
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand(
        "config", "print every IOFWD_* setting with its value and where it came from "
                  "(environment, default), and IOFWD_* variables that are not settings, with the "
                  "nearest real name; exit status 1 if a value is bad or a name unknown");
    add_json_option(*cmd, *json);
    cmd->callback([json, &status] { status = run(*json); });
}

}  // namespace iofwd::tool
