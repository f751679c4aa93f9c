#pragma once
// The subcommands of iofwd, one file each: each adds itself to the app, and
// its callback sets `status` (common.hpp's exit statuses) or throws failure.
namespace CLI {
class App;
}

namespace iofwd::tool {

void add_ls(CLI::App& app, int& status);       // ls.cpp
void add_verify(CLI::App& app, int& status);   // verify.cpp
void add_restore(CLI::App& app, int& status);  // read.cpp: restore and cat
void add_cat(CLI::App& app, int& status);
void add_rm(CLI::App& app, int& status);       // clean.cpp: rm, keep and gc
void add_keep(CLI::App& app, int& status);
void add_gc(CLI::App& app, int& status);
void add_config(CLI::App& app, int& status);   // config.cpp
void add_status(CLI::App& app, int& status);   // status.cpp
void add_report(CLI::App& app, int& status);   // report.cpp

}  // namespace iofwd::tool
