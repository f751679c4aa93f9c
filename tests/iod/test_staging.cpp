#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <vector>

#include "process.hpp"
#include "staging.hpp"
#include "ucx.hpp"

using namespace iofwd;
using iofwd::iod::slot;
using iofwd::iod::staging;

namespace {

struct fixture {
    ucx::context ctx;
    staging st;
    explicit fixture(std::uint64_t total, std::uint64_t slot_size)
    {
        REQUIRE_FALSE(ucx::context::create(UCP_FEATURE_RMA, "iofwd-test", ctx));
        REQUIRE_FALSE(st.init(ctx, total, slot_size));
    }
};

}  // namespace

TEST_CASE("small writes share slots in pieces; a slot comes back whole", "[staging]")
{
    // Two slots of 1 MiB: pieces of 64 KiB (4 KiB asked) and 256 KiB (200 KB asked).
    fixture f(2 << 20, 1 << 20);
    std::vector<slot> got;
    auto keep = [&](slot s) { got.push_back(s); };
    for (int i = 0; i < 16; ++i)
        f.st.acquire(keep, 4096);
    REQUIRE(got.size() == 16);  // one slot, cut in 16
    std::set<std::byte*> at;
    for (const auto& s : got) {
        CHECK(s.size == 64u << 10);
        CHECK(s.index == got.front().index);
        CHECK((s.data - got.front().data) % (64 << 10) == 0);
        at.insert(s.data);
    }
    CHECK(at.size() == 16);  // no piece handed out twice
    f.st.acquire(keep, 200000);
    REQUIRE(got.size() == 17);
    CHECK(got.back().size == 256u << 10);
    CHECK(got.back().index != got.front().index);  // the second slot, cut in 4
    // No whole slot is left: a large write waits ...
    bool large = false;
    slot whole;
    f.st.acquire([&](slot s) { large = true; whole = s; });
    CHECK_FALSE(large);
    CHECK(f.st.short_of_slots());
    // ... until every piece of a slot is back.
    for (int i = 0; i < 15; ++i)
        f.st.release(got[i]);
    CHECK_FALSE(large);
    f.st.release(got[15]);
    REQUIRE(large);
    CHECK(whole.size == 1u << 20);
    CHECK(whole.index == got.front().index);
    CHECK_FALSE(f.st.short_of_slots());
}

TEST_CASE("a small write waits for a piece when staging is full, in order", "[staging]")
{
    fixture f(1 << 20, 1 << 20);
    slot whole;
    f.st.acquire([&](slot s) { whole = s; });
    std::vector<int> order;
    std::vector<slot> pieces;
    for (int i = 0; i < 3; ++i)
        f.st.acquire([&, i](slot s) { order.push_back(i); pieces.push_back(s); }, 4096);
    CHECK(order.empty());
    f.st.release(whole);
    CHECK(order == std::vector<int>{0, 1, 2});
    for (const auto& s : pieces)
        CHECK(s.size == 64u << 10);
    for (const auto& s : pieces)
        f.st.release(s);
    // Whole again: a large write gets it at once.
    bool large = false;
    f.st.acquire([&](slot s) { large = s.size == (1u << 20); });
    CHECK(large);
}

TEST_CASE("writes of more than half a slot take whole slots", "[staging]")
{
    fixture f(2 << 20, 1 << 20);
    std::vector<slot> got;
    f.st.acquire([&](slot s) { got.push_back(s); }, (512u << 10) + 1);
    f.st.acquire([&](slot s) { got.push_back(s); }, 512u << 10);
    f.st.acquire([&](slot s) { got.push_back(s); }, 512u << 10);
    REQUIRE(got.size() == 3);
    CHECK(got[0].size == 1u << 20);
    CHECK(got[1].size == 512u << 10);  // two halves of the other slot
    CHECK(got[2].size == 512u << 10);
    CHECK(got[1].index == got[2].index);
    CHECK(got[0].index != got[1].index);
    CHECK(got[2].data - got[1].data == std::ptrdiff_t{512} << 10);
}

TEST_CASE("the whole region is faulted in after start, whatever the slot size", "[staging]")
{
    // A slot size that is no multiple of a page (IOFWD_CHUNK_SIZE takes any
    // byte count from 4 KiB): the fault-in still covers every page.
    constexpr std::uint64_t slot_bytes = 1'000'000, slots = 12;
    fixture f(slot_bytes * slots, slot_bytes);
    std::vector<slot> got;
    for (std::uint64_t i = 0; i < slots; ++i)
        f.st.acquire([&](slot s) { got.push_back(s); });
    REQUIRE(got.size() == slots);
    std::byte* base = got.front().data;
    for (const auto& s : got)
        base = std::min(base, s.data);
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t pages = (slot_bytes * slots + page - 1) / page;
    std::vector<unsigned char> in(pages);
    const auto resident = [&] {
        REQUIRE(::mincore(base, slot_bytes * slots, in.data()) == 0);
        return static_cast<std::size_t>(
            std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; }));
    };
    const bool all = test::wait_until([&] { return resident() == pages; }, std::chrono::seconds(20));
    INFO(resident() << " of " << pages << " pages resident");
    CHECK(all);
    for (const auto& s : got)
        f.st.release(s);
}
