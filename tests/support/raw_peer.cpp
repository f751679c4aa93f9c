// Talks to a daemon socket directly, bypassing libiofwd: sends the bytes it
// is told to and prints what comes back, for tests of malformed input and of
// peers the daemon must refuse.
//   raw_peer SOCKET MODE [ARG [ARG]]
// MODE: garbage | bad-version | oversized | truncated | unknown-type |
//       write-before-connect | hello (a CONNECT with a fake address) |
//       huge-ranks (a CONNECT claiming 0xffffffff ranks) |
//       huge-buffer (a CONNECT with a buffer of 2^62 bytes) |
//       bad-address (a CONNECT whose worker address makes UCX 1.13 abort) |
//       mailbox-garbage (a real UCX worker, admitted with a mailbox, then an
//       impossible tail published in it and the doorbell rung) |
//       forge-push (a real UCX worker, admitted to push as rank 1 of 2 of job
//       itest, then pushes 1 MiB
//       chunks naming the sessions next to its own, as if it were the ranks
//       admitted before and after it, for cookies 1 to 8, to every puller:
//       prints "pushed <n> to <pullers> pullers", then keeps its worker
//       going for 4 s (a chunk the daemon kept is read from it then) and
//       prints "forged <n>"; UCX completes a rendezvous the daemon refused
//       as one it took, so the daemon's log, not this, says which) |
//       repeat-push (a real UCX worker, admitted to push as rank 0 of 1 of
//       job itest, announces version 1 of two chunks, waits 100 ms (the
//       daemon has posted where each goes by then), pushes chunk 0 three
//       times, to the first puller, the second and the first again, and
//       chunk 1 once, bytes i % 251; prints "pushed 4 chunks of <bytes>
//       bytes", the answer, then "finished <n> versions" after BYE) |
//       push-then-announce DONE CHUNKS (a real UCX worker, admitted to push
//       as rank 1 of 2 of job itest, writes DONE versions of one chunk
//       each, bytes i % 251, printing each answer, then announces a write
//       of CHUNKS chunks and pushes none of it: prints "announced <n>
//       chunks of <bytes> bytes" and lives on, progressing its worker,
//       until killed or for 600 s) |
//       huge-write FILE (a real UCX worker, admitted to push files, opens
//       FILE and announces a pushed write of 2^62 bytes to it) |
//       stall-get SECONDS [MIB] (a real UCX worker, admitted as rank 0 of 1
//       of job "stalled" with a registered buffer of MIB MiB (1) for the
//       daemon to get, asks
//       for a write of all of it and never progresses its worker: UCX 1.13
//       emulates the get with this process's CPU, so it never ends; prints
//       "accepted", hangs up after 1 s, prints "hung up", lives on until
//       killed or for SECONDS, then exits) |
//       status (sends STATUS and prints the reply's staging: "staging used
//       <bytes> total <bytes> chunk <bytes> stalled <bytes> waiting <n>";
//       waits up to 10 s, since a daemon's loop may be writing into a slow
//       store)
// Prints "answer <type> <domain> <value> <text>" or "closed" or "timeout".
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fd_passing.hpp"
#include "mailbox.hpp"
#include "protocol.hpp"
#include "ucx.hpp"

namespace {

std::vector<std::byte> raw_header(std::uint32_t magic, std::uint16_t version, std::uint16_t type,
                                  std::uint64_t length)
{
    std::vector<std::byte> out;
    auto put = [&](std::uint64_t v, int n) {
        for (int i = 0; i < n; ++i)
            out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
    };
    put(magic, 4);
    put(version, 2);
    put(type, 2);
    put(length, 8);
    return out;
}

// Reads one message with the descriptors that came with it (at most
// `wait_ms` for each piece).
bool read_message(int fd, iofwd::proto::message& out, std::vector<iofwd::unique_fd>& fds,
                  int wait_ms = 5000)
{
    using namespace iofwd;
    std::vector<std::byte> in;
    proto::header h;
    std::string why;
    while (in.size() < proto::header_size ||
           (!proto::decode_header(in, h, why) && in.size() < proto::header_size + h.length)) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, wait_ms) <= 0)
            return false;
        std::byte buf[8192];
        const ssize_t n = receive_with_fds(fd, buf, 0, fds);
        if (n <= 0)
            return false;
        in.insert(in.end(), buf, buf + n);
    }
    return !proto::decode_payload(h, std::span(in).subspan(proto::header_size, h.length), out, why);
}

