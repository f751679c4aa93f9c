#include "store/verify.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "errors.hpp"

namespace iofwd::store {

bool version_result::intact() const
{
    return state == version_state::complete &&
           std::all_of(objects.begin(), objects.end(), [](const auto& o) { return o.intact; });
}

std::error_code verify_job(backend& st, const std::string& job,
                           const std::vector<std::uint64_t>& versions, const verify_options& opts,
                           verify_report& out, std::string& why)
{
    std::vector<std::uint64_t> present;
    if (auto ec = job_versions(st, job, present)) {
        why = ec == errc::not_found ? fmt::format("job '{}' is not in {}", job, st.describe())
                                    : fmt::format("cannot list job {} in {}: {}", job,
                                                  st.describe(), failure(st, job, ec));
        return ec;
    }
    std::vector<std::uint64_t> wanted = versions.empty() ? present : versions;
    for (const auto v : wanted)
        if (!std::binary_search(present.begin(), present.end(), v)) {
            why = fmt::format("version {} of job {} is not in {}", v, job, st.describe());
            return make_error_code(errc::not_found);
        }

    // The records first (a few small reads each), then the objects of the
    // complete versions, spread over the threads.
    verify_report report;
    std::vector<manifest> manifests;  // of every object, by index below
    struct job_item {
        std::size_t version;  // index into report.versions
        std::size_t object;   // index into its objects
        std::size_t manifest; // index into manifests
        std::size_t entry;
    };
    std::vector<job_item> work;
    std::uint64_t total = 0;
    for (const auto v : wanted) {
        version_result r;
        r.version = v;
        version_info info;
        if (auto ec = load_version(st, job, v, info, r.why, &r.what); ec == errc::not_found) {
            r.state = version_state::incomplete;
            r.why = "no COMPLETE record";
            report.versions.push_back(std::move(r));
            continue;
        } else if (ec) {
            r.state = version_state::damaged;
            ++report.damaged;
            report.versions.push_back(std::move(r));
            continue;
        }
        r.state = version_state::complete;
        for (std::size_t k = 0; k < info.manifests.size(); ++k) {
            manifests.push_back(std::move(info.manifests[k]));
            const auto& mm = manifests.back();
            for (std::size_t i = 0; i < mm.entries.size(); ++i) {
                const auto& e = mm.entries[i];
                object_result o;
                o.place = info.places[k][i];
                o.name = o.place.in_pack ? fmt::format("{} (version {} rank {})", o.place.object, v,
                                                    e.rank)
                                      : o.place.object;
                o.node = mm.node;
                o.rank = e.rank;
                o.size = e.size;
                o.crc32c = e.crc32c;
                work.push_back({report.versions.size(), r.objects.size(), manifests.size() - 1, i});
                r.objects.push_back(std::move(o));
                total += e.size;
            }
        }
        report.versions.push_back(std::move(r));
    }

    std::atomic<std::size_t> next{0};
    std::mutex progress_mutex;
    std::uint64_t done = 0;
    auto advance = [&](std::uint64_t n) {
        if (!opts.progress)
            return;
        std::lock_guard lock(progress_mutex);
        done += n;
        opts.progress(done, total);
    };
    auto worker = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < work.size();) {
            const auto& item = work[i];
            auto& o = report.versions[item.version].objects[item.object];
            const auto& m = manifests[item.manifest];
            const auto& e = m.entries[item.entry];
            std::uint64_t seen = 0;
            const block_check each = [&](std::span<const std::byte> block, std::uint64_t offset,
                                         std::string& w, damage& d) {
                if (opts.content && !opts.content(m, e, block, offset, w, d))
                    return false;
                seen += block.size();
                advance(block.size());
                return true;
            };
            o.intact = !check_object(st, o.place, o.size, o.crc32c, each, o.why, o.what);
            if (!o.intact && o.place.in_pack)
                o.what.object = o.name;  // which version and rank, not where in the pack
            if (seen < o.size)
                advance(o.size - seen);  // what a damaged object will not show
        }
    };
    const unsigned n = std::max(1u, std::min<unsigned>(opts.threads,
                                                        static_cast<unsigned>(work.size())));
    std::vector<std::jthread> threads;
    for (unsigned t = 1; t < n; ++t)
        threads.emplace_back(worker);
    worker();
    threads.clear();

    // A version with an object missing that is no longer complete was
    // removed while it was checked (retention of a live job, iofwd rm):
    // not damage.
    for (auto& v : report.versions) {
        if (v.state != version_state::complete ||
            std::none_of(v.objects.begin(), v.objects.end(), [](const auto& o) {
                return !o.intact && o.what.kind == problem::missing;
            }))
            continue;
        bool still = true;
        if (!committed(st, job, v.version, still) && !still) {
            v.state = version_state::incomplete;
            v.why = "removed while it was checked: retention, or iofwd rm";
            v.objects.clear();
        }
    }
    for (const auto& v : report.versions)
        for (const auto& o : v.objects) {
            ++report.objects;
            if (o.intact)
                report.bytes += o.size;
            else
                ++report.damaged;
        }
    out = std::move(report);
    return {};
}

}  // namespace iofwd::store
