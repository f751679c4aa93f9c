#include "connection.hpp"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

#include "fd_passing.hpp"

namespace asio = boost::asio;

namespace iofwd::iod {

connection::connection(socket_type sock) : sock_(std::move(sock)) {}

std::shared_ptr<connection::owner> connection::lock_owner() const
{
    return owner_.lock();
}

void connection::start(std::weak_ptr<owner> o)
{
    owner_ = std::move(o);
    read_header();
}

void connection::read_header()
{
    in_.resize(proto::header_size);
    asio::async_read(sock_, asio::buffer(in_),
                     [this, keep = lock_owner()](boost::system::error_code ec, std::size_t) {
                         if (ec) {
                             keep->lost(ec == asio::error::eof ? "closed the connection"
                                                               : ec.message());
                             return;
                         }
                         std::string why;
                         if (auto err = proto::decode_header(in_, header_, why)) {
                             keep->malformed(err, why);
                             return;
                         }
                         read_payload();
                     });
}

void connection::read_payload()
{
    in_.resize(header_.length);
    asio::async_read(sock_, asio::buffer(in_),
                     [this, keep = lock_owner()](boost::system::error_code ec, std::size_t) {
                         if (ec) {
                             keep->lost(ec == asio::error::eof ? "closed the connection mid-message"
                                                               : ec.message());
                             return;
                         }
                         proto::message m;
                         std::string why;
                         if (auto err = proto::decode_payload(header_, in_, m, why)) {
                             keep->malformed(err, why);
                             return;
                         }
                         keep->received(std::move(m));
                         if (open_ && !close_after_write_)
                             read_header();
                     });
}

void connection::send(const proto::message& m)
{
    if (!open_)
        return;
    out_.push_back(proto::encode(m));
    if (!writing_)
        write_next();
}

bool connection::send_with_fds(const proto::message& m, std::initializer_list<int> fds,
                               std::string& why)
{
    std::vector<std::byte> bytes = proto::encode(m);
    if (writing_ || !out_.empty() || !open_) {
        why = "descriptors can only go with the first message";
        return false;
    }
    const ssize_t n = iofwd::send_with_fds(sock_.native_handle(), bytes, fds);
    if (n <= 0) {
        // A fresh connection's buffer takes a few hundred bytes; anything else
        // means the rank is gone.
        why = fmt::format("sending {} failed: {}", proto::to_string(proto::type_of(m)),
                          n < 0 ? std::strerror(errno) : "nothing sent");
        return false;
    }
    if (static_cast<std::size_t>(n) < bytes.size()) {
        out_.emplace_back(bytes.begin() + n, bytes.end());
        write_next();
    }
    return true;
}

void connection::close_after_queue()
{
    if (!open_ || close_after_write_)
        return;
    close_after_write_ = true;
    if (!writing_)
        write_next();
}

void connection::close()
{
    if (close_after_write_ && writing_)
        return;
    open_ = false;
    boost::system::error_code ignored;
    sock_.close(ignored);
}

void connection::write_next()
{
    if (out_.empty()) {
        writing_ = false;
        if (close_after_write_ && open_) {
            open_ = false;
            boost::system::error_code ignored;
            sock_.shutdown(socket_type::shutdown_both, ignored);
            sock_.close(ignored);
        }
        return;
    }
    writing_ = true;
    asio::async_write(sock_, asio::buffer(out_.front()),
                      [this, keep = lock_owner()](boost::system::error_code ec, std::size_t) {
                          out_.pop_front();
                          if (ec) {
                              out_.clear();
                              writing_ = false;
                              keep->lost(ec.message());
                              return;
                          }
                          write_next();
                      });
}

}  // namespace iofwd::iod
