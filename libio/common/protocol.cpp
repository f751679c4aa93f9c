#include "protocol.hpp"

#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "errors.hpp"

namespace iofwd::proto {
namespace {

class writer {
public:
    void u16(std::uint16_t v) { put(v, 2); }
    void u32(std::uint32_t v) { put(v, 4); }
    void u64(std::uint64_t v) { put(v, 8); }
    void bytes(std::span<const std::byte> b)
    {
        u32(static_cast<std::uint32_t>(b.size()));
        out_.insert(out_.end(), b.begin(), b.end());
    }
    void str(const std::string& s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
    std::vector<std::byte>& buffer() { return out_; }

private:
    void put(std::uint64_t v, int n)
    {
        for (int i = 0; i < n; ++i)
            out_.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
    }
    std::vector<std::byte> out_;
};

// Reads fields off a payload; the first failure sticks and names the field.
class reader {
public:
    explicit reader(std::span<const std::byte> in) : in_(in) {}

    std::uint16_t u16(const char* field) { return static_cast<std::uint16_t>(get(2, field)); }
    std::uint32_t u32(const char* field) { return static_cast<std::uint32_t>(get(4, field)); }
    std::uint64_t u64(const char* field) { return get(8, field); }

    std::vector<std::byte> blob(const char* field, std::size_t limit)
    {
        const std::uint32_t n = u32(field);
        if (!ok())
            return {};
        if (n > limit)
            return fail(fmt::format("field '{}' is {} bytes, more than the limit of {}", field, n,
                                    limit)),
                   std::vector<std::byte>{};
        if (n > in_.size() - pos_)
            return fail(fmt::format("field '{}' claims {} bytes but only {} remain", field, n,
                                    in_.size() - pos_)),
                   std::vector<std::byte>{};
        std::vector<std::byte> out(in_.begin() + pos_, in_.begin() + pos_ + n);
        pos_ += n;
        return out;
    }

    std::string str(const char* field, std::size_t limit)
    {
        auto b = blob(field, limit);
        return {reinterpret_cast<const char*>(b.data()), b.size()};
    }

    bool ok() const { return why_.empty(); }
    const std::string& why() const { return why_; }

    // A message must be consumed exactly: trailing bytes mean the peer and we
    // disagree on the layout.
    void expect_end()
    {
        if (ok() && pos_ != in_.size())
            fail(fmt::format("{} unexpected trailing bytes", in_.size() - pos_));
    }

    void fail(std::string why)
    {
        if (ok())
            why_ = std::move(why);
    }

private:
    std::uint64_t get(std::size_t n, const char* field)
    {
        if (!ok())
            return 0;
        if (in_.size() - pos_ < n) {
            fail(fmt::format("truncated at field '{}' ({} of {} bytes present)", field,
                             in_.size() - pos_, n));
            return 0;
        }
        std::uint64_t v = 0;
        for (std::size_t i = 0; i < n; ++i)
            v |= static_cast<std::uint64_t>(in_[pos_ + i]) << (8 * i);
        pos_ += n;
        return v;
    }

    std::span<const std::byte> in_;
    std::size_t pos_ = 0;
    std::string why_;
};

void encode_body(writer& w, const connect_msg& m)
{
    w.u32(m.rank);
    w.u32(m.ranks);
    w.u32(m.pid);
    w.u32(m.flags);
    w.u64(m.buffer_length);
    w.u64(m.buffer_address);
    w.u32(m.nodes);
    w.str(m.job);
    w.str(m.run);
    w.bytes(m.worker_address);
    w.bytes(m.rkey);
}

void encode_body(writer& w, const accept_msg& m)
{
    w.u32(m.daemon_pid);
    w.u64(m.staging_bytes);
    w.u64(m.chunk_bytes);
    w.u64(m.next_version);
    w.str(m.node);
    w.str(m.store);
    w.str(m.store_uri);
    w.str(m.transport);
    w.u64(m.session);
    w.bytes(m.worker_address);
    w.u64(m.mailbox_bytes);
}

void encode_body(writer& w, const write_req_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.length);
    w.bytes(m.data);
}

void encode_body(writer& w, const write_done_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.version);
}

void encode_body(writer&, const bye_msg&) {}

void encode_body(writer& w, const query_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.version);
    w.u32(m.wait);
}

