// Drives a live daemon over its socket with what a broken or hostile peer of
// the same user could send: sequences that start valid (a CONNECT with a real
// UCX worker address and key of this process, then writes, queries, reads,
// file opens, writes and syncs, BYE; now and then a length no rank would
// send) and are then mutated (bits flipped, bytes cut or added,
// lengths and types rewritten, messages shuffled or repeated), each on a
// connection of its own. Prints what it did; the test then checks that the
// daemon still serves a real checkpoint.
//   daemon_fuzz SOCKET SECONDS SCRATCH_DIR [SEED]   (forwarded files go in SCRATCH_DIR)
// Output: "seed S", then "connections N answered A closed C timeouts T".
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "protocol.hpp"
#include "ucx.hpp"

namespace {

using namespace iofwd;
using clock_type = std::chrono::steady_clock;
using bytes = std::vector<std::byte>;

struct peer {
    ucx::context ctx;
    ucx::worker worker;
    ucx::memory memory;
    std::vector<std::byte> buffer = std::vector<std::byte>(1 << 20, std::byte{7});
    bytes address, rkey;
};

bool make_peer(peer& p)
{
    return !ucx::context::create(UCP_FEATURE_RMA | UCP_FEATURE_AM, "daemon-fuzz", p.ctx) &&
           !ucx::worker::create(p.ctx, p.worker) && !p.worker.address(p.address) &&
           !ucx::memory::map(p.ctx, p.buffer.data(), p.buffer.size(), p.memory) &&
           !p.memory.pack_rkey(p.rkey);
}

// A length a hostile peer would try: the edges of the 32- and 64-bit ranges
// as well as any.
std::uint64_t extreme_length(std::mt19937_64& rng)
{
    switch (rng() % 8) {
    case 0: return 0;
    case 1: return std::uint64_t{1} << 32;
    case 2: return std::uint64_t{1} << 62;
    case 3: return UINT64_MAX;
    case 4: return UINT64_MAX - rng() % 4096;
    case 5: return (std::uint64_t{1} << 44) + rng() % 4096;
    case 6: return 1 + rng() % (std::uint64_t{1} << 40);
    default: return rng();
    }
}

// A plausible session: what a real rank or the shim would send, now and
// then with a length no rank would send.
std::vector<bytes> session(const peer& p, const std::string& scratch, std::mt19937_64& rng)
{
    std::vector<bytes> out;
    proto::connect_msg c;
    c.rank = static_cast<std::uint32_t>(rng() % 4);
    c.ranks = 4;
    c.pid = static_cast<std::uint32_t>(getpid());
    c.flags = static_cast<std::uint32_t>(rng() % 16);
    c.buffer_length = rng() % 8 ? p.buffer.size() : extreme_length(rng);
    c.buffer_address = reinterpret_cast<std::uint64_t>(p.buffer.data());
    c.nodes = 1;
    c.job = rng() % 2 ? "fuzzjob" : "itest";
    c.run = rng() % 2 ? "" : "fuzz-run";
    c.worker_address = p.address;
    c.rkey = p.rkey;
    out.push_back(proto::encode(c));
    const int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
        const std::uint64_t cookie = i + 1;
        switch (rng() % 9) {
        case 0: {
            const std::uint64_t len = 1 + rng() % 4096;
            out.push_back(proto::encode(proto::write_req_msg{
                cookie, len, bytes(static_cast<std::size_t>(len), std::byte{3})}));
            break;
        }
        case 1: out.push_back(proto::encode(proto::write_req_msg{cookie, 1 + rng() % (1 << 20), {}})); break;
        case 2: out.push_back(proto::encode(proto::query_msg{cookie, rng() % 5, static_cast<std::uint32_t>(rng() % 2)})); break;
        case 3: out.push_back(proto::encode(proto::read_req_msg{cookie, rng() % 5})); break;
        case 4: out.push_back(proto::encode(proto::file_open_msg{cookie, 1, scratch + "/file"})); break;
        case 5: out.push_back(proto::encode(proto::ping_msg{})); break;
        case 6: {  // to the file of case 4: inline, pulled from our buffer, or pushed
            proto::file_write_msg w{cookie, 1, rng() % (1 << 20), 0, 0, {}, {}, {}};
            switch (rng() % 3) {
            case 0:
                w.length = 1 + rng() % 4096;
                w.data.assign(static_cast<std::size_t>(w.length), std::byte{5});
                break;
            case 1:
                w.length = rng() % 2 ? 1 + rng() % p.buffer.size() : extreme_length(rng);
                w.address = reinterpret_cast<std::uint64_t>(p.buffer.data());
                w.rkey = p.rkey;
                break;
            default: w.length = extreme_length(rng); break;
            }
            if (rng() % 4 == 0)
                w.offset = extreme_length(rng);
            out.push_back(proto::encode(w));
            break;
        }
        case 7:
            out.push_back(proto::encode(proto::file_sync_msg{
                cookie, 1, static_cast<std::uint32_t>(rng() % 4)}));
            break;
        default: out.push_back(proto::encode(proto::bye_msg{})); break;
        }
    }
    return out;
}

