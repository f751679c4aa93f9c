// A daemon of the rank's own user that is broken or hostile: it listens at
// the session's socket as iod does, admits the first rank with an ACCEPT
// whose values a real daemon never sends, and says what the rank did. For
// the tests of what a rank takes from its daemon (libio/client/writer.cpp).
//   forged_daemon SOCKET MODE SECONDS
// MODE:
//   chunk-one-byte  ACCEPT names a puller (its own UCX worker) and a chunk of
//                   one byte: a pushed write of 2 MiB would be 2 Mi chunks,
//                   more than a daemon takes in one write
//   chunk-wrap      the same with a chunk of 2^64 - 1 bytes, whose rounded-up
//                   count wraps to 0 when added up naively
//   late-fds        no puller; answers each WRITE_REQ with WRITE_DONE (the
//                   version after the last, its bytes never read) and sends
//                   a descriptor with it (a memfd named "forged-late-fd"),
//                   which no rank expects after ACCEPT; answers BYE with
//                   FINISHED
//   read-size       says of any version asked for (QUERY) that it holds 4096
//                   bytes in memory; a READ_REQ gets those bytes, then a
//                   closing VERSION_STATE that says 2^40 bytes; answers BYE
//                   with FINISHED
// After ACCEPT it prints each message the rank sends ("got <TYPE>"), and in
// the chunk modes closes the connection after the first WRITE_REQ
// ("closed"); else at the end of SECONDS, or when the rank closes. Chunks
// pushed to its worker are taken and dropped, each counted: "pushed <n>
// bytes <b>" at the end.
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

struct pushed_count {
    std::uint64_t chunks = 0, bytes = 0;
};

ucs_status_t on_push(void* arg, const void*, size_t, void*, size_t length,
                     const ucp_am_recv_param_t*)
{
    auto* n = static_cast<pushed_count*>(arg);
    ++n->chunks;
    n->bytes += length;
    return UCS_OK;  // dropped: a rendezvous is released unread
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

enum class heard { message, nothing, closed };

// Reads one whole message from `fd` into `out`, with `in` holding what came
// before, progressing `worker` meanwhile: nothing when none came for `ms`,
// closed when the peer closed or sent what is no message.
heard next_message(int fd, std::vector<std::byte>& in, proto::message& out, int ms,
                   const ucx::worker& worker)
{
    const auto end = clock_type::now() + std::chrono::milliseconds(ms);
    for (;;) {
        proto::header h;
        std::string why;
        if (in.size() >= proto::header_size && !proto::decode_header(in, h, why) &&
            in.size() >= proto::header_size + h.length) {
            const bool ok = !proto::decode_payload(
                h, std::span(in).subspan(proto::header_size, h.length), out, why);
            in.erase(in.begin(), in.begin() + static_cast<long>(proto::header_size + h.length));
            return ok ? heard::message : heard::closed;
        }
        if (clock_type::now() >= end)
            return heard::nothing;
        while (ucp_worker_progress(worker.get()) != 0) {
        }
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

}  // namespace

int main(int argc, char** argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc != 4) {
        std::fprintf(stderr,
                     "usage: forged_daemon SOCKET chunk-one-byte|chunk-wrap|late-fds|read-size SECONDS\n");
        return 2;
    }
    const std::string_view mode = argv[2];
    std::uint64_t chunk = 16u << 20;
    const bool late_fds = mode == "late-fds", read_size = mode == "read-size";
    const bool chunks = !late_fds && !read_size;
    if (mode == "chunk-one-byte")
        chunk = 1;
    else if (mode == "chunk-wrap")
        chunk = UINT64_MAX;
    else if (chunks) {
        std::fprintf(stderr, "forged_daemon: unknown mode %s\n", argv[2]);
        return 2;
    }
    const int seconds = std::atoi(argv[3]);
    ucx::context ctx;
    ucx::worker worker;
    if (ucx::context::create(UCP_FEATURE_AM, "forged-daemon", ctx) ||
        ucx::worker::create(ctx, worker)) {
        std::printf("setup-failed ucx\n");
        return 3;
    }
    pushed_count pushed;
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
    pollfd p{ls, POLLIN, 0};
    if (::poll(&p, 1, seconds * 1000) <= 0) {
        std::printf("no rank came\n");
        return 4;
    }
    const int c = ::accept(ls, nullptr, nullptr);
    std::vector<std::byte> in;
    proto::message m;
    if (c < 0 || next_message(c, in, m, 5000, worker) != heard::message ||
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
    a.pullers.resize(chunks ? 1 : 0);
    if (chunks && worker.address(a.pullers[0].address)) {
        std::printf("setup-failed worker address\n");
        return 3;
    }
    const auto bytes = proto::encode(a);
    if (::send(c, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
        std::printf("ACCEPT not sent\n");
        return 4;
    }
    std::printf("accepted chunk %llu\n", static_cast<unsigned long long>(chunk));
    const auto end = clock_type::now() + std::chrono::seconds(seconds);
    std::uint64_t version = 0, bytes_done = 0;
    while (clock_type::now() < end) {
        const heard h = next_message(c, in, m, 100, worker);
        if (h == heard::closed) {
            std::printf("rank closed\n");
            break;
        }
        if (h == heard::nothing)
            continue;
        std::printf("got %s\n", proto::to_string(proto::type_of(m)));
        if (chunks) {
            if (std::holds_alternative<proto::write_req_msg>(m))
                break;
            continue;
        }
        const auto answer = [&](const proto::message& out) {
            const auto b = proto::encode(out);
            if (::send(c, b.data(), b.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(b.size()))
                std::printf("%s not sent\n", proto::to_string(proto::type_of(out)));
        };
        const std::vector<std::byte> held(4096, std::byte{0x5a});
        if (const auto* q = std::get_if<proto::query_msg>(&m); q && read_size) {
            proto::version_state_msg st;
            st.cookie = q->cookie;
            st.version = q->version;
            st.state = proto::version_state_t::flushing;
            st.size = held.size();
            st.crc32c = crc32c(held);
            answer(st);
        } else if (const auto* r = std::get_if<proto::read_req_msg>(&m); r && read_size) {
            answer(proto::read_data_msg{r->cookie, 0, held});
            proto::version_state_msg st;
            st.cookie = r->cookie;
            st.version = r->version;
            st.state = proto::version_state_t::flushing;
            st.size = 1ull << 40;
            st.crc32c = crc32c(held);
            answer(st);
        } else if (const auto* w = std::get_if<proto::write_req_msg>(&m); w && late_fds) {
            const unique_fd extra(::memfd_create("forged-late-fd", MFD_CLOEXEC));
            const auto done = proto::encode(proto::write_done_msg{w->cookie, ++version});
            const int fds[] = {extra.get()};
            if (send_with_fds(c, done, fds) != static_cast<ssize_t>(done.size()))
                std::printf("WRITE_DONE not sent\n");
            bytes_done += w->length;
        } else if (std::holds_alternative<proto::bye_msg>(m)) {
            answer(proto::finished_msg{version, bytes_done, 0});
        }
    }
    // Whatever the rank pushed before the close is taken (and dropped).
    for (const auto until = clock_type::now() + std::chrono::milliseconds(200);
         clock_type::now() < until;)
        ucp_worker_progress(worker.get());
    ::close(c);
    std::printf("closed\n");
    std::printf("pushed %llu bytes %llu\n", static_cast<unsigned long long>(pushed.chunks),
                static_cast<unsigned long long>(pushed.bytes));
    return 0;
}
