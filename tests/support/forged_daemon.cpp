// A daemon of the rank's own user that is broken or lies: it listens at the
// session's socket as iod does, admits the first rank, and tells it what a
// real daemon never would, in ACCEPT or in a later message by mode; then it
// says what the rank did. For the tests of what a rank takes from its daemon
// (libio/client: writer.cpp's push, connection.cpp's descriptors,
// reader.cpp's read from daemon memory).
//   forged_daemon SOCKET MODE SECONDS
// MODE:
//   chunk-one-byte  ACCEPT names a puller (its own UCX worker) and a chunk of
//                   one byte: a pushed write of 2 MiB would be 2 Mi chunks,
//                   more than a daemon takes in one write
//   chunk-wrap      the same with a chunk of 2^64 - 1 bytes, whose rounded-up
//                   count wraps to 0 when added up naively
//   late-fds        an ordinary ACCEPT (no puller); each WRITE_REQ is answered
//                   WRITE_DONE (the next version, its bytes never read) with a
//                   descriptor (a memfd named "forged-late-fd"), which no rank
//                   expects after ACCEPT
//   read-size       any version asked for (QUERY) holds 4096 bytes in memory;
//                   a READ_REQ gets those bytes, then a closing VERSION_STATE
//                   that says 2^40 bytes: more than came
//   read-overlap    any version holds 8192 bytes; a READ_REQ gets bytes
//                   [0, 8192) 8192 times over, then a VERSION_STATE that says
//                   64 MiB: as many as came, far more than the rank's buffer
// In the chunk modes, after the first WRITE_REQ it takes what the rank
// pushes (dropped, counted) until the announced length has come or 5 s
// have passed, then hangs up. In the others it answers BYE with FINISHED
// and ends when the rank hangs up or after SECONDS. Prints "listening",
// "accepted chunk <n>", "got <TYPE>" for each message, then "rank closed"
// (or "bad message: <why>") and, at the end, "closed" and "pushed <chunks>
// bytes <n>".
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "crc32c.hpp"
#include "fd_passing.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

namespace {

using namespace iofwd;
using clock_type = std::chrono::steady_clock;

enum class lie { chunk_one_byte, chunk_wrap, late_fds, read_size, read_overlap };

bool parse_mode(std::string_view s, lie& out)
{
    if (s == "chunk-one-byte") out = lie::chunk_one_byte;
    else if (s == "chunk-wrap") out = lie::chunk_wrap;
    else if (s == "late-fds") out = lie::late_fds;
    else if (s == "read-size") out = lie::read_size;
    else if (s == "read-overlap") out = lie::read_overlap;
    else return false;
    return true;
}

struct pushed_count {
    std::uint64_t chunks = 0, bytes = 0;
};

ucs_status_t on_push(void* arg, const void*, size_t, void*, size_t length,
                     const ucp_am_recv_param_t*)
{
    auto* n = static_cast<pushed_count*>(arg);
    ++n->chunks;
    n->bytes += length;
    return UCS_OK;  // dropped: UCX releases a rendezvous it was not asked to receive
}

int listen_at(const char* path)
{
    const int ls = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
    ::unlink(path);
    if (ls < 0 || ::bind(ls, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(ls, 8) != 0) {
        std::perror("forged_daemon: bind/listen");
        return -1;
    }
    return ls;
}

void progress(const ucx::worker& worker)
{
    while (ucp_worker_progress(worker.get()) != 0) {
    }
}

enum class heard { message, nothing, closed, bad };

// The next whole message from `fd` (`in` holds what came before), the worker
// progressed meanwhile: nothing when none came within `wait`, bad (with
// `why`) when what came is no message.
heard next_message(int fd, std::vector<std::byte>& in, proto::message& out,
                   std::chrono::milliseconds wait, const ucx::worker& worker, std::string& why)
{
    const auto end = clock_type::now() + wait;
    for (;;) {
        std::size_t used = 0;
        if (proto::decode_frame(in, out, used, why))
            return heard::bad;
        if (used > 0) {
            in.erase(in.begin(), in.begin() + static_cast<long>(used));
            return heard::message;
        }
        if (clock_type::now() >= end)
            return heard::nothing;
        progress(worker);
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 5) <= 0)
            continue;
        std::byte buf[8192];
        std::vector<unique_fd> fds;
        const ssize_t n = receive_with_fds(fd, buf, 0, fds);
        if (n <= 0)
            return heard::closed;
        in.insert(in.end(), buf, buf + n);
    }
}

bool send_message(int fd, const proto::message& m, int extra_fd = -1)
{
    const auto b = proto::encode(m);
    const int fds[] = {extra_fd};
    const ssize_t n = extra_fd >= 0 ? send_with_fds(fd, b, fds)
                                    : ::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(b.size()))
        return true;
    std::printf("%s not sent\n", proto::to_string(proto::type_of(m)));
    return false;
}

proto::version_state_msg in_memory(std::uint64_t cookie, std::uint64_t version,
                                   std::uint64_t size, std::uint32_t crc)
{
    proto::version_state_msg st;
    st.cookie = cookie;
    st.version = version;
    st.state = proto::version_state_t::flushing;
    st.size = size;
    st.crc32c = crc;
    return st;
}

}  // namespace