void encode_body(writer& w, const version_state_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.version);
    w.u32(static_cast<std::uint32_t>(m.state));
    w.u64(m.size);
    w.u32(m.crc32c);
    w.u64(m.flush_start_ns);
    w.u64(m.durable_ns);
}

void encode_body(writer& w, const read_req_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.version);
}

void encode_body(writer& w, const read_data_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.offset);
    w.bytes(m.data);
}

void encode_body(writer& w, const finished_msg& m)
{
    w.u64(m.versions);
    w.u64(m.bytes);
}

void encode_body(writer& w, const error_msg& m)
{
    w.u64(m.cookie);
    w.u32(static_cast<std::uint32_t>(m.domain));
    w.u32(static_cast<std::uint32_t>(m.value));
    w.str(m.text.size() > max_text ? m.text.substr(0, max_text) : m.text);
}

void encode_body(writer& w, const file_open_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.file);
    w.str(m.path);
}

void encode_body(writer& w, const file_write_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.file);
    w.u64(m.offset);
    w.u64(m.length);
    w.u64(m.address);
    w.bytes(m.rkey);
    w.bytes(m.data);
}

void encode_body(writer& w, const file_sync_msg& m)
{
    w.u64(m.cookie);
    w.u64(m.file);
    w.u32(m.flags);
}

void encode_body(writer& w, const file_drain_msg& m)
{
    w.u64(m.cookie);
    w.str(m.path);
}

void encode_body(writer& w, const file_done_msg& m)
{
    w.u64(m.cookie);
}

connect_msg decode_connect(reader& r)
{
    connect_msg m;
    m.rank = r.u32("rank");
    m.ranks = r.u32("ranks");
    m.pid = r.u32("pid");
    m.flags = r.u32("flags");
    m.buffer_length = r.u64("buffer_length");
    m.buffer_address = r.u64("buffer_address");
    m.nodes = r.u32("nodes");
    m.job = r.str("job", max_name);
    m.run = r.str("run", max_name);
    m.worker_address = r.blob("worker_address", max_blob);
    m.rkey = r.blob("rkey", max_blob);
    if (r.ok() && m.ranks == 0)
        r.fail("ranks is 0");
    else if (r.ok() && m.nodes == 0)
        r.fail("nodes is 0");
    else if (r.ok() && m.rank >= m.ranks)
        r.fail(fmt::format("rank {} is not below ranks {}", m.rank, m.ranks));
    else if (r.ok() && m.worker_address.empty())
        r.fail("empty worker address");
    else if (r.ok() && m.rkey.empty() && !(m.flags & connect_flag_files))
        r.fail("empty remote key");
    return m;
}

accept_msg decode_accept(reader& r)
{
    accept_msg m;
    m.daemon_pid = r.u32("daemon_pid");
    m.staging_bytes = r.u64("staging_bytes");
    m.chunk_bytes = r.u64("chunk_bytes");
    m.next_version = r.u64("next_version");
    m.node = r.str("node", max_name);
    m.store = r.str("store", max_text);
    m.store_uri = r.str("store_uri", max_text);
    m.transport = r.str("transport", max_text);
    m.session = r.u64("session");
    m.worker_address = r.blob("worker_address", max_blob);
    m.mailbox_bytes = r.u64("mailbox_bytes");
    return m;
}

write_req_msg decode_write_req(reader& r)
{
    write_req_msg m;
    m.cookie = r.u64("cookie");
    m.length = r.u64("length");
    m.data = r.blob("data", max_eager);
    if (r.ok() && !m.data.empty() && m.data.size() != m.length)
        r.fail(fmt::format("inline data of {} bytes for a write of {}", m.data.size(), m.length));
    return m;
}

