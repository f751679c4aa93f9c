#include "store/report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "errors.hpp"

namespace iofwd::store {
namespace {

using json = nlohmann::json;

constexpr const char* format_name = "iofwd-job-summary";
constexpr std::uint64_t format_version = 1;
constexpr std::uint32_t max_report_ranks = 1u << 16;  // as the protocol's ranks of a node
constexpr std::uint32_t max_report_pullers = 64;        // as the protocol's pullers of a daemon
constexpr std::uint64_t max_detail_limit = 1'000'000;
const std::vector<std::string> columns = {"rank", "version", "bytes", "blocked_us", "durable_us"};

// Written in this order, for people reading the file.
using ordered = nlohmann::ordered_json;

// Reads fields of a JSON object; the first failure sticks and names the field.
class reader {
public:
    explicit reader(std::string& why) : why_(why) {}

    bool ok() const { return why_.empty(); }
    void fail(std::string why)
    {
        if (ok())
            why_ = std::move(why);
    }

    const json* member(const json& o, const char* key, const char* where)
    {
        if (!ok())
            return nullptr;
        if (!o.is_object()) {
            fail(fmt::format("{} is not an object", where));
            return nullptr;
        }
        const auto it = o.find(key);
        if (it == o.end()) {
            fail(fmt::format("{} has no '{}'", where, key));
            return nullptr;
        }
        return &*it;
    }
    template <class T>
    void whole(const json& o, const char* key, T& out, std::uint64_t max, const char* where)
    {
        const json* v = member(o, key, where);
        if (!v)
            return;
        if (!v->is_number_unsigned() || v->get<std::uint64_t>() > max) {
            fail(fmt::format("'{}' of {} is not a whole number from 0 to {}", key, where, max));
            return;
        }
        out = static_cast<T>(v->get<std::uint64_t>());
    }
    void seconds(const json& o, const char* key, double& out, const char* where)
    {
        const json* v = member(o, key, where);
        if (!v)
            return;
        if (!v->is_number() || v->get<double>() < 0) {
            fail(fmt::format("'{}' of {} is not a number of seconds", key, where));
            return;
        }
        out = v->get<double>();
    }
    void text(const json& o, const char* key, std::string& out, const char* where)
    {
        const json* v = member(o, key, where);
        if (!v)
            return;
        if (!v->is_string() || v->get_ref<const std::string&>().size() > 4096) {
            fail(fmt::format("'{}' of {} is not a string", key, where));
            return;
        }
        out = v->get<std::string>();
    }
    const json* array(const json& o, const char* key, std::uint64_t max, const char* where)
    {
        const json* v = member(o, key, where);
        if (!v)
            return nullptr;
        if (!v->is_array() || v->size() > max) {
            fail(fmt::format("'{}' of {} is not a list of at most {} entries", key, where, max));
            return nullptr;
        }
        return v;
    }
    // A list of at most `max_entries` whole numbers (`out` untouched when
    // it is not one).
    void wholes(const json& o, const char* key, std::vector<std::uint64_t>& out,
                std::uint64_t max_entries, const char* where)
    {
        const json* v = array(o, key, max_entries, where);
        if (!v)
            return;
        std::vector<std::uint64_t> read;
        for (const auto& e : *v) {
            if (!e.is_number_unsigned()) {
                fail(fmt::format("an entry of '{}' of {} is not a whole number", key, where));
                return;
            }
            read.push_back(e.get<std::uint64_t>());
        }
        out = std::move(read);
    }
    void times(const json& o, const char* key, report_times& out, const char* where)
    {
        const json* t = member(o, key, where);
        if (!t)
            return;
        const std::string in = fmt::format("{} of {}", key, where);
        whole(*t, "total", out.total, UINT64_MAX, in.c_str());
        whole(*t, "max", out.max, UINT64_MAX, in.c_str());
        whole(*t, "median", out.median, UINT64_MAX, in.c_str());
        if (ok() && (out.median > out.max || out.max > out.total))
            fail(fmt::format("{}: median {} and max {} do not fit within total {}", in, out.median,
                             out.max, out.total));
    }

private:
    std::string& why_;
};

}  // namespace

std::uint64_t median(std::vector<std::uint64_t> values)
{
    if (values.empty())
        return 0;
    const std::size_t mid = values.size() / 2;
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid),
                     values.end());
    const std::uint64_t upper = values[mid];
    if (values.size() % 2)
        return upper;
    const std::uint64_t lower =
        *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
    return lower + (upper - lower) / 2;
}

nlohmann::ordered_json times_json(const report_times& t)
{
    return {{"total", t.total}, {"max", t.max}, {"median", t.median}};
}

nlohmann::ordered_json rank_json(const report_rank& k)
{
    return {{"rank", k.rank},
            {"versions", k.versions},
            {"bytes", k.bytes},
            {"blocked_us", times_json(k.blocked)},
            {"durable_us", times_json(k.durable)}};
}

nlohmann::ordered_json ops_json(const op_counts& c)
{
    ordered out = ordered::object();
    for (const auto& f : op_fields)
        out[f.name] = c.*f.count;
    return out;
}

