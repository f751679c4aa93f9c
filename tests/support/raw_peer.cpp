// Talks to a daemon socket directly, bypassing libiofwd: sends the bytes it
// is told to and prints what comes back, for tests of malformed input and of
// peers the daemon must refuse.
//   raw_peer SOCKET MODE
// MODE: garbage | bad-version | oversized | truncated | unknown-type |
//       write-before-connect | hello (a CONNECT with a fake address) |
//       huge-ranks (a CONNECT claiming 0xffffffff ranks) |
//       bad-address (a CONNECT whose worker address makes UCX 1.13 abort) |
//       mailbox-garbage (a real UCX worker, admitted with a mailbox, then an
//       impossible tail published in it and the doorbell rung)
// Prints "answer <type> <domain> <value> <text>" or "closed" or "timeout".
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
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

}  // namespace

int main(int argc, char** argv)
{
    using namespace iofwd;
    if (argc != 3)
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
        proto::connect_msg m;
        if (ucx::context::create(UCP_FEATURE_AM, "raw-peer", ctx) ||
            ucx::worker::create(ctx, worker) || worker.address(m.worker_address))
            return 3;
        m.ranks = 1;
        m.flags = proto::connect_flag_files | proto::connect_flag_mailbox;
        m.job = "itest";
        const auto hello = proto::encode(m);
        ::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL);
        // ACCEPT, with the mailbox's memfd and the doorbell.
        std::vector<std::byte> in;
        std::vector<unique_fd> fds;
        proto::header h;
        std::string why;
        while (in.size() < proto::header_size ||
               (!proto::decode_header(in, h, why) && in.size() < proto::header_size + h.length)) {
            pollfd p{fd, POLLIN, 0};
            if (::poll(&p, 1, 5000) <= 0)
                return 4;
            std::byte buf[8192];
            const ssize_t n = receive_with_fds(fd, buf, 0, fds);
            if (n <= 0)
                return 5;
            in.insert(in.end(), buf, buf + n);
        }
        proto::message a;
        if (proto::decode_payload(h, std::span(in).subspan(proto::header_size, h.length), a, why) ||
            !std::holds_alternative<proto::accept_msg>(a) || fds.size() != 2)
            return 6;
        const std::size_t total = mailbox::header_bytes + std::get<proto::accept_msg>(a).mailbox_bytes;
        void* shared = ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0].get(), 0);
        if (shared == MAP_FAILED)
            return 7;
        const std::uint64_t tail = 12345;  // not a record boundary
        std::memcpy(static_cast<std::byte*>(shared) + 64, &tail, sizeof tail);
        const std::uint64_t one = 1;
        if (::write(fds[1].get(), &one, sizeof one) != sizeof one)
            return 8;
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