write_done_msg decode_write_done(reader& r)
{
    write_done_msg m;
    m.cookie = r.u64("cookie");
    m.version = r.u64("version");
    return m;
}

query_msg decode_query(reader& r)
{
    query_msg m;
    m.cookie = r.u64("cookie");
    m.version = r.u64("version");
    m.wait = r.u32("wait");
    if (r.ok() && m.wait > 1)
        r.fail(fmt::format("wait flag {} is neither 0 nor 1", m.wait));
    return m;
}

version_state_msg decode_version_state(reader& r)
{
    version_state_msg m;
    m.cookie = r.u64("cookie");
    m.version = r.u64("version");
    const auto state = r.u32("state");
    m.size = r.u64("size");
    m.crc32c = r.u32("crc32c");
    m.flush_start_ns = r.u64("flush start");
    m.durable_ns = r.u64("durable time");
    if (r.ok() && state > static_cast<std::uint32_t>(version_state_t::failed))
        r.fail(fmt::format("unknown version state {}", state));
    else if (r.ok() && m.durable_ns < m.flush_start_ns)
        r.fail(fmt::format("durable at {} ns, before its flush started at {} ns", m.durable_ns,
                           m.flush_start_ns));
    m.state = static_cast<version_state_t>(state);
    return m;
}

read_req_msg decode_read_req(reader& r)
{
    read_req_msg m;
    m.cookie = r.u64("cookie");
    m.version = r.u64("version");
    return m;
}

read_data_msg decode_read_data(reader& r)
{
    read_data_msg m;
    m.cookie = r.u64("cookie");
    m.offset = r.u64("offset");
    m.data = r.blob("data", max_eager);
    return m;
}

finished_msg decode_finished(reader& r)
{
    finished_msg m;
    m.versions = r.u64("versions");
    m.bytes = r.u64("bytes");
    return m;
}

error_msg decode_error(reader& r)
{
    error_msg m;
    m.cookie = r.u64("cookie");
    const auto domain = r.u32("domain");
    m.value = static_cast<std::int32_t>(r.u32("value"));
    m.text = r.str("text", max_text);
    if (r.ok() && domain > static_cast<std::uint32_t>(error_domain::ucx))
        r.fail(fmt::format("unknown error domain {}", domain));
    m.domain = static_cast<error_domain>(domain);
    return m;
}

// A path the daemon will open for a rank: absolute, no NUL.
void check_path(reader& r, const std::string& path)
{
    if (!r.ok())
        return;
    if (path.empty() || path[0] != '/')
        r.fail(fmt::format("path '{}' is not absolute", path));
    else if (path.find('\0') != std::string::npos)
        r.fail("path contains a NUL byte");
}

file_open_msg decode_file_open(reader& r)
{
    file_open_msg m;
    m.cookie = r.u64("cookie");
    m.file = r.u64("file");
    m.path = r.str("path", max_path);
    if (r.ok() && m.file == 0)
        r.fail("file number 0");
    check_path(r, m.path);
    return m;
}

file_write_msg decode_file_write(reader& r)
{
    file_write_msg m;
    m.cookie = r.u64("cookie");
    m.file = r.u64("file");
    m.offset = r.u64("offset");
    m.length = r.u64("length");
    m.address = r.u64("address");
    m.rkey = r.blob("rkey", max_blob);
    m.data = r.blob("data", max_eager);
    if (!r.ok())
        return m;
    if (m.length == 0)
        r.fail("a write of 0 bytes");
    else if (m.offset + m.length < m.offset)
        r.fail(fmt::format("offset {} + length {} overflows", m.offset, m.length));
    else if (!m.data.empty() && m.data.size() != m.length)
        r.fail(fmt::format("inline data of {} bytes for a write of {}", m.data.size(), m.length));
    else if (!m.data.empty() && !m.rkey.empty())
        r.fail("both inline data and a remote key");
    return m;
}

