#pragma once
// Which iod a rank launches when io_init is given no daemon_args.
//
// A program must run the daemon that was installed with the library it
// links: after a rebuild of the source tree, an installed program that
// started the build tree's iod would run another daemon than its own (other
// protocol, other fixes). So the library finds iod relative to its own file
// (dladdr of a function of the client, which lives in libiofwd and in the
// MPI shim), in this order:
//   1. IOFWD_IOD, when set and not empty;
//   2. a library in the build tree (its directory is the build directory of
//      libio/ or mpi_shim/, the same directory by device and inode) runs the
//      build tree's iod/iod, so tests and examples run uninstalled;
//   3. any other copy runs <its directory>/IOFWD_IOD_FROM_LIBDIR, the path
//      from libdir to bindir/iod computed at configure time (relative when
//      both are inside the prefix, so a DESTDIR or moved install stays
//      consistent);
//   4. only when the library cannot tell where its own file is (dladdr
//      fails): the configured PREFIX/BINDIR/iod.
// Never the build tree from an installed library, and never a search of PATH:
// a missing iod is an error that names the path tried (iod_choice::how).
#include <string>

namespace iofwd::client {

struct iod_choice {
    std::string path;  // absolute, unless IOFWD_IOD says otherwise
    std::string how;   // for messages: "IOFWD_IOD", "installed with /p/lib/libiofwd.so.0.1.0"...
};

iod_choice choose_iod();

}  // namespace iofwd::client