// Admits a real UCX worker as `rank` of `ranks` of job itest (files, with
// `flags`, and versions of up to `buffer` bytes) and returns the ACCEPT.
bool admit(int fd, iofwd::ucx::worker& worker, std::uint32_t rank, std::uint32_t ranks,
           std::uint32_t flags, iofwd::proto::accept_msg& out, std::vector<iofwd::unique_fd>& fds,
           std::uint64_t buffer = 0)
{
    using namespace iofwd;
    proto::connect_msg m;
    if (worker.address(m.worker_address))
        return false;
    m.rank = rank;
    m.ranks = ranks;
    m.flags = proto::connect_flag_files | flags;
    m.buffer_length = buffer;
    m.job = "itest";
    const auto hello = proto::encode(m);
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    proto::message a;
    if (!read_message(fd, a, fds))
        return false;
    if (const auto* e = std::get_if<proto::error_msg>(&a))
        std::printf("refused: %s\n", e->text.c_str());
    if (!std::holds_alternative<proto::accept_msg>(a))
        return false;
    out = std::get<proto::accept_msg>(a);
    return true;
}

// A real UCX worker admitted to push, with an endpoint to each puller
// ACCEPT named (in the order they go).
struct pusher {
    iofwd::ucx::context ctx;
    iofwd::ucx::worker worker;
    iofwd::proto::accept_msg a;
    std::vector<iofwd::unique_fd> fds;
    std::vector<iofwd::ucx::endpoint> eps;
};

// Joins as `rank` of `ranks` of job itest (versions of up to `buffer`
// bytes) with at least `pullers` pullers: 0, or the exit code once what
// failed is said.
int join_to_push(int fd, std::uint32_t rank, std::uint32_t ranks, std::uint64_t buffer,
                 std::size_t pullers, pusher& p)
{
    using namespace iofwd;
    if (ucx::context::create(UCP_FEATURE_AM, "raw-peer", p.ctx) ||
        ucx::worker::create(p.ctx, p.worker))
        return std::printf("setup-failed ucx\n"), 3;
    if (!admit(fd, p.worker, rank, ranks, proto::connect_flag_push, p.a, p.fds, buffer) ||
        p.a.pullers.size() < pullers)
        return std::printf("setup-failed not admitted to push to %zu pullers\n", pullers), 4;
    p.eps.resize(p.a.pullers.size());
    for (std::size_t i = 0; i < p.eps.size(); ++i)
        if (ucx::endpoint::connect(p.worker.get(), p.a.pullers[i].address, nullptr, nullptr,
                                   p.eps[i]) != UCS_OK)
            return std::printf("setup-failed no endpoint to puller %zu\n", i), 5;
    return 0;
}

// Pushes chunks naming other sessions than its own; see the modes above.
int forge_push(int fd)
{
    using namespace iofwd;
    pusher p;
    if (const int rc = join_to_push(fd, 1, 2, 0, 1, p))
        return rc;
    auto& [ctx, worker, a, fds, eps] = p;
    std::vector<std::byte> bytes(1 << 20, std::byte{0xee});
    struct sent {
        std::byte header[proto::push_header_size];  // UCX's until the send ends
    };
    std::vector<sent> pushes;
    pushes.reserve(4 * 2 * 8 * eps.size());
    for (std::uint64_t d = 1; d <= 4; ++d)
        for (const std::uint64_t s : {a.session - d, a.session + d})
            for (std::uint64_t cookie = 1; cookie <= 8; ++cookie)
                for (auto& ep : eps) {
                    auto& p = pushes.emplace_back();
                    proto::encode_push_header(proto::push_header{s, cookie, 0}, p.header);
                    ucp_request_param_t param{};
                    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                    param.flags = UCP_AM_SEND_FLAG_RNDV;
                    // Requests are left to UCX: the process ends with _exit.
                    ucp_am_send_nbx(ep.get(), proto::am_push, p.header, proto::push_header_size,
                                    bytes.data(), bytes.size(), &param);
                }
    std::printf("pushed %zu to %zu pullers\n", pushes.size(), eps.size());
    std::fflush(stdout);
    // Progress for 4 s: a chunk the daemon kept is read (taken) when a
    // write of that session and cookie is announced.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
    while (std::chrono::steady_clock::now() < until) {
        worker.progress();
        ::usleep(1000);
    }
    std::printf("forged %zu\n", pushes.size());
    std::fflush(stdout);
    ::_exit(0);  // requests still in flight die with the process
}