file_sync_msg decode_file_sync(reader& r)
{
    file_sync_msg m;
    m.cookie = r.u64("cookie");
    m.file = r.u64("file");
    m.flags = r.u32("flags");
    if (r.ok() && (m.flags & ~(file_sync_durable | file_sync_close)))
        r.fail(fmt::format("unknown sync flags 0x{:x}", m.flags));
    return m;
}

file_drain_msg decode_file_drain(reader& r)
{
    file_drain_msg m;
    m.cookie = r.u64("cookie");
    m.path = r.str("path", max_path);
    check_path(r, m.path);
    return m;
}

file_done_msg decode_file_done(reader& r)
{
    return file_done_msg{r.u64("cookie")};
}

bool known_type(std::uint16_t t) noexcept
{
    return t >= static_cast<std::uint16_t>(msg_type::connect) &&
           t <= static_cast<std::uint16_t>(msg_type::file_done);
}

}  // namespace

const char* to_string(msg_type t) noexcept
{
    switch (t) {
    case msg_type::connect: return "CONNECT";
    case msg_type::accept: return "ACCEPT";
    case msg_type::write_req: return "WRITE_REQ";
    case msg_type::write_done: return "WRITE_DONE";
    case msg_type::bye: return "BYE";
    case msg_type::finished: return "FINISHED";
    case msg_type::error: return "ERROR";
    case msg_type::query: return "QUERY";
    case msg_type::version_state: return "VERSION_STATE";
    case msg_type::read_req: return "READ_REQ";
    case msg_type::read_data: return "READ_DATA";
    case msg_type::file_open: return "FILE_OPEN";
    case msg_type::file_write: return "FILE_WRITE";
    case msg_type::file_sync: return "FILE_SYNC";
    case msg_type::file_drain: return "FILE_DRAIN";
    case msg_type::file_done: return "FILE_DONE";
    }
    return "UNKNOWN";
}

msg_type type_of(const message& m) noexcept
{
    return static_cast<msg_type>(m.index() + 1);
}

std::uint64_t monotonic_ns() noexcept
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t max_payload(msg_type t) noexcept
{
    switch (t) {
    case msg_type::connect: return 2 * 8 + 9 * 4 + 2 * max_name + 2 * max_blob;
    case msg_type::accept: return 4 + 5 * 8 + 5 * 4 + max_name + 3 * max_text + max_blob;
    case msg_type::write_req: return 20 + max_eager;
    case msg_type::write_done: return 16;
    case msg_type::bye: return 0;
    case msg_type::finished: return 16;
    case msg_type::error: return 20 + max_text;
    case msg_type::query: return 20;
    case msg_type::version_state: return 48;
    case msg_type::read_req: return 16;
    case msg_type::read_data: return 20 + max_eager;
    case msg_type::file_open: return 20 + max_path;
    case msg_type::file_write: return 48 + max_blob + 4 + max_eager;
    case msg_type::file_sync: return 20;
    case msg_type::file_drain: return 12 + max_path;
    case msg_type::file_done: return 8;
    }
    return 0;
}

void encode_push_header(const push_header& h, std::byte (&out)[push_header_size]) noexcept
{
    const std::uint64_t fields[3] = {h.session, h.cookie, h.offset};
    for (int f = 0; f < 3; ++f)
        for (int i = 0; i < 8; ++i)
            out[f * 8 + i] = static_cast<std::byte>((fields[f] >> (8 * i)) & 0xff);
}

bool decode_push_header(std::span<const std::byte> in, push_header& out) noexcept
{
    if (in.size() != push_header_size)
        return false;
    std::uint64_t fields[3] = {0, 0, 0};
    for (int f = 0; f < 3; ++f)
        for (int i = 0; i < 8; ++i)
            fields[f] |= static_cast<std::uint64_t>(in[f * 8 + i]) << (8 * i);
    out = push_header{fields[0], fields[1], fields[2]};
    return true;
}

