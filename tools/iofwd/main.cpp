// iofwd: list, verify, restore and clean the checkpoints in an iofwd store,
// report on finished jobs, watch the running daemons, and show the
// effective configuration. One subcommand per file (see commands.hpp);
// arguments parsed by CLI11, JSON written by nlohmann-json.
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "commands.hpp"
#include "common.hpp"
#include "config.hpp"

namespace {

constexpr const char* footer = R"(Every subcommand takes --json (its fields are listed in the manual) and,
except config and status, --store LOCATION: a directory, dir:PATH, or
rados:POOL with --ceph-conf, --ceph-user, --ceph-keyring as iod takes them
(default: IOFWD_STORE, else ./iofwd-store).

Exit status: 0 success; 1 damage found (verify, restore, cat), a version
that is not complete, a bad setting (config), a failing store, a job without
summaries (report) or a live daemon that did not answer (status); 2 a bad
argument: usage, unknown job, version or run, bad number, missing store; 3
refused: a live daemon holds the job's claim and the command would touch a
version it may be writing, or (rm) a node's journal holds parts of it.)";

// --help-all as a manual reads it: each subcommand under a heading of its
// own (help2man makes "iofwd ls [OPTIONS] [JOB]:" a subsection), its
// description, arguments and options below.
class manual_formatter final : public CLI::Formatter {
public:
    std::string make_expanded(const CLI::App* sub) const override
    {
        std::string usage = make_usage(sub, "iofwd " + sub->get_name());
        usage = usage.substr(usage.find(':') + 2);  // "Usage: " off
        while (!usage.empty() && usage.back() == '\n')
            usage.pop_back();
        return fmt::format("\n{}:\n\n{}{}{}", usage, make_description(sub), make_positionals(sub),
                           make_groups(sub, CLI::AppFormatMode::Sub));
    }
};

// The subcommand that was running, for the message.
std::string running(const CLI::App& app)
{
    const auto subs = app.get_subcommands();
    return subs.empty() ? std::string("iofwd") : "iofwd " + subs.front()->get_name();
}

}  // namespace

int main(int argc, char** argv)
{
    using namespace iofwd::tool;
    CLI::App app("List, verify, restore and clean the checkpoints an iofwd daemon (iod) wrote to "
                 "its store, report on finished jobs, watch the running daemons, and show "
                 "iofwd's configuration.",
                 "iofwd");
    auto formatter = std::make_shared<manual_formatter>();
    formatter->label("Positionals", "Arguments");
    app.formatter(formatter);
    app.footer(footer);
    app.set_version_flag("--version", "iofwd " IOFWD_VERSION);
    app.set_help_all_flag("--help-all", "print the help of every subcommand");
    app.require_subcommand(1, 1);
    int status = ok;
    add_ls(app, status);
    add_verify(app, status);
    add_restore(app, status);
    add_cat(app, status);
    add_rm(app, status);
    add_keep(app, status);
    add_gc(app, status);
    add_report(app, status);
    add_status(app, status);
    add_config(app, status);
    // CLI11 would only say that a subcommand is required.
    std::string names;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
        names += (names.empty() ? "" : ", ") + sub->get_name();
        known = known || (argc > 1 && sub->get_name() == argv[1]);
    }
    if (argc > 1 && argv[1][0] != '-' && !known) {
        fmt::print(stderr, "iofwd: unknown subcommand '{}' (one of: {}; see iofwd --help)\n",
                   argv[1], names);
        return bad_argument;
    }
    // As iod and the library do; config lists them itself.
    if (!(argc > 1 && std::string_view(argv[1]) == "config"))
        for (const auto& w : iofwd::config::unknown_in_environment())
            fmt::print(stderr, "iofwd: warning: {}\n", w);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        fmt::print(stderr, "{}: {} (see {} --help)\n", running(app), e.what(), running(app));
        return bad_argument;
    } catch (const failure& f) {
        std::fflush(stdout);
        fmt::print(stderr, "{}: {}\n", running(app), f.what());
        return f.status;
    }
    return status;
}