// Progresses `worker` until the answer to a write has come and none of
// `requests` (UCX's, of the write's pushes) is still sending: at most 10 s.
// Prints the answer ("answer WRITE_DONE version <v>", or what came instead:
// then false, as for "closed" and "timeout").
bool await_write_done(int fd, iofwd::ucx::worker& worker, const std::vector<void*>& requests,
                      std::vector<iofwd::unique_fd>& fds)
{
    using namespace iofwd;
    proto::message answer;
    bool answered = false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < until) {
        worker.progress();
        bool sending = false;
        for (void* r : requests)
            sending |= UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS;
        pollfd pf{fd, POLLIN, 0};
        if (!answered && ::poll(&pf, 1, 0) > 0) {
            if (!read_message(fd, answer, fds))
                return std::printf("closed\n"), false;
            answered = true;
        }
        if (answered && !sending)
            break;
        ::usleep(100);
    }
    if (!answered)
        return std::printf("timeout\n"), false;
    if (const auto* e = std::get_if<proto::error_msg>(&answer))
        return std::printf("answer ERROR %u %d %s\n", static_cast<unsigned>(e->domain), e->value,
                           e->text.c_str()), false;
    const auto* done = std::get_if<proto::write_done_msg>(&answer);
    if (!done)
        return std::printf("answer %s\n", proto::to_string(proto::type_of(answer))), false;
    std::printf("answer WRITE_DONE version %llu\n", static_cast<unsigned long long>(done->version));
    std::fflush(stdout);
    return true;
}