std::error_code error_msg::code() const noexcept
{
    switch (domain) {
    case error_domain::runtime: return make_error_code(static_cast<errc>(value));
    case error_domain::system: return {value, std::system_category()};
    case error_domain::ucx: return {value, ucx_category()};
    }
    return make_error_code(errc::protocol_error);
}

error_msg error_msg::from(const std::error_code& ec, std::string text, std::uint64_t cookie)
{
    error_msg m;
    m.cookie = cookie;
    if (ec.category() == runtime_category())
        m.domain = error_domain::runtime;
    else if (ec.category() == ucx_category())
        m.domain = error_domain::ucx;
    else
        m.domain = error_domain::system;
    m.value = ec.value();
    m.text = std::move(text);
    return m;
}

std::vector<std::byte> encode(const message& m)
{
    writer w;
    w.u32(magic);
    w.u16(version);
    w.u16(static_cast<std::uint16_t>(type_of(m)));
    w.u64(0);  // length, patched below
    std::visit([&](const auto& body) { encode_body(w, body); }, m);
    auto& out = w.buffer();
    const std::uint64_t length = out.size() - header_size;
    for (int i = 0; i < 8; ++i)
        out[8 + i] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
    return std::move(out);
}

std::error_code decode_header(std::span<const std::byte> bytes, header& out, std::string& why)
{
    if (bytes.size() < header_size) {
        why = fmt::format("truncated header: {} of {} bytes", bytes.size(), header_size);
        return errc::protocol_error;
    }
    reader r(bytes.first(header_size));
    const auto m = r.u32("magic");
    const auto v = r.u16("version");
    const auto t = r.u16("type");
    const auto len = r.u64("length");
    if (m != magic) {
        why = fmt::format("bad magic 0x{:08x} (not an iofwd peer?)", m);
        return errc::protocol_error;
    }
    if (v != version) {
        why = fmt::format("peer speaks protocol version {}, this build speaks {}", v, version);
        return errc::version_mismatch;
    }
    if (!known_type(t)) {
        why = fmt::format("unknown message type {}", t);
        return errc::protocol_error;
    }
    const auto type = static_cast<msg_type>(t);
    if (len > max_payload(type)) {
        why = fmt::format("{} payload of {} bytes exceeds the limit of {}", to_string(type), len,
                          max_payload(type));
        return errc::protocol_error;
    }
    out = header{type, len};
    return {};
}

std::error_code decode_payload(const header& h, std::span<const std::byte> payload, message& out,
                               std::string& why)
{
    if (payload.size() != h.length) {
        why = fmt::format("{} payload is {} bytes, header says {}", to_string(h.type),
                          payload.size(), h.length);
        return errc::protocol_error;
    }
    reader r(payload);
    message m;
    switch (h.type) {
    case msg_type::connect: m = decode_connect(r); break;
    case msg_type::accept: m = decode_accept(r); break;
    case msg_type::write_req: m = decode_write_req(r); break;
    case msg_type::write_done: m = decode_write_done(r); break;
    case msg_type::bye: m = bye_msg{}; break;
    case msg_type::finished: m = decode_finished(r); break;
    case msg_type::error: m = decode_error(r); break;
    case msg_type::query: m = decode_query(r); break;
    case msg_type::version_state: m = decode_version_state(r); break;
    case msg_type::read_req: m = decode_read_req(r); break;
    case msg_type::read_data: m = decode_read_data(r); break;
    case msg_type::file_open: m = decode_file_open(r); break;
    case msg_type::file_write: m = decode_file_write(r); break;
    case msg_type::file_sync: m = decode_file_sync(r); break;
    case msg_type::file_drain: m = decode_file_drain(r); break;
    case msg_type::file_done: m = decode_file_done(r); break;
    }
    r.expect_end();
    if (!r.ok()) {
        why = fmt::format("bad {}: {}", to_string(h.type), r.why());
        return errc::protocol_error;
    }
    out = std::move(m);
    return {};
}

}  // namespace iofwd::proto