int main(int argc, char** argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    lie mode{};
    if (argc != 4 || !parse_mode(argv[2], mode)) {
        std::fprintf(stderr, "usage: forged_daemon SOCKET chunk-one-byte|chunk-wrap|late-fds|"
                             "read-size|read-overlap SECONDS\n");
        return 2;
    }
    const bool chunks = mode == lie::chunk_one_byte || mode == lie::chunk_wrap;
    const std::uint64_t chunk = mode == lie::chunk_one_byte ? 1
                                : mode == lie::chunk_wrap   ? UINT64_MAX
                                                            : 16u << 20;
    const auto end = clock_type::now() + std::chrono::seconds(std::atoi(argv[3]));
    pushed_count pushed;  // before the worker, whose handler points at it
    ucx::context ctx;
    ucx::worker worker;
    if (ucx::context::create(UCP_FEATURE_AM, "forged-daemon", ctx) ||
        ucx::worker::create(ctx, worker)) {
        std::printf("setup-failed ucx\n");
        return 3;
    }
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = proto::am_push;
    handler.cb = on_push;
    handler.arg = &pushed;
    if (ucp_worker_set_am_recv_handler(worker.get(), &handler) != UCS_OK) {
        std::printf("setup-failed am handler\n");
        return 3;
    }
    const int ls = listen_at(argv[1]);
    if (ls < 0)
        return 3;
    std::printf("listening\n");
    const auto left = [&] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(end - clock_type::now());
    };
    pollfd p{ls, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<long>(0, left().count()))) <= 0) {
        std::printf("no rank came\n");
        return 4;
    }
    const int c = ::accept(ls, nullptr, nullptr);
    std::vector<std::byte> in;
    proto::message m;
    std::string why;
    if (c < 0 || next_message(c, in, m, left(), worker, why) != heard::message ||
        !std::holds_alternative<proto::connect_msg>(m)) {
        std::printf("no CONNECT\n");
        return 4;
    }
    proto::accept_msg a;
    a.daemon_pid = static_cast<std::uint32_t>(::getpid());
    a.staging_bytes = 256u << 20;
    a.chunk_bytes = chunk;
    a.next_version = 1;
    a.node = "forged";
    a.store = "nowhere";
    a.store_uri = "dir:/nonexistent-forged-store";
    a.transport = "?";
    a.session = 0x5eed;
    if (chunks) {
        a.pullers.resize(1);
        if (worker.address(a.pullers[0].address)) {
            std::printf("setup-failed worker address\n");
            return 3;
        }
    }
    if (!send_message(c, a))
        return 4;
    std::printf("accepted chunk %llu\n", static_cast<unsigned long long>(chunk));
    std::uint64_t version = 0, bytes_done = 0, announced = 0;
    while (clock_type::now() < end) {
        const heard h = next_message(c, in, m, std::chrono::milliseconds(100), worker, why);
        if (h == heard::nothing)
            continue;
        if (h != heard::message) {
            std::printf(h == heard::closed ? "rank closed\n" : "bad message: %s\n", why.c_str());
            break;
        }
        std::printf("got %s\n", proto::to_string(proto::type_of(m)));
        if (const auto* w = std::get_if<proto::write_req_msg>(&m)) {
            if (chunks) {
                announced = w->length;
                break;
            }
            const unique_fd extra(::memfd_create("forged-late-fd", MFD_CLOEXEC));
            send_message(c, proto::write_done_msg{w->cookie, ++version}, extra.get());
            bytes_done += w->length;
        } else if (const auto* q = std::get_if<proto::query_msg>(&m)) {
            const std::vector<std::byte> held(mode == lie::read_overlap ? 8192 : 4096,
                                              std::byte{0x5a});
            send_message(c, in_memory(q->cookie, q->version, held.size(), crc32c(held)));
        } else if (const auto* r = std::get_if<proto::read_req_msg>(&m)) {
            const bool overlap = mode == lie::read_overlap;
            const std::vector<std::byte> held(overlap ? 8192 : 4096, std::byte{0x5a});
            const std::uint64_t times = overlap ? 8192 : 1;
            for (std::uint64_t i = 0; i < times; ++i)
                send_message(c, proto::read_data_msg{r->cookie, 0, held});
            const std::uint64_t said = overlap ? times * held.size() : 1ull << 40;
            send_message(c, in_memory(r->cookie, r->version, said, crc32c(held)));
        } else if (std::holds_alternative<proto::bye_msg>(m)) {
            send_message(c, proto::finished_msg{version, bytes_done, 0});
        }
    }
    // A push the rank started is taken (and dropped) before the hang-up.
    for (const auto until = clock_type::now() + std::chrono::seconds(5);
         pushed.bytes < announced && clock_type::now() < until;)
        progress(worker);
    ::close(c);
    std::printf("closed\n");
    std::printf("pushed %llu bytes %llu\n", static_cast<unsigned long long>(pushed.chunks),
                static_cast<unsigned long long>(pushed.bytes));
    return 0;
}
