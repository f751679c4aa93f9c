#include "version_table.hpp"

#include <fmt/format.h>

namespace iofwd::iod {

using state = proto::version_state_t;

void version_table::pulling(std::uint64_t version, std::uint64_t size, std::weak_ptr<transfer> t,
                            std::uint64_t arrived_ns)
{
    record rec;
    rec.size = size;
    rec.arrived_ns = arrived_ns;
    versions_[version] = rec;
    flight_[version] = std::move(t);
}

void version_table::flushing(std::uint64_t version, std::uint64_t staged_ns)
{
    if (auto it = versions_.find(version); it != versions_.end()) {
        it->second.state = state::flushing;
        it->second.staged_ns = staged_ns;
    }
}

void version_table::durable(std::uint64_t version, std::uint32_t crc32c,
                            std::uint64_t flush_start_ns, std::uint64_t durable_ns)
{
    flight_.erase(version);
    auto& rec = versions_[version];
    rec.state = state::durable;
    rec.crc32c = crc32c;
    rec.flush_start_ns = flush_start_ns;
    rec.durable_ns = durable_ns;
    ++durable_count_;
    durable_bytes_ += rec.size;
    // The newest of an unbroken run of durable versions from the first.
    auto next = versions_.find(durable_through_ + 1);
    while (next != versions_.end() && next->first == durable_through_ + 1 &&
           next->second.state == state::durable) {
        ++durable_through_;
        ++next;
    }
}

void version_table::journaled(std::uint64_t version, std::uint32_t crc32c,
                              std::uint64_t flush_start_ns, std::uint64_t durable_ns)
{
    const auto t = flight_.find(version);
    const bool in_flight = t != flight_.end();
    const auto kept = in_flight ? t->second : std::weak_ptr<transfer>();
    durable(version, crc32c, flush_start_ns, durable_ns);
    if (in_flight)
        flight_[version] = kept;
}

void version_table::failed(std::uint64_t version, std::error_code ec, std::string why)
{
    flight_.erase(version);
    auto& rec = versions_[version];
    rec.state = state::failed;
    rec.error = ec;
    rec.why = std::move(why);
}

void version_table::forget(std::uint64_t version)
{
    flight_.erase(version);
    versions_.erase(version);
}

std::optional<proto::message> version_table::query(const proto::query_msg& q, std::uint32_t rank)
{
    const auto it = versions_.find(q.version);
    if (it == versions_.end())
        return proto::version_state_msg{q.cookie, q.version, state::unknown, 0, 0};
    const auto& rec = it->second;
    if (q.wait && (rec.state == state::pulling || rec.state == state::flushing)) {
        waits_.emplace(q.version, q.cookie);
        return std::nullopt;
    }
    if (q.wait && rec.state == state::failed)
        return proto::error_msg::from(rec.error,
                                      fmt::format("version {} of rank {} could not be made "
                                                  "durable: {}",
                                                  q.version, rank, rec.why),
                                      q.cookie);
    return proto::version_state_msg{q.cookie,  q.version,          rec.state, rec.size,
                                    rec.crc32c, rec.flush_start_ns, rec.durable_ns};
}

std::vector<proto::message> version_table::answer_waits(std::uint64_t version, std::uint32_t rank)
{
    auto [first, last] = waits_.equal_range(version);
    std::vector<std::uint64_t> cookies;
    for (auto it = first; it != last; ++it)
        cookies.push_back(it->second);
    waits_.erase(first, last);
    std::vector<proto::message> answers;
    for (auto cookie : cookies)
        if (auto a = query(proto::query_msg{cookie, version, 1}, rank))
            answers.push_back(std::move(*a));
    return answers;
}

const version_table::record* version_table::find(std::uint64_t version) const
{
    const auto it = versions_.find(version);
    return it == versions_.end() ? nullptr : &it->second;
}

std::shared_ptr<transfer> version_table::in_flight(std::uint64_t version) const
{
    const auto it = flight_.find(version);
    return it == flight_.end() ? nullptr : it->second.lock();
}

void version_table::each_in_flight(
    const std::function<void(const std::shared_ptr<transfer>&)>& fn) const
{
    for (const auto& [version, weak] : flight_)
        if (auto t = weak.lock())
            fn(t);
}

}  // namespace iofwd::iod
