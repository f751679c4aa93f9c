#include "ucx.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string_view>

#include "errors.hpp"

namespace iofwd::ucx {

std::error_code context::create(std::uint64_t features, const char* name, context& out,
                                bool shared_workers, const std::string& transports)
{
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK)
        return make_ucx_error(st);
    if (!transports.empty() &&
        (st = ucp_config_modify(config, "TLS", transports.c_str())) != UCS_OK) {
        ucp_config_release(config);
        return make_ucx_error(st);
    }
    // Each shared-memory transport's worker sets up its receive buffers 512
    // at a time by default (4 MiB, written through when made): 8-11 of the
    // 11-14 ms a worker takes to create here, and every rank and puller has
    // one. Growing them 64 at a time, as they are needed, takes 3.5 ms. A
    // user's own UCX_MM_/POSIX_/SYSV_RX_BUFS_GROW wins.
    if (!std::getenv("UCX_MM_RX_BUFS_GROW") && !std::getenv("UCX_POSIX_RX_BUFS_GROW") &&
        !std::getenv("UCX_SYSV_RX_BUFS_GROW"))
        ucp_config_modify(config, "MM_RX_BUFS_GROW", "64");  // best effort
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
    params.features = features;
    params.name = name;
    if (shared_workers) {
        params.field_mask |= UCP_PARAM_FIELD_MT_WORKERS_SHARED;
        params.mt_workers_shared = 1;
    }
    ucp_context_h h = nullptr;
    st = ucp_init(&params, config, &h);
    ucp_config_release(config);
    if (st != UCS_OK)
        return make_ucx_error(st);
    out.h_ = decltype(out.h_)(h);
    return {};
}

std::error_code worker::create(const context& ctx, worker& out)
{
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Each worker is driven from one thread only (the client serialises its
    // API calls; the daemon's event loop and each of its pullers own one).
    params.thread_mode = UCS_THREAD_MODE_SINGLE;
    ucp_worker_h h = nullptr;
    const ucs_status_t st = ucp_worker_create(ctx.get(), &params, &h);
    if (st != UCS_OK)
        return make_ucx_error(st);
    out.h_ = decltype(out.h_)(h);
    return {};
}

std::error_code worker::event_fd(int& out) const
{
    int fd = -1;
    const ucs_status_t st = ucp_worker_get_efd(h_.get(), &fd);
    if (st != UCS_OK)
        return make_ucx_error(st);
    out = fd;
    return {};
}

std::error_code worker::address(std::vector<std::byte>& out) const
{
    ucp_address_t* addr = nullptr;
    std::size_t len = 0;
    const ucs_status_t st = ucp_worker_get_address(h_.get(), &addr, &len);
    if (st != UCS_OK)
        return make_ucx_error(st);
    const auto* p = reinterpret_cast<const std::byte*>(addr);
    out.assign(p, p + len);
    ucp_worker_release_address(h_.get(), addr);
    return {};
}

std::error_code memory::map(const context& ctx, void* address, std::size_t length, memory& out)
{
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = address;
    params.length = length;
    ucp_mem_h h = nullptr;
    const ucs_status_t st = ucp_mem_map(ctx.get(), &params, &h);
    if (st != UCS_OK)
        return make_ucx_error(st);
    out.ctx_ = ctx.get();
    out.h_ = decltype(out.h_)(h, detail::unmap_memory{ctx.get()});
    return {};
}

std::error_code memory::pack_rkey(std::vector<std::byte>& out) const
{
    void* buf = nullptr;
    std::size_t len = 0;
    const ucs_status_t st = ucp_rkey_pack(ctx_, h_.get(), &buf, &len);
    if (st != UCS_OK)
        return make_ucx_error(st);
    const auto* p = static_cast<const std::byte*>(buf);
    out.assign(p, p + len);
    ucp_rkey_buffer_release(buf);
    return {};
}

std::error_code rkey::unpack(ucp_ep_h ep, std::span<const std::byte> packed, rkey& out)
{
    ucp_rkey_h h = nullptr;
    const ucs_status_t st = ucp_ep_rkey_unpack(ep, packed.data(), &h);
    if (st != UCS_OK)
        return make_ucx_error(st);
    out.h_ = decltype(out.h_)(h);
    return {};
}

std::string endpoint_transports(ucp_ep_h ep)
{
    char* text = nullptr;
    std::size_t size = 0;
    FILE* f = open_memstream(&text, &size);
    if (!f)
        return "unknown";
    ucp_ep_print_info(ep, f);
    std::fclose(f);
    // Lines look like "#   lane[0]:  3:posix/memory.0 md[1] -> md[1]/posix ..."
    std::set<std::string> names;
    std::string_view all(text, size);
    for (std::size_t pos = 0; (pos = all.find("lane[", pos)) != std::string_view::npos;) {
        const auto colon = all.find(':', all.find(']', pos));
        const auto eol = all.find('\n', pos);
        pos = eol == std::string_view::npos ? all.size() : eol;
        if (colon == std::string_view::npos || colon > pos)
            continue;
        auto rest = all.substr(colon + 1, pos - colon - 1);
        while (!rest.empty() && rest.front() == ' ')
            rest.remove_prefix(1);
        const auto digits_end = rest.find(':');  // skip "3:" resource index
        if (digits_end != std::string_view::npos && digits_end < 4)
            rest.remove_prefix(digits_end + 1);
        const auto name_end = rest.find_first_of(". ");
        names.emplace(rest.substr(0, name_end));
    }
    std::free(text);
    std::string out;
    for (const auto& n : names) {
        if (!out.empty())
            out += ", ";
        out += n;
    }
    return out.empty() ? "unknown" : out;
}

ucs_status_t endpoint::connect(ucp_worker_h w, std::span<const std::byte> address,
                               ucp_err_handler_cb_t on_error, void* arg, endpoint& out)
{
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    if (on_error) {
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_handler.cb = on_error;
        params.err_handler.arg = arg;
    }
    ucp_ep_h ep = nullptr;
    const ucs_status_t st = ucp_ep_create(w, &params, &ep);
    out.h_ = decltype(out.h_)(st == UCS_OK ? ep : nullptr);
    return st;
}

void* endpoint::close(mode how, ucp_send_nbx_callback_t done, void* user_data) noexcept
{
    ucp_ep_h ep = h_.release();
    if (!ep)
        return nullptr;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = how == mode::force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    if (done) {
        param.op_attr_mask |= UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
        param.cb.send = done;
        param.user_data = user_data;
    }
    ucs_status_ptr_t p = ucp_ep_close_nbx(ep, &param);
    return UCS_PTR_IS_PTR(p) ? p : nullptr;
}

namespace detail {

void unmap_memory::operator()(ucp_mem_h h) const noexcept
{
    const ucs_status_t st = ucp_mem_unmap(ctx, h);
    if (st != UCS_OK)
        std::fprintf(stderr, "iofwd: ucp_mem_unmap failed: %s\n", ucs_status_string(st));
}

void force_close::operator()(ucp_ep_h h) const noexcept
{
    // Operations still on it are cancelled and complete through progress;
    // the close itself is not waited for.
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t p = ucp_ep_close_nbx(h, &param);
    if (UCS_PTR_IS_PTR(p))
        ucp_request_free(p);
}

}  // namespace detail

bool request_finished(ucs_status_ptr_t ptr, ucs_status_t& status) noexcept
{
    if (ptr == nullptr) {
        status = UCS_OK;
        return true;
    }
    if (UCS_PTR_IS_ERR(ptr)) {
        status = UCS_PTR_STATUS(ptr);
        return true;
    }
    return false;
}

}  // namespace iofwd::ucx
