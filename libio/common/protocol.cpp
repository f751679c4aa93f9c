// The wire protocol (protocol.hpp). About 720 lines on purpose: every
// message's field list and its checks are here, one after the other, so that
// a message is described in one place; encode, decode and the size limit are
// generic over those lists.
#include "protocol.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <ctime>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "errors.hpp"

namespace iofwd::proto {
namespace {

// ---------------------------------------------------------------------------
// Each message is described once, as a list of fields (below, `fields_of`):
// the same list encodes it, decodes it and bounds its size. A field is a
// fixed-width integer (an enum travels as its underlying u32), a string or a
// byte blob with a length limit, or a list of records with a limit on their
// number, each record described by a field list of its own; each field has
// the name a decoding error quotes.

template <class M, class T>
struct int_field {
    const char* name;
    T M::*member;
};

template <class M>
struct text_field {
    const char* name;
    std::string M::*member;
    std::size_t limit;
    bool truncate = false;  // encode cuts it to the limit instead of sending too much
};

template <class M>
struct blob_field {
    const char* name;
    std::vector<std::byte> M::*member;
    std::size_t limit;
};

// A list travels as its count (u32), then its records one after the other.
// An encoder cuts a longer list at the limit, as it cuts a truncated text.
template <class M, class E>
struct list_field {
    const char* name;
    std::vector<E> M::*member;
    std::size_t limit;
};

template <class M, class T>
constexpr int_field<M, T> num(const char* name, T M::*member)
{
    return {name, member};
}
template <class M>
constexpr text_field<M> str(const char* name, std::string M::*member, std::size_t limit,
                      bool truncate = false)
{
    return {name, member, limit, truncate};
}
template <class M>
constexpr blob_field<M> bytes(const char* name, std::vector<std::byte> M::*member, std::size_t limit)
{
    return {name, member, limit};
}

template <class M, class E>
constexpr list_field<M, E> list(const char* name, std::vector<E> M::*member, std::size_t limit)
{
    return {name, member, limit};
}

template <class M>
constexpr auto fields_of()
{
    if constexpr (std::is_same_v<M, connect_msg>)
        return std::tuple{num("rank", &M::rank), num("ranks", &M::ranks), num("pid", &M::pid),
                          num("flags", &M::flags), num("buffer_length", &M::buffer_length),
                          num("buffer_address", &M::buffer_address), num("nodes", &M::nodes),
                          str("job", &M::job, max_name), str("run", &M::run, max_name),
                          bytes("worker_address", &M::worker_address, max_blob),
                          bytes("rkey", &M::rkey, max_blob)};
    else if constexpr (std::is_same_v<M, accept_msg>)
        return std::tuple{num("daemon_pid", &M::daemon_pid),
                          num("staging_bytes", &M::staging_bytes),
                          num("chunk_bytes", &M::chunk_bytes),
                          num("next_version", &M::next_version), str("node", &M::node, max_name),
                          str("store", &M::store, max_text),
                          str("store_uri", &M::store_uri, max_text),
                          str("transport", &M::transport, max_text), num("session", &M::session),
                          list("pullers", &M::pullers, max_pullers),
                          num("mailbox_bytes", &M::mailbox_bytes)};
    else if constexpr (std::is_same_v<M, write_req_msg>)
        return std::tuple{num("cookie", &M::cookie), num("length", &M::length),
                          bytes("data", &M::data, max_eager)};
    else if constexpr (std::is_same_v<M, write_done_msg>)
        return std::tuple{num("cookie", &M::cookie), num("version", &M::version)};
    else if constexpr (std::is_same_v<M, finished_msg>)
        return std::tuple{num("versions", &M::versions), num("bytes", &M::bytes),
                          num("others", &M::others)};
    else if constexpr (std::is_same_v<M, error_msg>)
        return std::tuple{num("cookie", &M::cookie), num("domain", &M::domain),
                          num("value", &M::value), str("text", &M::text, max_text, true)};
    else if constexpr (std::is_same_v<M, query_msg>)
        return std::tuple{num("cookie", &M::cookie), num("version", &M::version),
                          num("wait", &M::wait)};
    else if constexpr (std::is_same_v<M, version_state_msg>)
        return std::tuple{num("cookie", &M::cookie), num("version", &M::version),
                          num("state", &M::state), num("size", &M::size),
                          num("crc32c", &M::crc32c), num("flush start", &M::flush_start_ns),
                          num("durable time", &M::durable_ns)};
    else if constexpr (std::is_same_v<M, read_req_msg>)
        return std::tuple{num("cookie", &M::cookie), num("version", &M::version)};
    else if constexpr (std::is_same_v<M, read_data_msg>)
        return std::tuple{num("cookie", &M::cookie), num("offset", &M::offset),
                          bytes("data", &M::data, max_eager)};
    else if constexpr (std::is_same_v<M, file_open_msg>)
        return std::tuple{num("cookie", &M::cookie), num("file", &M::file),
                          str("path", &M::path, max_path)};
    else if constexpr (std::is_same_v<M, file_write_msg>)
        return std::tuple{num("cookie", &M::cookie),   num("file", &M::file),
                          num("offset", &M::offset),   num("length", &M::length),
                          num("address", &M::address), bytes("rkey", &M::rkey, max_blob),
                          bytes("data", &M::data, max_eager),
                          list("runs", &M::runs, max_file_runs)};
    else if constexpr (std::is_same_v<M, puller_address>)
        return std::tuple{bytes("address", &M::address, max_blob)};
    else if constexpr (std::is_same_v<M, file_run>)
        return std::tuple{num("offset", &M::offset), num("length", &M::length)};
    else if constexpr (std::is_same_v<M, file_sync_msg>)
        return std::tuple{num("cookie", &M::cookie), num("file", &M::file),
                          num("flags", &M::flags)};
    else if constexpr (std::is_same_v<M, file_drain_msg>)
        return std::tuple{num("cookie", &M::cookie), str("path", &M::path, max_path)};
    else if constexpr (std::is_same_v<M, file_done_msg>)
        return std::tuple{num("cookie", &M::cookie)};
    else if constexpr (std::is_same_v<M, status_rank>)
        return std::tuple{num("rank", &M::rank),         num("pid", &M::pid),
                          num("state", &M::state),       num("flags", &M::flags),
                          num("versions", &M::versions), num("bytes", &M::bytes)};
    else if constexpr (std::is_same_v<M, status_transfer>)
        return std::tuple{str("object", &M::object, max_status_object, true),
                          num("rank", &M::rank),
                          num("version", &M::version),
                          num("length", &M::length),
                          num("pulled", &M::pulled),
                          num("flushed", &M::flushed),
                          num("started", &M::started_ns)};
    else if constexpr (std::is_same_v<M, status_version>)
        return std::tuple{num("rank", &M::rank),       num("version", &M::version),
                          num("bytes", &M::bytes),     num("durable time", &M::durable_ns),
                          num("blocked", &M::blocked), num("latency", &M::latency),
                          num("flush", &M::flush)};
    else if constexpr (std::is_same_v<M, status_reply_msg>)
        return std::tuple{num("daemon_pid", &M::daemon_pid),
                          str("iod_version", &M::iod_version, max_name, true),
                          str("session", &M::session, max_name, true),
                          str("node", &M::node, max_name, true),
                          str("store", &M::store, max_text, true),
                          num("started", &M::started_ns),
                          num("now", &M::now_ns),
                          str("job", &M::job, max_name),
                          str("run", &M::run, max_name),
                          num("ranks", &M::ranks),
                          num("nodes", &M::nodes),
                          num("connected", &M::connected),
                          num("finished", &M::finished),
                          num("died", &M::died),
                          num("pulling", &M::pulling),
                          num("flushing", &M::flushing),
                          num("durable", &M::durable),
                          num("durable_bytes", &M::durable_bytes),
                          num("staging_used", &M::staging_used),
                          num("staging_total", &M::staging_total),
                          num("chunk_bytes", &M::chunk_bytes),
                          num("slot_waiters", &M::slot_waiters),
                          num("staging_stalled", &M::staging_stalled),
                          num("flush_threads", &M::flush_threads),
                          num("flush_running", &M::flush_running),
                          num("flush_queued", &M::flush_queued),
                          num("flush_held", &M::flush_held),
                          num("catalog_pending", &M::catalog_pending),
                          num("retention", &M::retention),
                          num("lost_versions", &M::lost_versions),
                          str("manifest_error", &M::manifest_error, max_text, true),
                          num("connections", &M::connections),
                          num("transfers_total", &M::transfers_total),
                          list("rank_list", &M::rank_list, max_status_ranks),
                          list("transfers", &M::transfers, max_status_transfers),
                          list("recent", &M::recent, max_status_recent)};
    else  // bye, ping, pong, status: no fields
        return std::tuple{};
}

// The wire width of an integer field: its own, an enum's underlying type's.
template <class T>
constexpr std::size_t width()
{
    if constexpr (std::is_enum_v<T>)
        return sizeof(std::underlying_type_t<T>);
    else
        return sizeof(T);
}

template <class M, class T>
constexpr std::size_t max_size(const int_field<M, T>&)
{
    static_assert(width<T>() == 4 || width<T>() == 8, "fields are u32 or u64 on the wire");
    return width<T>();
}
template <class M>
constexpr std::size_t max_size(const text_field<M>& f)
{
    return 4 + f.limit;
}
template <class M>
constexpr std::size_t max_size(const blob_field<M>& f)
{
    return 4 + f.limit;
}

template <class M>
constexpr std::uint64_t max_payload_of();

template <class M, class E>
constexpr std::size_t max_size(const list_field<M, E>& f)
{
    return 4 + f.limit * max_payload_of<E>();
}

template <class M>
constexpr std::uint64_t max_payload_of()
{
    return std::apply([](const auto&... f) { return (std::uint64_t{0} + ... + max_size(f)); },
                      fields_of<M>());
}

// ---------------------------------------------------------------------------
// Encoding and decoding, little-endian.

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
    std::vector<std::byte>& buffer() { return out_; }

