#include "store/backend.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "store/directory.hpp"
#include "store/rados.hpp"
#include "errors.hpp"
#include "rendezvous.hpp"

namespace iofwd::store {

std::error_code backend::put(const std::string& name, std::span<const std::byte> data)
{
    std::unique_ptr<object_writer> w;
    if (auto ec = create(name, data.size(), w))
        return ec;
    if (auto ec = w->write_at(data, 0))
        return ec;
    return w->commit();
}

std::error_code backend::put_new(const std::string& name, std::span<const std::byte> data)
{
    std::unique_ptr<object_writer> w;
    if (auto ec = create(name, data.size(), w))
        return ec;
    if (auto ec = w->write_at(data, 0))
        return ec;
    return w->commit_exclusive();
}

namespace {

bool valid_note(std::string_view note)
{
    return note.size() <= backend::max_note && std::all_of(note.begin(), note.end(), [](char c) {
               return std::isalnum(static_cast<unsigned char>(c)) || c == '+';
           });
}

}  // namespace

bool format_arrival(const std::string& member, const std::string& note, std::string& out)
{
    // Members are node names: valid_name's rule (at most max_member bytes).
    static_assert(backend::max_member == 200);
    if (!valid_name(member) || !valid_note(note))
        return false;
    out = member + "=" + note;
    return true;
}

bool parse_arrival(std::string_view text, backend::arrival& out)
{
    const auto eq = text.find('=');
    if (eq == std::string_view::npos)
        return false;
    backend::arrival a{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
    if (!valid_name(a.member) || !valid_note(a.note))
        return false;
    out = std::move(a);
    return true;
}

std::error_code fold_arrivals(std::vector<backend::arrival>& found)
{
    std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
        return a.member < b.member || (a.member == b.member && a.note < b.note);
    });
    found.erase(std::unique(found.begin(), found.end()), found.end());
    for (std::size_t i = 1; i < found.size(); ++i)
        if (found[i].member == found[i - 1].member)
            return make_error_code(errc::corrupt);
    return {};
}

void set_ceph_options(const std::string& conf, const std::string& user,
                      const std::string& keyring)
{
    for (const auto& [name, value] : {std::pair{"IOFWD_CEPH_CONF", &conf},
                                      std::pair{"IOFWD_CEPH_USER", &user},
                                      std::pair{"IOFWD_CEPH_KEYRING", &keyring}})
        if (!value->empty())
            ::setenv(name, value->c_str(), 1);
}

std::string failure(const backend& st, const std::string& name, std::error_code ec)
{
    if (ec == errc::unsafe_path)
        if (auto what = st.explain(name); !what.empty())
            return fmt::format("{}: {}", ec.message(), what);
    return ec.message();
}

std::error_code open(const std::string& location, std::unique_ptr<backend>& out, std::string& why,
                     const open_options& opts)
{
    std::string path = location;
#if IOFWD_HAVE_RADOS
    if (path.rfind("rados:", 0) == 0)
        return open_rados(path.substr(6), out, why);
#endif
    if (path.rfind("dir:", 0) == 0)
        path = path.substr(4);
    else if (const auto colon = path.find(':'); colon != std::string::npos && path[0] != '/' &&
                                                 path.find('/') > colon) {
        why = fmt::format("unknown store type '{}' in '{}' (known: dir:PATH{})",
                          path.substr(0, colon), location,
                          IOFWD_HAVE_RADOS ? ", rados:POOL" : "; this build has no rados");
        return make_error_code(errc::invalid_argument);
    }
    return directory_backend::open(path, opts, out, why);
}

}  // namespace iofwd::store
