#pragma once
// What a daemon launched by a rank tells that rank about its start, on the
// descriptor the rank passed it (iod --ready-fd): exactly one line, then the
// daemon closes it.
//
//   "ready\n"                      the socket accepts connections
//   "error <errno>: <sentence>\n"  it could not start: the errno value of the
//                                  cause (ENOENT for a store path through a
//                                  missing directory, EACCES for a store it may
//                                  not write, EINVAL for a bad option...) and
//                                  the daemon's own sentence, one line
//
// The rank turns an error line into io_init's return code and message, so a
// C caller can tell a missing directory from a permission problem. A daemon
// that exits or dies without a line is reported by its exit status and log.
#include <string>
#include <string_view>

namespace iofwd {

std::string start_ready_line();

// `code` outside 1..4095 is sent as EIO; line breaks in `why` become spaces.
std::string start_error_line(int code, std::string_view why);

struct start_report {
    bool ready = false;
    int code = 0;     // errno of the cause, when !ready
    std::string why;  // the daemon's sentence, when !ready
};

// Parses one complete line (with its '\n'); false for anything else (then
// `out` is untouched). An error line with a code outside 1..4095 or no
// sentence is not a valid line.
bool parse_start_line(std::string_view line, start_report& out);

}  // namespace iofwd
