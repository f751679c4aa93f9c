#include "errors.hpp"

#include <cerrno>

namespace iofwd {
namespace {

class runtime_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "iofwd"; }
    std::string message(int value) const override
    {
        switch (static_cast<errc>(value)) {
        case errc::not_initialized: return "io library not initialised (call io_init first)";
        case errc::already_initialized: return "io library already initialised";
        case errc::invalid_argument: return "invalid argument";
        case errc::too_large: return "length exceeds the registered buffer or a limit";
        case errc::daemon_gone: return "the iod daemon went away";
        case errc::daemon_launch_failed: return "the iod daemon could not be started";
        case errc::daemon_timeout: return "timed out waiting for the iod daemon";
        case errc::daemon_failed: return "the iod daemon exited with an error";
        case errc::protocol_error: return "malformed protocol message";
        case errc::version_mismatch: return "protocol version mismatch";
        case errc::permission_denied: return "peer belongs to another user";
        case errc::rank_in_use: return "node-local rank already connected";
        case errc::rank_mismatch: return "ranks disagree on the number of node-local ranks";
        case errc::peer_gone: return "the client process went away";
        case errc::store_error: return "the store could not make the data durable";
        case errc::corrupt: return "stored data fails its checksum";
        case errc::not_found: return "no such object or version";
        case errc::shutting_down: return "the daemon is shutting down";
        case errc::exists: return "the object exists already";
        case errc::incomplete: return "a checkpoint version is not complete on every node";
        case errc::job_finishing: return "the daemon is finishing the previous job";
        case errc::newer_format:
            return "the job is kept in a store format newer than this iofwd reads (the job's "
                   "FORMAT object says which): use a newer iofwd";
        case errc::unsafe_path:
            return "refused a store path that is not the user's own (another user's, writable by "
                   "others, a symlink, or not a regular file)";
        }
        return "unknown iofwd error " + std::to_string(value);
    }
};

class ucx_category_impl final : public std::error_category {
public:
    const char* name() const noexcept override { return "ucx"; }
    std::string message(int value) const override
    {
        return ucs_status_string(static_cast<ucs_status_t>(value));
    }
};

int ucx_to_errno(int status)
{
    switch (static_cast<ucs_status_t>(status)) {
    case UCS_ERR_NO_MEMORY: return ENOMEM;
    case UCS_ERR_INVALID_PARAM: return EINVAL;
    case UCS_ERR_TIMED_OUT: return ETIMEDOUT;
    case UCS_ERR_UNREACHABLE: return EHOSTUNREACH;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT: return ECONNRESET;
    case UCS_ERR_CANCELED: return ECANCELED;
    case UCS_ERR_UNSUPPORTED: return ENOTSUP;
    case UCS_ERR_MESSAGE_TRUNCATED: return EMSGSIZE;
    case UCS_ERR_NO_DEVICE:
    case UCS_ERR_NO_RESOURCE: return ENODEV;
    default: return EIO;
    }
}

int runtime_to_errno(errc e)
{
    switch (e) {
    case errc::not_initialized: return ENOTCONN;
    case errc::already_initialized: return EALREADY;
    case errc::invalid_argument: return EINVAL;
    case errc::too_large: return EFBIG;
    case errc::daemon_gone: return ECONNRESET;
    // A daemon that could not start says why with the cause's errno
    // (start_report.hpp), which io_init returns; this is only for one that
    // died or exited without a word.
    case errc::daemon_launch_failed: return EIO;
    case errc::daemon_timeout: return ETIMEDOUT;
    case errc::daemon_failed: return EIO;
    case errc::protocol_error: return EPROTO;
    case errc::version_mismatch: return EPROTONOSUPPORT;
    case errc::permission_denied: return EACCES;
    case errc::rank_in_use: return EADDRINUSE;
    case errc::rank_mismatch: return EINVAL;
    case errc::peer_gone: return EPIPE;
    case errc::store_error: return EIO;
    case errc::corrupt: return EBADMSG;
    case errc::not_found: return ENOENT;
    case errc::shutting_down: return ESHUTDOWN;
    case errc::exists: return EEXIST;
    case errc::incomplete: return EIO;
    case errc::unsafe_path: return EACCES;
    case errc::job_finishing: return EBUSY;
    case errc::newer_format: return EPROTONOSUPPORT;
    }
    return EIO;
}

}  // namespace

const std::error_category& runtime_category() noexcept
{
    static const runtime_category_impl instance;
    return instance;
}

std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), runtime_category()};
}

const std::error_category& ucx_category() noexcept
{
    static const ucx_category_impl instance;
    return instance;
}

std::error_code make_ucx_error(ucs_status_t status) noexcept
{
    if (status == UCS_OK)
        return {};
    return {static_cast<int>(status), ucx_category()};
}

int to_errno(const std::error_code& ec) noexcept
{
    if (!ec)
        return 0;
    const auto& cat = ec.category();
    if (cat == runtime_category())
        return runtime_to_errno(static_cast<errc>(ec.value()));
    if (cat == ucx_category())
        return ucx_to_errno(ec.value());
    if (cat == std::generic_category() || cat == std::system_category())
        return ec.value() > 0 ? ec.value() : EIO;
    return EIO;
}

}  // namespace iofwd