void mutate(std::vector<bytes>& msgs, std::mt19937_64& rng)
{
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !msgs.empty(); ++e) {
        bytes& m = msgs[rng() % msgs.size()];
        if (m.empty())
            continue;  // cut to nothing already
        switch (rng() % 8) {
        case 0:  // flip bits anywhere, the UCX address and key included
            for (int k = 0; k < 1 + static_cast<int>(rng() % 8); ++k)
                m[rng() % m.size()] ^= static_cast<std::byte>(1u << (rng() % 8));
            break;
        case 1: m.resize(rng() % m.size()); break;                     // cut
        case 2: m.resize(m.size() + rng() % 64, std::byte{0xff}); break;  // grow
        case 3:  // another type in the header (of a message not cut shorter than it)
            if (m.size() > 6)
                m[6] = static_cast<std::byte>(rng() % 24);
            break;
        case 4:  // a length field anywhere after the header, 32 or 64 bits
            if (m.size() > proto::header_size + 8) {
                const std::size_t at = proto::header_size + rng() % (m.size() - proto::header_size - 8);
                if (rng() % 2) {
                    const std::uint32_t v = static_cast<std::uint32_t>(rng());
                    std::memcpy(m.data() + at, &v, sizeof v);
                } else {
                    const std::uint64_t v = extreme_length(rng);
                    std::memcpy(m.data() + at, &v, sizeof v);
                }
            }
            break;
        case 5: msgs.push_back(m); break;                              // repeat
        case 6: std::swap(msgs.front(), msgs[rng() % msgs.size()]); break;  // reorder
        default:  // the payload length in the header
            if (m.size() >= proto::header_size) {
                const std::uint64_t v = rng() % 3 ? rng() % 70000 : rng();
                std::memcpy(m.data() + 8, &v, sizeof v);
            }
            break;
        }
    }
}

}  // namespace

int main(int argc, char** argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: daemon_fuzz SOCKET SECONDS SCRATCH_DIR [SEED]\n");
        return 2;
    }
    const std::string path = argv[1];
    const double seconds = std::atof(argv[2]);
    const std::string scratch = argv[3];
    const std::uint64_t seed = argc > 4 ? std::strtoull(argv[4], nullptr, 10)
                                        : static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count());
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    std::fflush(stdout);
    std::mt19937_64 rng(seed);
    // The file the sessions open and write (the shim's MPI-IO makes it first).
    const std::string file = scratch + "/file";
    if (std::FILE* f = std::fopen(file.c_str(), "a"))
        std::fclose(f);
    peer p;
    if (!make_peer(p)) {
        std::fprintf(stderr, "daemon_fuzz: no UCX\n");
        return 3;
    }
    long connections = 0, answered = 0, closed = 0, timeouts = 0;
    const auto end = clock_type::now() + std::chrono::duration<double>(seconds);
    while (clock_type::now() < end) {
        auto msgs = session(p, scratch, rng);
        if (rng() % 8 != 0)  // now and then a valid session, unmutated
            mutate(msgs, rng);
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
            std::printf("connect failed after %ld connections: %s\n", connections,
                        std::strerror(errno));
            return 1;  // the daemon is gone
        }
        ++connections;
        for (const auto& m : msgs)
            if (::send(fd, m.data(), m.size(), MSG_NOSIGNAL) < 0)
                break;
        // Read answers for a moment, then hang up. Our UCX is never
        // progressed: a peer that does not serve the daemon's reads is one
        // more thing the daemon must survive, and a mutated buffer address
        // would have our own UCX copy from memory we do not have.
        bool got = false;
        const auto until = clock_type::now() + std::chrono::milliseconds(20 + rng() % 80);
        for (;;) {
            pollfd pfd{fd, POLLIN, 0};
            if (::poll(&pfd, 1, 5) > 0) {
                char buf[4096];
                const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
                if (n <= 0) {
                    ++closed;
                    break;
                }
                got = true;
            }
            if (clock_type::now() > until) {
                ++timeouts;
                break;
            }
        }
        answered += got;
        ::close(fd);
    }
    std::printf("connections %ld answered %ld closed %ld timeouts %ld\n", connections, answered,
                closed, timeouts);
    return 0;
}
