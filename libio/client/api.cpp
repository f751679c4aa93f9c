// The C API: thin extern "C" functions over the one client object. No
// exception crosses this boundary; every call is serialised by one mutex.
#include "io.h"

#include <cstring>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "client.hpp"
#include "errors.hpp"

namespace {

std::mutex api_mutex;
iofwd::client::client& the_client()
{
    static iofwd::client::client c;
    return c;
}
std::string last_error;
std::string provider = "none", store_location = "none", node_name = "none";

// What io_provider_name, io_store_location and io_node_name answer, kept after io_init.
void remember_daemon()
{
    const auto& info = the_client().daemon_info();
    provider = info.transport;
    store_location = info.store;
    node_name = info.node;
}

template <typename F>
int guarded(const char* call, F&& f) noexcept
{
    try {
        const std::error_code ec = f();
        if (!ec)
            return 0;
        last_error = fmt::format("{}: {}", call, the_client().why());
        return iofwd::to_errno(ec);
    } catch (const std::exception& e) {
        last_error = fmt::format("{}: internal error: {}", call, e.what());
        return EIO;
    } catch (...) {
        last_error = fmt::format("{}: internal error", call);
        return EIO;
    }
}

}  // namespace

extern "C" {

int io_init(void* buffer, uint64_t len, uint32_t rank, uint32_t ranks, char** daemon_args,
            int blocking)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_init", [&] {
        auto ec = the_client().init(buffer, len, rank, ranks, daemon_args, blocking != 0);
        if (!ec)
            remember_daemon();
        return ec;
    });
}

int io_init_run(void* buffer, uint64_t len, uint32_t rank, uint32_t ranks, uint32_t nodes,
                const char* run, char** daemon_args, int blocking)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_init_run", [&] {
        auto ec = the_client().init(buffer, len, rank, ranks, daemon_args, blocking != 0,
                                    {nodes, run ? std::string(run) : std::string()});
        if (!ec)
            remember_daemon();
        return ec;
    });
}

int io_new_run_name(char* out, size_t size)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_new_run_name", [&] {
        std::string name;
        if (auto ec = iofwd::client::new_run_name(name))
            return ec;
        if (!out || size <= name.size())
            return the_client().reject(
                iofwd::errc::invalid_argument,
                fmt::format("the buffer holds {} bytes; a run name needs {}", out ? size : 0,
                            name.size() + 1));
        std::memcpy(out, name.c_str(), name.size() + 1);
        return std::error_code{};
    });
}

int io_set_barrier(int (*barrier)(void* ctx, double timeout_s), void* ctx)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_set_barrier", [&] {
        if (!the_client().initialized())
            return the_client().reject(iofwd::errc::not_initialized,
                                       "call io_init (or io_init_run) first");
        the_client().set_barrier(barrier, ctx);
        return std::error_code{};
    });
}

int io_write_version(uint64_t len, uint64_t* version)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_write", [&] {
        std::uint64_t v = 0;
        auto ec = the_client().write(len, v);
        if (!ec && version)
            *version = v;
        return ec;
    });
}

int io_write(uint64_t len)
{
    return io_write_version(len, nullptr);
}

int io_wait(uint64_t version)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_wait", [&] {
        iofwd::proto::version_state_msg st;
        return the_client().wait(version, st);
    });
}

int io_test(uint64_t version, int* state)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_test", [&] {
        if (!state)
            return the_client().reject(iofwd::errc::invalid_argument, "state is NULL");
        iofwd::proto::version_state_t st{};
        auto ec = the_client().test(version, st);
        if (!ec)
            *state = static_cast<int>(st);
        return ec;
    });
}

int io_flush_span(uint64_t version, double* start, double* durable)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_flush_span", [&] {
        if (!start || !durable)
            return the_client().reject(iofwd::errc::invalid_argument,
                                       !start ? "start is NULL" : "durable is NULL");
        std::uint64_t s = 0, d = 0;
        auto ec = the_client().flush_span(version, s, d);
        if (!ec) {
            *start = static_cast<double>(s) * 1e-9;
            *durable = static_cast<double>(d) * 1e-9;
        }
        return ec;
    });
}

int io_read(uint64_t version, void* buffer, uint64_t len, uint64_t* size)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_read", [&] {
        if (!buffer && len > 0)
            return the_client().reject(iofwd::errc::invalid_argument,
                                       fmt::format("buffer is NULL with len {}", len));
        std::uint64_t n = 0;
        auto ec = the_client().read(
            version, std::span(static_cast<std::byte*>(buffer), static_cast<std::size_t>(len)), n);
        if (!ec && size)
            *size = n;
        return ec;
    });
}

int io_latest(uint64_t* version)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_latest", [&] {
        if (!version)
            return the_client().reject(iofwd::errc::invalid_argument, "version is NULL");
        return the_client().latest(false, *version);
    });
}

int io_latest_verified(uint64_t* version)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_latest_verified", [&] {
        if (!version)
            return the_client().reject(iofwd::errc::invalid_argument, "version is NULL");
        auto ec = the_client().latest(true, *version);
        if (!ec && !the_client().why().empty())
            last_error = "io_latest_verified: " + the_client().why();
        return ec;
    });
}

int io_next_version(uint64_t* version)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_next_version", [&] {
        if (!the_client().initialized())
            return the_client().reject(iofwd::errc::not_initialized, "call io_init first");
        if (!version)
            return the_client().reject(iofwd::errc::invalid_argument, "version is NULL");
        *version = the_client().next_version();
        return std::error_code{};
    });
}

int io_finalize(void)
{
    std::lock_guard lock(api_mutex);
    return guarded("io_finalize", [&] { return the_client().finalize(); });
}

const char* io_strerror(int code)
{
    if (code == 0)
        return "success";
    const char* s = strerrordesc_np(code);
    return s ? s : "unknown error";
}

const char* io_last_error(void)
{
    std::lock_guard lock(api_mutex);
    return last_error.c_str();
}

const char* io_provider_name(void)
{
    std::lock_guard lock(api_mutex);
    return provider.c_str();
}

const char* io_store_location(void)
{
    std::lock_guard lock(api_mutex);
    return store_location.c_str();
}

int io_daemon_pid(void)
{
    std::lock_guard lock(api_mutex);
    return the_client().initialized() ? static_cast<int>(the_client().daemon_info().daemon_pid) : 0;
}

const char* io_node_name(void)
{
    std::lock_guard lock(api_mutex);
    return node_name.c_str();
}

}  // extern "C"