std::string format_report(const node_report& r)
{
    ordered per_rank = ordered::array();
    for (const auto& k : r.per_rank)
        per_rank.push_back(rank_json(k));
    ordered detail = ordered::array();
    for (const auto& v : r.detail)
        detail.push_back(ordered::array({v.rank, v.version, v.bytes, v.blocked_us, v.durable_us}));
    const ordered out = {{"format", format_name},
                      {"format_version", format_version},
                      {"job", r.job},
                      {"run", r.run},
                      {"key", r.key},
                      {"node", r.node},
                      {"ranks", r.ranks},
                      {"nodes", r.nodes},
                      {"start", r.start},
                      {"end", r.end},
                      {"daemon",
                       {{"pid", r.pid},
                        {"cpu_user_seconds", r.cpu_user},
                        {"cpu_system_seconds", r.cpu_system},
                        {"peak_rss_bytes", r.peak_rss_bytes},
                        {"store_ops", ops_json(r.store_ops)},
                        {"puller_bytes", r.puller_bytes}}},
                      {"lost_versions", r.lost_versions},
                      {"per_rank", std::move(per_rank)},
                      {"detail_limit", r.detail_limit},
                      {"detail_dropped", r.detail_dropped},
                      {"detail_columns", columns},
                      {"detail", std::move(detail)}};
    // One line per rank and per version: readable, and small.
    std::string text = out.dump();
    return text + "\n";
}

std::error_code parse_report(std::string_view text, node_report& out, std::string& why)
{
    const json j = json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded()) {
        why = "not JSON";
        return make_error_code(errc::corrupt);
    }
    std::string problem;
    reader rd(problem);
    node_report r;
    std::string format;
    std::uint64_t version = 0;
    rd.text(j, "format", format, "the summary");
    rd.whole(j, "format_version", version, UINT64_MAX, "the summary");
    if (rd.ok() && (format != format_name || version != format_version))
        rd.fail(fmt::format("format '{}' version {}, not '{}' version {}", format, version,
                            format_name, format_version));
    rd.text(j, "job", r.job, "the summary");
    rd.text(j, "run", r.run, "the summary");
    rd.text(j, "key", r.key, "the summary");
    rd.text(j, "node", r.node, "the summary");
    rd.whole(j, "ranks", r.ranks, max_report_ranks, "the summary");
    rd.whole(j, "nodes", r.nodes, 100000, "the summary");
    rd.seconds(j, "start", r.start, "the summary");
    rd.seconds(j, "end", r.end, "the summary");
    if (const json* d = rd.member(j, "daemon", "the summary")) {
        rd.whole(*d, "pid", r.pid, UINT32_MAX, "daemon");
        rd.seconds(*d, "cpu_user_seconds", r.cpu_user, "daemon");
        rd.seconds(*d, "cpu_system_seconds", r.cpu_system, "daemon");
        rd.whole(*d, "peak_rss_bytes", r.peak_rss_bytes, UINT64_MAX, "daemon");
        if (d->is_object() && d->contains("store_ops"))
            if (const json* o = rd.member(*d, "store_ops", "daemon"))
                for (const auto& f : op_fields)
                    if (!f.added_later || (o->is_object() && o->contains(f.name)))
                        rd.whole(*o, f.name, r.store_ops.*f.count, UINT64_MAX, "store_ops");
        if (d->is_object() && d->contains("puller_bytes"))
            rd.wholes(*d, "puller_bytes", r.puller_bytes, max_report_pullers, "daemon");
    }
    rd.whole(j, "lost_versions", r.lost_versions, UINT64_MAX, "the summary");
    if (const json* ranks = rd.array(j, "per_rank", max_report_ranks, "the summary")) {
        for (const auto& e : *ranks) {
            report_rank k;
            rd.whole(e, "rank", k.rank, max_report_ranks, "an entry of per_rank");
            const std::string where = fmt::format("rank {}", k.rank);
            rd.whole(e, "versions", k.versions, UINT64_MAX, where.c_str());
            rd.whole(e, "bytes", k.bytes, UINT64_MAX, where.c_str());
            rd.times(e, "blocked_us", k.blocked, where.c_str());
            rd.times(e, "durable_us", k.durable, where.c_str());
            if (rd.ok() && k.rank != r.per_rank.size())
                rd.fail(fmt::format("per_rank has rank {} where rank {} belongs", k.rank,
                                    r.per_rank.size()));
            r.per_rank.push_back(k);
        }
        if (rd.ok() && r.per_rank.size() != r.ranks)
            rd.fail(fmt::format("per_rank lists {} ranks of {}", r.per_rank.size(), r.ranks));
    }
    rd.whole(j, "detail_limit", r.detail_limit, max_detail_limit, "the summary");
    rd.whole(j, "detail_dropped", r.detail_dropped, UINT64_MAX, "the summary");
    if (const json* c = rd.member(j, "detail_columns", "the summary"); c && *c != json(columns))
        rd.fail(fmt::format("detail_columns are {}, not {}", c->dump(), json(columns).dump()));
    if (const json* detail = rd.array(j, "detail", r.detail_limit, "the summary")) {
        for (const auto& e : *detail) {
            const auto whole = [](const json& x) { return x.is_number_unsigned(); };
            if (!e.is_array() || e.size() != columns.size() ||
                !std::all_of(e.begin(), e.end(), whole)) {
                rd.fail(fmt::format("detail entry {} is not {} whole numbers", e.dump(),
                                    columns.size()));
                break;
            }
            report_version v{e[0].get<std::uint32_t>(), e[1].get<std::uint64_t>(),
                             e[2].get<std::uint64_t>(), e[3].get<std::uint64_t>(),
                             e[4].get<std::uint64_t>()};
            if (e[0].get<std::uint64_t>() >= r.ranks) {
                rd.fail(fmt::format("detail entry {} names rank {} of {}", e.dump(),
                                    e[0].get<std::uint64_t>(), r.ranks));
                break;
            }
            r.detail.push_back(v);
        }
    }
    if (!rd.ok()) {
        why = problem;
        return make_error_code(errc::corrupt);
    }
    out = std::move(r);
    return {};
}

}  // namespace iofwd::store
