// libFuzzer harness: the wire protocol's decoder on what a hostile peer sends.
//
// The input is a byte stream as the daemon reads it off a rank's socket:
// messages one after another, each a header and as many payload bytes as the
// header says (the last one may be cut short). For each message it checks
// what protocol.hpp promises, not only that nothing crashes:
//  - a header that decodes has a known type and a length within max_payload;
//    one that does not says why and leaves the output alone;
//  - a payload shorter than the header's length is refused;
//  - a refused payload says why and leaves the output alone;
//  - a decoded message is of the header's type, encode() turns it back into
//    exactly the bytes it came from (the encoding is canonical: no two byte
//    strings mean the same message), within max_payload(type), and those
//    decode again to an equal message.
// The first 24 bytes also go through decode_push_header (a pushed chunk's
// header, which the daemon takes from the rank as well).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "check.hpp"
#include "errors.hpp"
#include "protocol.hpp"

using namespace iofwd;
using namespace iofwd::proto;

namespace {

std::string hex(std::span<const std::byte> b)
{
    std::string s;
    for (std::size_t i = 0; i < b.size() && i < 96; ++i)
        s += fmt::format("{:02x}", static_cast<unsigned>(b[i]));
    if (b.size() > 96)
        s += fmt::format("... ({} bytes)", b.size());
    return s;
}

// Values no decoder produces from a refused input, to see whether a refusal
// touched its output (outputs are set only on success).
const message sentinel = file_done_msg{0x5eed5eed5eed5eedull};
constexpr header sentinel_header{msg_type::bye, 0x5eed};

bool is_sentinel(const header& h)
{
    return h.type == sentinel_header.type && h.length == sentinel_header.length;
}

void check_push_header(std::span<const std::byte> in)
{
    const auto first = in.first(std::min(in.size(), push_header_size));
    push_header h{1, 2, 3};
    const bool ok = decode_push_header(first, h);
    FUZZ_CHECK(ok == (first.size() == push_header_size), "{} bytes decoded: {}", first.size(),
               ok);
    if (!ok) {
        FUZZ_CHECK(h.session == 1 && h.cookie == 2 && h.offset == 3,
                   "a refused push header changed the output");
        return;
    }
    std::byte again[push_header_size];
    encode_push_header(h, again);
    FUZZ_CHECK(std::ranges::equal(std::span(again), first), "push header {} re-encodes as {}",
               hex(first), hex(again));
}

// One whole message: header_size + h.length bytes.
void check_message(const header& h, std::span<const std::byte> wire)
{
    const auto payload = wire.subspan(header_size);
    message m = sentinel;
    std::string why;
    if (auto ec = decode_payload(h, payload, m, why)) {
        FUZZ_CHECK(ec == errc::protocol_error, "{} refused with '{}'", to_string(h.type),
                   ec.message());
        FUZZ_CHECK(!why.empty(), "{} refused without a reason", to_string(h.type));
        FUZZ_CHECK(m == sentinel, "a refused {} changed the output", to_string(h.type));
        return;
    }
    FUZZ_CHECK(type_of(m) == h.type, "a {} header decoded as a {}", to_string(h.type),
               to_string(type_of(m)));
    if (const auto* e = std::get_if<error_msg>(&m)) {
        // The receiver turns any ERROR it accepted into an error_code and words.
        const auto code = e->code();
        (void)code.message();
        (void)to_errno(code);
    }

    const auto again = encode(m);
    FUZZ_CHECK(again.size() >= header_size && again.size() - header_size <= max_payload(h.type),
               "{} re-encodes to a payload of {} bytes, over max_payload {}", to_string(h.type),
               again.size() - header_size, max_payload(h.type));
    FUZZ_CHECK(std::ranges::equal(again, wire), "{} {} re-encodes as {}", to_string(h.type),
               hex(wire), hex(again));

    header h2 = sentinel_header;
    auto ec = decode_header(again, h2, why);
    FUZZ_CHECK(!ec, "re-encoded {} header refused: {}", to_string(h.type), why);
    FUZZ_CHECK(h2.type == h.type && h2.length == again.size() - header_size,
               "re-encoded header says {} of {} bytes", to_string(h2.type), h2.length);
    message m2 = sentinel;
    ec = decode_payload(h2, std::span(again).subspan(header_size), m2, why);
    FUZZ_CHECK(!ec, "re-encoded {} refused: {} ({})", to_string(h.type), why, hex(again));
    FUZZ_CHECK(m2 == m, "{} {} decodes to another message after a round trip",
               to_string(h.type), hex(wire));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
    check_push_header(in);
    while (!in.empty()) {
        header h = sentinel_header;
        std::string why;
        if (auto ec = decode_header(in, h, why)) {
            FUZZ_CHECK(ec == errc::protocol_error || ec == errc::version_mismatch,
                       "header {} refused with '{}'",
                       hex(in.first(std::min(in.size(), header_size))), ec.message());
            FUZZ_CHECK(!why.empty(), "header refused without a reason");
            FUZZ_CHECK(is_sentinel(h), "a refused header changed the output");
            return 0;
        }
        FUZZ_CHECK(in.size() >= header_size, "a {}-byte header decoded", in.size());
        FUZZ_CHECK(std::string_view(to_string(h.type)) != "UNKNOWN", "header of type {} decoded",
                   static_cast<unsigned>(h.type));
        FUZZ_CHECK(h.length <= max_payload(h.type), "{} header with length {} over {}",
                   to_string(h.type), h.length, max_payload(h.type));

        const auto rest = in.subspan(header_size);
        if (rest.size() < h.length) {
            // What a peer that hung up in the middle of a message leaves.
            message m = sentinel;
            const auto ec = decode_payload(h, rest, m, why);
            FUZZ_CHECK(ec == errc::protocol_error && !why.empty() && m == sentinel,
                       "{} payload of {} bytes for a length of {}: '{}'", to_string(h.type),
                       rest.size(), h.length, ec.message());
            return 0;
        }
        const auto wire = in.first(header_size + static_cast<std::size_t>(h.length));
        check_message(h, wire);
        in = in.subspan(wire.size());
    }
    return 0;
}
