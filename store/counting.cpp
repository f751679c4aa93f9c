#include "store/counting.hpp"

namespace iofwd::store {
namespace {

void bump(std::atomic<std::uint64_t>& n, std::uint64_t by = 1)
{
    n.fetch_add(by, std::memory_order_relaxed);
}

class counting_writer final : public object_writer {
public:
    counting_writer(std::unique_ptr<object_writer> inner,
                    std::shared_ptr<counting_backend::counters> n)
        : inner_(std::move(inner)), n_(std::move(n))
    {
    }

    std::error_code write_at(std::span<const std::byte> data, std::uint64_t offset) override
    {
        bump(n_->writes);
        return inner_->write_at(data, offset);
    }
    std::error_code write_staged(std::span<const std::byte> data, std::uint64_t offset,
                                 std::uint64_t capacity) override
    {
        bump(n_->writes);
        return inner_->write_staged(data, offset, capacity);
    }
    std::error_code write_checksummed(std::span<const std::byte> data, std::uint64_t offset,
                                      std::uint64_t capacity, std::uint32_t& crc) override
    {
        bump(n_->writes);
        return inner_->write_checksummed(data, offset, capacity, crc);
    }
    std::error_code commit() override
    {
        bump(n_->commits);
        return inner_->commit();
    }
    std::error_code commit_exclusive() override
    {
        bump(n_->commits);
        return inner_->commit_exclusive();
    }

private:
    std::unique_ptr<object_writer> inner_;
    std::shared_ptr<counting_backend::counters> n_;
};

}  // namespace

op_counts op_counts::operator-(const op_counts& o) const noexcept
{
    op_counts d;
    for (const auto& f : op_fields)
        d.*f.count = this->*f.count - o.*f.count;
    return d;
}

op_counts counting_backend::counts() const noexcept
{
    const auto get = [](const std::atomic<std::uint64_t>& a) {
        return a.load(std::memory_order_relaxed);
    };
    return {get(n_->created), get(n_->writes),  get(n_->commits),      get(n_->reads),
            get(n_->stats),   get(n_->lists),   get(n_->listed),       get(n_->removes),
            get(n_->arrives), get(n_->arrival_reads), get(n_->claims), get(n_->arrival_entries),
            get(n_->arrival_keys)};
}

std::error_code counting_backend::create(const std::string& name, std::uint64_t size,
                                         std::unique_ptr<object_writer>& out)
{
    bump(n_->created);
    std::unique_ptr<object_writer> w;
    if (auto ec = inner_->create(name, size, w))
        return ec;
    out = std::make_unique<counting_writer>(std::move(w), n_);
    return {};
}

std::error_code counting_backend::read(const std::string& name, std::uint64_t offset,
                                       std::span<std::byte> out)
{
    bump(n_->reads);
    return inner_->read(name, offset, out);
}

std::error_code counting_backend::size(const std::string& name, std::uint64_t& out)
{
    bump(n_->stats);
    return inner_->size(name, out);
}

std::error_code counting_backend::modified(const std::string& name, std::int64_t& out)
{
    bump(n_->stats);
    return inner_->modified(name, out);
}

std::error_code counting_backend::list(const std::string& prefix, std::vector<std::string>& out)
{
    bump(n_->lists);
    auto ec = inner_->list(prefix, out);
    if (!ec)
        bump(n_->listed, out.size());
    return ec;
}

std::error_code counting_backend::remove(const std::string& name)
{
    bump(n_->removes);
    return inner_->remove(name);
}

std::error_code counting_backend::remove_lazily(const std::string& name)
{
    bump(n_->removes);
    return inner_->remove_lazily(name);
}

std::error_code counting_backend::leftovers(const std::string& dir, std::vector<std::string>& out)
{
    bump(n_->claims);
    return inner_->leftovers(dir, out);
}

std::error_code counting_backend::remove_leftover(const std::string& name)
{
    bump(n_->removes);
    return inner_->remove_leftover(name);
}

std::error_code counting_backend::claim_job(const std::string& job, const std::string& node,
                                            std::unique_ptr<claim>& out)
{
    bump(n_->claims);
    return inner_->claim_job(job, node, out);
}

std::error_code counting_backend::claimants(const std::string& job, std::vector<std::string>& out)
{
    bump(n_->claims);
    return inner_->claimants(job, out);
}

std::error_code counting_backend::arrive(const std::string& tally, const std::string& member,
                                         const std::string& note, std::uint64_t& count)
{
    bump(n_->arrives);
    return inner_->arrive(tally, member, note, count);
}

std::error_code counting_backend::arrive_keyed(const std::string& tally,
                                               const std::string& member, const std::string& note,
                                               std::uint64_t first, std::uint64_t last,
                                               std::uint64_t& most)
{
    bump(n_->arrives);
    // Each key a link (and, for the first node under it, a file) more.
    if (last >= first)
        bump(n_->arrival_keys, last - first + 1);
    return inner_->arrive_keyed(tally, member, note, first, last, most);
}

std::error_code counting_backend::arrivals(const std::string& tally, std::vector<arrival>& out)
{
    bump(n_->arrival_reads);
    const auto ec = inner_->arrivals(tally, out);
    if (!ec)
        bump(n_->arrival_entries, out.size());
    return ec;
}

std::error_code counting_backend::remove_arrivals(const std::string& tally)
{
    bump(n_->removes);
    return inner_->remove_arrivals(tally);
}

}  // namespace iofwd::store