// Pushes one chunk three times; see repeat-push above.
int repeat_push(int fd)
{
    using namespace iofwd;
    constexpr std::uint64_t buffer = 64u << 20;
    pusher p;
    if (const int rc = join_to_push(fd, 0, 1, buffer, 2, p))
        return rc;
    auto& [ctx, worker, a, fds, eps] = p;
    if (a.chunk_bytes == 0 || 2 * a.chunk_bytes > buffer)
        return std::printf("setup-failed two chunks of %llu bytes do not fit\n",
                           static_cast<unsigned long long>(a.chunk_bytes)), 4;
    const std::uint64_t chunk = a.chunk_bytes;
    std::vector<std::byte> bytes(2 * chunk);
    for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<std::byte>(i % 251);
    const auto req = proto::encode(proto::write_req_msg{1, bytes.size(), {}});
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    ::usleep(100'000);
    struct sent {
        std::byte header[proto::push_header_size];  // UCX's until the send ends
        void* request = nullptr;
    };
    std::vector<sent> pushes(4);
    const std::uint64_t offsets[] = {0, 0, 0, chunk};
    for (std::size_t i = 0; i < pushes.size(); ++i) {
        proto::encode_push_header(proto::push_header{a.session, 1, offsets[i]}, pushes[i].header);
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_AM_SEND_FLAG_RNDV;
        pushes[i].request =
            ucp_am_send_nbx(eps[i == 1 ? 1 : 0].get(), proto::am_push, pushes[i].header,
                            proto::push_header_size, bytes.data() + offsets[i], chunk, &param);
        if (UCS_PTR_IS_ERR(pushes[i].request))
            return std::printf("setup-failed push %zu\n", i), 6;
    }
    std::printf("pushed 4 chunks of %llu bytes\n", static_cast<unsigned long long>(chunk));
    std::fflush(stdout);
    // The answer comes once both chunks are in staging; the sends end as
    // the daemon reads or refuses them.
    std::vector<void*> requests;
    for (const auto& p : pushes)
        requests.push_back(p.request);
    if (!await_write_done(fd, worker, requests, fds))
        return 0;
    const auto bye = proto::encode(proto::bye_msg{});
    ::send(fd, bye.data(), bye.size(), MSG_NOSIGNAL);
    proto::message end;
    if (!read_message(fd, end, fds))
        return std::printf("no answer to BYE\n"), 0;
    if (const auto* f = std::get_if<proto::finished_msg>(&end))
        std::printf("finished %llu versions\n", static_cast<unsigned long long>(f->versions));
    else
        std::printf("answer to BYE %s\n", proto::to_string(proto::type_of(end)));
    std::fflush(stdout);
    ::_exit(0);  // requests still in flight die with the process
}

// Writes `done` versions of one chunk each, then announces one of
// `chunks` chunks and pushes none of it; see push-then-announce above.
int push_then_announce(int fd, unsigned done, unsigned chunks)
{
    using namespace iofwd;
    constexpr std::uint64_t buffer = 64u << 20;
    pusher p;
    if (const int rc = join_to_push(fd, 1, 2, buffer, 1, p))
        return rc;
    auto& [ctx, worker, a, fds, eps] = p;
    if (a.chunk_bytes == 0 || chunks * a.chunk_bytes > buffer)
        return std::printf("setup-failed %u chunks of %llu bytes do not fit\n", chunks,
                           static_cast<unsigned long long>(a.chunk_bytes)), 4;
    std::vector<std::byte> bytes(a.chunk_bytes);
    for (std::size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<std::byte>(i % 251);
    std::byte header[proto::push_header_size];  // UCX's until the send ends
    for (std::uint64_t cookie = 1; cookie <= done; ++cookie) {
        const auto req = proto::encode(proto::write_req_msg{cookie, bytes.size(), {}});
        ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
        proto::encode_push_header(proto::push_header{a.session, cookie, 0}, header);
        ucp_request_param_t param{};
        param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = UCP_AM_SEND_FLAG_RNDV;
        void* sent = ucp_am_send_nbx(eps[0].get(), proto::am_push, header,
                                     proto::push_header_size, bytes.data(), bytes.size(), &param);
        if (UCS_PTR_IS_ERR(sent))
            return std::printf("setup-failed push of write %llu\n",
                               static_cast<unsigned long long>(cookie)), 6;
        const bool written = await_write_done(fd, worker, {sent}, fds);
        if (UCS_PTR_IS_PTR(sent))
            ucp_request_free(sent);
        if (!written)
            return 0;
    }
    const auto req = proto::encode(proto::write_req_msg{done + 1u, chunks * a.chunk_bytes, {}});
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    std::printf("announced %u chunks of %llu bytes\n", chunks,
                static_cast<unsigned long long>(a.chunk_bytes));
    std::fflush(stdout);
    // Alive and progressing, pushing nothing, until killed.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(600);
    while (std::chrono::steady_clock::now() < until) {
        worker.progress();
        ::usleep(1000);
    }
    ::_exit(0);
}

// See stall-get above.
int stall_get(int fd, int seconds, std::size_t mib)
{
    using namespace iofwd;
    ucx::context ctx;
    ucx::worker worker;
    ucx::memory memory;
    std::vector<std::byte> buffer(mib << 20, std::byte{0x5e});
    proto::connect_msg m;
    if (ucx::context::create(UCP_FEATURE_RMA | UCP_FEATURE_AM, "raw-peer", ctx) ||
        ucx::worker::create(ctx, worker) || worker.address(m.worker_address) ||
        ucx::memory::map(ctx, buffer.data(), buffer.size(), memory) || memory.pack_rkey(m.rkey))
        return std::printf("setup-failed ucx\n"), 3;
    m.rank = 0;
    m.ranks = 1;
    m.nodes = 1;
    m.pid = static_cast<std::uint32_t>(::getpid());
    m.buffer_length = buffer.size();
    m.buffer_address = reinterpret_cast<std::uint64_t>(buffer.data());
    m.job = "stalled";
    const auto hello = proto::encode(m);
    ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
    proto::message a;
    std::vector<unique_fd> fds;
    if (!read_message(fd, a, fds) || !std::holds_alternative<proto::accept_msg>(a))
        return std::printf("setup-failed not accepted\n"), 4;
    std::printf("accepted\n");
    std::fflush(stdout);
    const auto write = proto::encode(proto::write_req_msg{1, buffer.size(), {}});
    ::send(fd, write.data(), write.size(), MSG_NOSIGNAL);
    ::sleep(1);
    ::close(fd);
    std::printf("hung up\n");
    std::fflush(stdout);
    ::sleep(static_cast<unsigned>(seconds));
    std::printf("exiting\n");
    std::fflush(stdout);
    ::_exit(0);  // the worker's requests are left to UCX, as a killed rank's are
}

}  // namespace

int main(int argc, char** argv)
{
    using namespace iofwd;
    if (argc < 3 || argc > 5)
        return 2;
    const std::string_view mode = argv[2];
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        std::printf("connect-failed %s\n", std::strerror(errno));
        return 0;
    }
    std::vector<std::byte> bytes;
    if (mode == "garbage") {
        const char text[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        bytes.assign(reinterpret_cast<const std::byte*>(text),
                     reinterpret_cast<const std::byte*>(text) + sizeof text - 1);
    } else if (mode == "bad-version") {
        bytes = raw_header(proto::magic, 99, 5, 0);
    } else if (mode == "oversized") {
        bytes = raw_header(proto::magic, proto::version, 1, 1ull << 40);
    } else if (mode == "truncated") {
        // A WRITE_REQ whose header promises 16 bytes; send 3 and hang up.
        bytes = raw_header(proto::magic, proto::version, 3, 16);
        bytes.resize(bytes.size() + 3);
    } else if (mode == "unknown-type") {
        bytes = raw_header(proto::magic, proto::version, 77, 0);
    } else if (mode == "write-before-connect") {
        bytes = proto::encode(proto::write_req_msg{1, 4096, {}});
    } else if (mode == "hello") {
        proto::connect_msg m;
        m.rank = 0;
        m.ranks = 1;
        m.buffer_length = 4096;
        m.job = "stranger";
        m.worker_address.assign(64, std::byte{1});
        m.rkey.assign(16, std::byte{2});
        bytes = proto::encode(m);
    } else if (mode == "huge-buffer") {
        proto::connect_msg m;
        m.rank = 0;
        m.ranks = 1;
        m.buffer_length = std::uint64_t{1} << 62;
        m.job = "itest";
        m.worker_address.assign(64, std::byte{1});
        m.rkey.assign(16, std::byte{2});
        bytes = proto::encode(m);
    } else if (mode == "huge-ranks") {
        proto::connect_msg m;
        m.rank = 7;
        m.ranks = 0xffffffffu;
        m.buffer_length = 4096;
        m.job = "itest";
        m.worker_address.assign(64, std::byte{1});
        m.rkey.assign(16, std::byte{2});
        bytes = proto::encode(m);
    } else if (mode == "bad-address") {
        proto::connect_msg m;
        m.rank = 0;
        m.ranks = 1;
        m.buffer_length = 4096;
        m.job = "itest";
        // Address version 15: UCX asserts (always on) that it is 1 or 2.
        m.worker_address.assign(64, std::byte{0x5a});
        m.worker_address[0] = std::byte{0x0f};
        m.rkey.assign(16, std::byte{2});
        bytes = proto::encode(m);
    } else if (mode == "mailbox-garbage") {
        ucx::context ctx;
        ucx::worker worker;
        if (ucx::context::create(UCP_FEATURE_AM, "raw-peer", ctx) || ucx::worker::create(ctx, worker))
            return 3;
        // ACCEPT, with the mailbox's memfd and the doorbell.
        proto::accept_msg accepted;
        std::vector<unique_fd> fds;
        if (!admit(fd, worker, 0, 1, proto::connect_flag_mailbox, accepted, fds) || fds.size() != 2)
            return 6;
        const std::size_t total = mailbox::header_bytes + accepted.mailbox_bytes;
        void* shared = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
        if (shared == MAP_FAILED)
            return 7;
        const std::uint64_t tail = 12345;  // not a record boundary
        std::memcpy(static_cast<std::byte*>(shared) + 64, &tail, sizeof tail);
        const std::uint64_t one = 1;
        if (::write(fds[1].get(), &one, sizeof one) != sizeof one)
            return 8;
    } else if (mode == "forge-push") {
        return forge_push(fd);
    } else if (mode == "repeat-push") {
        return repeat_push(fd);
    } else if (mode == "push-then-announce" && argc == 5) {
        const int done = std::atoi(argv[3]), chunks = std::atoi(argv[4]);
        if (done < 0 || done > 100 || chunks < 1 || chunks > 64)
            return 2;
        return push_then_announce(fd, static_cast<unsigned>(done), static_cast<unsigned>(chunks));
    } else if (mode == "stall-get" && (argc == 4 || argc == 5)) {
        const int mib = argc == 5 ? std::atoi(argv[4]) : 1;
        if (mib < 1 || mib > 1024)
            return 2;
        return stall_get(fd, std::atoi(argv[3]), static_cast<std::size_t>(mib));
    } else if (mode == "status") {
        const auto ask = proto::encode(proto::status_msg{});
        ::send(fd, ask.data(), ask.size(), MSG_NOSIGNAL);
        proto::message m;
        std::vector<unique_fd> fds;
        if (!read_message(fd, m, fds, 10000))
            return std::printf("timeout or closed\n"), 0;
        const auto* r = std::get_if<proto::status_reply_msg>(&m);
        if (!r)
            return std::printf("answer %s\n", proto::to_string(proto::type_of(m))), 0;
        std::printf("staging used %llu total %llu chunk %llu stalled %llu waiting %u\n",
                    static_cast<unsigned long long>(r->staging_used),
                    static_cast<unsigned long long>(r->staging_total),
                    static_cast<unsigned long long>(r->chunk_bytes),
                    static_cast<unsigned long long>(r->staging_stalled), r->slot_waiters);
        return 0;
    } else if (mode == "huge-write" && argc == 4) {
        ucx::context ctx;
        ucx::worker worker;
        if (ucx::context::create(UCP_FEATURE_AM, "raw-peer", ctx) || ucx::worker::create(ctx, worker))
            return 3;
        proto::accept_msg accepted;
        std::vector<unique_fd> fds;
        if (!admit(fd, worker, 0, 1, proto::connect_flag_push, accepted, fds))
            return 4;
        const auto open = proto::encode(proto::file_open_msg{1, 1, argv[3]});
        ::send(fd, open.data(), open.size(), MSG_NOSIGNAL);
        proto::message opened;
        if (!read_message(fd, opened, fds) || !std::holds_alternative<proto::file_done_msg>(opened)) {
            const auto* e = std::get_if<proto::error_msg>(&opened);
            return std::printf("setup-failed FILE_OPEN %s: %s\n", argv[3],
                               e ? e->text.c_str() : "no answer"), 5;
        }
        proto::file_write_msg w;
        w.cookie = 2;
        w.file = 1;
        w.length = std::uint64_t{1} << 62;  // neither data nor a key: to be pushed
        const auto write = proto::encode(w);
        ::send(fd, write.data(), write.size(), MSG_NOSIGNAL);
        // The answer to one write: the connection stays open after it.
        proto::message answer;
        if (!read_message(fd, answer, fds))
            return std::printf("timeout or closed\n"), 0;
        if (const auto* e = std::get_if<proto::error_msg>(&answer))
            std::printf("answer ERROR %u %d %s\n", static_cast<unsigned>(e->domain), e->value,
                        e->text.c_str());
        else
            std::printf("answer %s\n", proto::to_string(proto::type_of(answer)));
        return 0;
    } else {
        return 2;
    }
    ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (mode == "truncated")
        ::shutdown(fd, SHUT_WR);

    std::vector<std::byte> in;
    for (;;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 5000) <= 0) {
            std::printf("timeout\n");
            return 0;
        }
        std::byte buf[8192];
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0)
            break;
        in.insert(in.end(), buf, buf + n);
    }
    proto::header h;
    std::string why;
    proto::message m;
    if (in.empty()) {
        std::printf("closed\n");
    } else if (proto::decode_header(in, h, why) ||
               proto::decode_payload(h, std::span(in).subspan(proto::header_size, h.length), m,
                                     why)) {
        std::printf("undecodable %s\n", why.c_str());
    } else if (auto* e = std::get_if<proto::error_msg>(&m)) {
        std::printf("answer ERROR %u %d %s\n", static_cast<unsigned>(e->domain), e->value,
                    e->text.c_str());
    } else {
        std::printf("answer %s\n", proto::to_string(proto::type_of(m)));
    }
    return 0;
}