    template <class M, class T>
    void field(const M& m, const int_field<M, T>& f)
    {
        if constexpr (std::is_enum_v<T>)
            put(static_cast<std::uint64_t>(static_cast<std::underlying_type_t<T>>(m.*f.member)),
                width<T>());
        else
            put(static_cast<std::uint64_t>(static_cast<std::make_unsigned_t<T>>(m.*f.member)),
                width<T>());
    }
    template <class M>
    void field(const M& m, const text_field<M>& f)
    {
        std::string_view s = m.*f.member;
        if (f.truncate && s.size() > f.limit)
            s = s.substr(0, f.limit);
        bytes(std::as_bytes(std::span(s.data(), s.size())));
    }
    template <class M>
    void field(const M& m, const blob_field<M>& f)
    {
        bytes(m.*f.member);
    }
    template <class M, class E>
    void field(const M& m, const list_field<M, E>& f)
    {
        const auto& items = m.*f.member;
        const std::size_t n = std::min(items.size(), f.limit);
        u32(static_cast<std::uint32_t>(n));
        for (std::size_t i = 0; i < n; ++i)
            std::apply([&](const auto&... g) { (field(items[i], g), ...); }, fields_of<E>());
    }

private:
    void put(std::uint64_t v, std::size_t n)
    {
        for (std::size_t i = 0; i < n; ++i)
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

    template <class M, class T>
    void field(M& m, const int_field<M, T>& f)
    {
        const std::uint64_t v = get(width<T>(), f.name);
        if constexpr (std::is_enum_v<T>)
            m.*f.member = static_cast<T>(static_cast<std::underlying_type_t<T>>(v));
        else
            m.*f.member = static_cast<T>(v);
    }
    template <class M>
    void field(M& m, const text_field<M>& f)
    {
        const auto b = blob(f.name, f.limit);
        m.*f.member = std::string(reinterpret_cast<const char*>(b.data()), b.size());
    }
    template <class M>
    void field(M& m, const blob_field<M>& f)
    {
        m.*f.member = blob(f.name, f.limit);
    }
    // Records are read one by one, never reserved from the count: a count
    // that the payload cannot hold fails at the record that is not there.
    template <class M, class E>
    void field(M& m, const list_field<M, E>& f)
    {
        const std::uint32_t n = u32(f.name);
        if (ok() && n > f.limit)
            fail(fmt::format("list '{}' has {} entries, more than the limit of {}", f.name, n,
                             f.limit));
        std::vector<E> items;
        for (std::uint32_t i = 0; i < n && ok(); ++i) {
            E e;
            std::apply([&](const auto&... g) { (field(e, g), ...); }, fields_of<E>());
            items.push_back(std::move(e));
        }
        m.*f.member = std::move(items);
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

// ---------------------------------------------------------------------------
// What decoding checks beyond the fields' own bounds: values that cannot be
// (ranks 0, a rank above the ranks, an unknown state...). The first failure
// is the decoding error.

void check(reader& r, const accept_msg& m)
{
    for (const auto& p : m.pullers)
        if (p.address.empty()) {
            r.fail("an empty puller address");
            return;
        }
}
void check(reader&, const write_done_msg&) {}
void check(reader&, const bye_msg&) {}
void check(reader&, const finished_msg&) {}
void check(reader&, const read_req_msg&) {}
void check(reader&, const read_data_msg&) {}
void check(reader&, const file_done_msg&) {}
void check(reader&, const ping_msg&) {}
void check(reader&, const pong_msg&) {}
void check(reader&, const status_msg&) {}

void check(reader& r, const status_reply_msg& m)
{
    if (m.now_ns < m.started_ns)
        r.fail(fmt::format("answered at {} ns, before the daemon started at {} ns", m.now_ns,
                           m.started_ns));
    else if (std::uint64_t{m.connected} + m.finished + m.died > m.ranks)
        r.fail(fmt::format("{} ranks connected, {} finished and {} died of {}", m.connected,
                           m.finished, m.died, m.ranks));
    else if (m.nodes > max_nodes)
        r.fail(fmt::format("{} nodes is more than the limit of {}", m.nodes, max_nodes));
    else if (m.staging_used > m.staging_total)
        r.fail(fmt::format("{} bytes of staging used of {}", m.staging_used, m.staging_total));
    else if (m.staging_stalled > m.staging_used)
        r.fail(fmt::format("{} bytes of staging stalled of {} used", m.staging_stalled,
                           m.staging_used));
    else if (m.flush_running > m.flush_threads)
        r.fail(fmt::format("{} flushes running on {} threads", m.flush_running, m.flush_threads));
    else if (m.retention > 2)
        r.fail(fmt::format("unknown retention state {}", m.retention));
    else if (m.rank_list.size() > m.connections)
        r.fail(fmt::format("{} ranks listed of {} connections", m.rank_list.size(), m.connections));
    else if (m.transfers.size() > m.transfers_total)
        r.fail(fmt::format("{} transfers listed of {}", m.transfers.size(), m.transfers_total));
    for (const auto& k : m.rank_list) {
        const auto state = static_cast<std::uint32_t>(k.state);
        if (state < static_cast<std::uint32_t>(rank_state_t::serving) ||
            state > static_cast<std::uint32_t>(rank_state_t::gone))
            r.fail(fmt::format("rank {} in unknown state {}", k.rank, state));
    }
    for (const auto& t : m.transfers)
        if (t.pulled > t.length || t.flushed > t.length)
            r.fail(fmt::format("transfer of {} bytes with {} pulled and {} flushed", t.length,
                               t.pulled, t.flushed));
    for (const auto& v : m.recent)
        if (v.blocked > v.latency || v.flush > v.latency)
            r.fail(fmt::format("version {} of rank {} blocked {} ns and flushed in {} ns, but "
                               "durable after {} ns",
                               v.version, v.rank, v.blocked, v.flush, v.latency));
}

void check(reader& r, const connect_msg& m)
{
    if (m.ranks == 0)
        r.fail("ranks is 0");
    else if (m.ranks > max_ranks)
        r.fail(fmt::format("{} ranks on one node is more than the limit of {}", m.ranks,
                           max_ranks));
    else if (m.nodes == 0)
        r.fail("nodes is 0");
    else if (m.nodes > max_nodes)
        r.fail(fmt::format("{} nodes is more than the limit of {}", m.nodes, max_nodes));
    else if (m.rank >= m.ranks)
        r.fail(fmt::format("rank {} is not below ranks {}", m.rank, m.ranks));
    else if (m.worker_address.empty())
        r.fail("empty worker address");
    else if (m.rkey.empty() && !(m.flags & connect_flag_files))
        r.fail("empty remote key");
}

void check(reader& r, const write_req_msg& m)
{
    if (!m.data.empty() && m.data.size() != m.length)
        r.fail(fmt::format("inline data of {} bytes for a write of {}", m.data.size(), m.length));
}

void check(reader& r, const query_msg& m)
{
    if (m.wait > 1)
        r.fail(fmt::format("wait flag {} is neither 0 nor 1", m.wait));
}

void check(reader& r, const version_state_msg& m)
{
    if (static_cast<std::uint32_t>(m.state) > static_cast<std::uint32_t>(version_state_t::failed))
        r.fail(fmt::format("unknown version state {}", static_cast<std::uint32_t>(m.state)));
    else if (m.durable_ns < m.flush_start_ns)
        r.fail(fmt::format("durable at {} ns, before its flush started at {} ns", m.durable_ns,
                           m.flush_start_ns));
}

void check(reader& r, const error_msg& m)
{
    if (static_cast<std::uint32_t>(m.domain) > static_cast<std::uint32_t>(error_domain::ucx))
        r.fail(fmt::format("unknown error domain {}", static_cast<std::uint32_t>(m.domain)));
}

// A path the daemon will open for a rank: absolute, no NUL.
void check_path(reader& r, const std::string& path)
{
    if (path.empty() || path[0] != '/')
        r.fail(fmt::format("path '{}' is not absolute", path));
    else if (path.find('\0') != std::string::npos)
        r.fail("path contains a NUL byte");
}

void check(reader& r, const file_open_msg& m)
{
    if (m.file == 0)
        r.fail("file number 0");
    check_path(r, m.path);
}

// A FILE_WRITE's run list (protocol.hpp says what it must be).
void check_runs(reader& r, const file_write_msg& m)
{
    if (m.runs.front().offset != m.offset)
        return r.fail(fmt::format("offset {} is not the first run's, {}", m.offset,
                                  m.runs.front().offset));
    std::uint64_t sum = 0, end = 0;
    for (std::size_t i = 0; i < m.runs.size(); ++i) {
        const auto& run = m.runs[i];
        if (run.length == 0)
            return r.fail(fmt::format("run {} is empty", i));
        if (run.offset + run.length < run.offset)
            return r.fail(fmt::format("run {}: offset {} + length {} overflows", i, run.offset,
                                      run.length));
        if (i > 0 && run.offset <= end)
            return r.fail(fmt::format("run {} at {} does not come after the end of run {}, {}", i,
                                      run.offset, i - 1, end));
        end = run.offset + run.length;
        sum += run.length;  // cannot wrap: the runs are disjoint 64-bit ranges
    }
    if (sum != m.length)
        r.fail(fmt::format("the runs hold {} bytes for a write of {}", sum, m.length));
    else if (!runs_dense_enough(m.runs.size(), m.length))
        r.fail(fmt::format("{} runs for {} bytes: fewer than {} bytes per run on average "
                           "(two runs not counted)",
                           m.runs.size(), m.length, min_run_average));
}

void check(reader& r, const file_write_msg& m)
{
    if (m.length == 0)
        r.fail("a write of 0 bytes");
    else if (m.offset + m.length < m.offset)
        r.fail(fmt::format("offset {} + length {} overflows", m.offset, m.length));
    else if (!m.data.empty() && m.data.size() != m.length)
        r.fail(fmt::format("inline data of {} bytes for a write of {}", m.data.size(), m.length));
    else if (!m.data.empty() && !m.rkey.empty())
        r.fail("both inline data and a remote key");
    else if (!m.runs.empty())
        check_runs(r, m);
}

void check(reader& r, const file_sync_msg& m)
{
    if (m.flags & ~(file_sync_durable | file_sync_close))
        r.fail(fmt::format("unknown sync flags 0x{:x}", m.flags));
}

void check(reader& r, const file_drain_msg& m)
{
    check_path(r, m.path);
}

template <class M>
M decode_body(reader& r)
{
    M m;
    std::apply([&](const auto&... f) { (r.field(m, f), ...); }, fields_of<M>());
    if (r.ok())
        check(r, m);
    return m;
}

template <msg_type T>
using alternative = std::variant_alternative_t<static_cast<std::size_t>(T) - 1, message>;

constexpr std::size_t message_types = std::variant_size_v<message>;

bool known_type(std::uint16_t t) noexcept
{
    return t >= static_cast<std::uint16_t>(msg_type::connect) && t <= message_types;
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
    case msg_type::ping: return "PING";
    case msg_type::pong: return "PONG";
    case msg_type::status: return "STATUS";
    case msg_type::status_reply: return "STATUS_REPLY";
    }
    return "UNKNOWN";
}

msg_type type_of(const message& m) noexcept
{
    return static_cast<msg_type>(m.index() + 1);
}

// Each message type names the variant alternative that carries it.
static_assert(std::is_same_v<alternative<msg_type::connect>, connect_msg>);
static_assert(std::is_same_v<alternative<msg_type::accept>, accept_msg>);
static_assert(std::is_same_v<alternative<msg_type::write_req>, write_req_msg>);
static_assert(std::is_same_v<alternative<msg_type::write_done>, write_done_msg>);
static_assert(std::is_same_v<alternative<msg_type::bye>, bye_msg>);
static_assert(std::is_same_v<alternative<msg_type::finished>, finished_msg>);
static_assert(std::is_same_v<alternative<msg_type::error>, error_msg>);
static_assert(std::is_same_v<alternative<msg_type::query>, query_msg>);
static_assert(std::is_same_v<alternative<msg_type::version_state>, version_state_msg>);
static_assert(std::is_same_v<alternative<msg_type::read_req>, read_req_msg>);
static_assert(std::is_same_v<alternative<msg_type::read_data>, read_data_msg>);
static_assert(std::is_same_v<alternative<msg_type::file_open>, file_open_msg>);
static_assert(std::is_same_v<alternative<msg_type::file_write>, file_write_msg>);
static_assert(std::is_same_v<alternative<msg_type::file_sync>, file_sync_msg>);
static_assert(std::is_same_v<alternative<msg_type::file_drain>, file_drain_msg>);
static_assert(std::is_same_v<alternative<msg_type::file_done>, file_done_msg>);
static_assert(std::is_same_v<alternative<msg_type::ping>, ping_msg>);
static_assert(std::is_same_v<alternative<msg_type::pong>, pong_msg>);
static_assert(std::is_same_v<alternative<msg_type::status>, status_msg>);
static_assert(std::is_same_v<alternative<msg_type::status_reply>, status_reply_msg>);
static_assert(static_cast<std::size_t>(msg_type::status_reply) == message_types,
              "a message type without an alternative, or the reverse");

std::uint64_t monotonic_ns() noexcept
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t max_payload(msg_type t) noexcept
{
    // Computed from the field lists, one entry per alternative.
    static constexpr auto table = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<std::uint64_t, sizeof...(I)>{
            max_payload_of<std::variant_alternative_t<I, message>>()...};
    }(std::make_index_sequence<message_types>{});
    const auto i = static_cast<std::size_t>(t);
    return i >= 1 && i <= table.size() ? table[i - 1] : 0;
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
    std::visit(
        [&](const auto& body) {
            using M = std::decay_t<decltype(body)>;
            std::apply([&](const auto&... f) { (w.field(body, f), ...); }, fields_of<M>());
        },
        m);
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
    if (!known_type(static_cast<std::uint16_t>(h.type))) {
        why = fmt::format("unknown message type {}", static_cast<unsigned>(h.type));
        return errc::protocol_error;
    }
    reader r(payload);
    // One decoder per alternative, chosen by the type's index.
    static constexpr auto decoders = []<std::size_t... I>(std::index_sequence<I...>) {
        return std::array<message (*)(reader&), sizeof...(I)>{+[](reader& rd) -> message {
            return message(std::in_place_index<I>,
                           decode_body<std::variant_alternative_t<I, message>>(rd));
        }...};
    }(std::make_index_sequence<message_types>{});
    message m = decoders[static_cast<std::size_t>(h.type) - 1](r);
    r.expect_end();
    if (!r.ok()) {
        why = fmt::format("bad {}: {}", to_string(h.type), r.why());
        return errc::protocol_error;
    }
    out = std::move(m);
    return {};
}

std::error_code decode_frame(std::span<const std::byte> bytes, message& out, std::size_t& used,
                             std::string& why)
{
    used = 0;
    if (bytes.size() < header_size)
        return {};
    header h;
    if (auto ec = decode_header(bytes, h, why))
        return ec;
    if (bytes.size() - header_size < h.length)
        return {};
    if (auto ec = decode_payload(h, bytes.subspan(header_size, h.length), out, why))
        return ec;
    used = header_size + h.length;
    return {};
}

}  // namespace iofwd::proto
