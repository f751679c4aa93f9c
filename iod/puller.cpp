#include "puller.hpp"

#include <fmt/format.h>

#include <boost/asio/post.hpp>

#include "errors.hpp"
#include "log.hpp"
#include "procfs.hpp"

namespace iofwd::iod {

namespace asio = boost::asio;

bool decode_push(const void* header, std::size_t header_length, std::size_t length,
                 const ucp_am_recv_param_t* param, proto::push_header& out)
{
    if (!proto::decode_push_header({static_cast<const std::byte*>(header), header_length}, out)) {
        log_warn("a pushed chunk with a {} byte header (not {}): refused", header_length,
                 proto::push_header_size);
        return false;
    }
    if (!(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
        // Ranks push with rendezvous only; an eager chunk's bytes would
        // vanish with the callback that announced them.
        log_warn("a pushed chunk of {} bytes not sent by rendezvous: refused", length);
        return false;
    }
    return true;
}

// One receive, from receive() to its end: what it copies, and whom to tell.
struct puller::receive_op {
    puller* self;
    std::uint64_t sender;
    void* desc;
    void* dest;
    std::size_t length;
    ucp_mem_h memh;
    std::function<void(ucs_status_t)> done;
};

puller::puller(asio::io_context& loop, unsigned index, arrival on_arrival, chunk_claims* claims)
    : loop_(loop), index_(index), on_arrival_(std::move(on_arrival)), claims_(claims)
{
}

puller::~puller()
{
    if (thread_.joinable()) {
        asio::post(io_, [this] {
            eps_.clear();  // closed by force
            driver_.stop();
            keep_.reset();
            io_.stop();
        });
        thread_.join();
    }
}

std::error_code puller::start(const ucx::context& ctx, std::string& why)
{
    if (auto ec = ucx::worker::create(ctx, worker_)) {
        why = fmt::format("UCX worker creation for puller {} failed: {}", index_, ec.message());
        return ec;
    }
    ucp_am_handler_param_t hp{};
    hp.field_mask =
        UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = proto::am_push;
    hp.cb = &puller::on_push;
    hp.arg = this;
    if (ucs_status_t st = ucp_worker_set_am_recv_handler(worker_.get(), &hp); st != UCS_OK) {
        why = fmt::format("cannot set the UCX active-message handler of puller {}: {}", index_,
                          ucs_status_string(st));
        return make_ucx_error(st);
    }
    if (auto ec = worker_.address(address_)) {
        why = fmt::format("the UCX worker address of puller {}: {}", index_, ec.message());
        return ec;
    }
    if (auto ec = driver_.start(why))
        return ec;
    keep_.emplace(io_.get_executor());
    // From here on the worker is touched on the thread only.
    thread_ = std::thread([this] {
        name_this_thread(fmt::format("iod-pull-{}", index_).c_str());
        io_.run();
    });
    return {};
}

ucs_status_t puller::on_push(void* arg, const void* header, std::size_t header_length, void* data,
                             std::size_t length, const ucp_am_recv_param_t* param)
{
    auto* self = static_cast<puller*>(arg);
    proto::push_header h;
    if (!decode_push(header, header_length, length, param, h))
        return UCS_ERR_INVALID_PARAM;
    if (self->claims_) {
        if (auto c = self->claims_->take({h.session, h.cookie, h.offset}, length)) {
            asio::post(self->loop_, std::move(c->taken));
            // Received on this thread, after this callback returns.
            self->receive(h.session, data, c->dest, length, c->memh, std::move(c->done));
            return UCS_INPROGRESS;
        }
    }
    asio::post(self->loop_, [self, h, length, data] { self->on_arrival_(*self, h, length, data); });
    return UCS_INPROGRESS;
}

void puller::connect(std::uint64_t sender, std::vector<std::byte> rank_address, std::string who)
{
    asio::post(io_, [this, sender, address = std::move(rank_address), who = std::move(who)] {
        ucx::endpoint ep;
        if (ucs_status_t st = ucx::endpoint::connect(worker_.get(), address, nullptr, nullptr, ep);
            st != UCS_OK) {
            log_warn("puller {}: no endpoint to {}: {}", index_, who, ucs_status_string(st));
            return;
        }
        closed_.erase(sender);  // a key drawn again (daemon::new_push_key)
        eps_[sender] = std::move(ep);
        driver_.kick();
    });
}

void puller::disconnect(std::uint64_t sender)
{
    asio::post(io_, [this, sender] {
        closed_.insert(sender);
        const auto it = eps_.find(sender);
        if (it == eps_.end())
            return;
        eps_.erase(it);  // closed by force
        driver_.kick();  // the cancelled operations complete through progress
    });
}

void puller::receive(std::uint64_t sender, void* desc, void* dest, std::size_t length,
                     ucp_mem_h memh, std::function<void(ucs_status_t)> done)
{
    auto* op = new receive_op{this, sender, desc, dest, length, memh, std::move(done)};
    asio::post(io_, [this, op] {
        if (closed_.contains(op->sender)) {
            finish(op, UCS_ERR_CANCELED);
            return;
        }
        ucp_request_param_t param{};
        param.op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
        param.cb.recv_am = &puller::receive_done;
        param.user_data = op;
        param.memh = op->memh;
        ucs_status_t st = UCS_OK;
        if (ucx::request_finished(
                ucp_am_recv_data_nbx(worker_.get(), op->desc, op->dest, op->length, &param), st)) {
            finish(op, st);
            return;
        }
        driver_.busy_begin();
    });
}

void puller::receive_done(void* request, ucs_status_t status, std::size_t, void* user_data)
{
    auto* op = static_cast<receive_op*>(user_data);
    ucp_request_free(request);
    op->self->driver_.busy_end();
    op->self->finish(op, status);
}

void puller::finish(receive_op* op, ucs_status_t st)
{
    if (st == UCS_OK)
        bytes_read_.fetch_add(op->length, std::memory_order_relaxed);
    asio::post(loop_, [op, st] {
        op->done(st);
        delete op;
    });
}

void puller::release(std::uint64_t sender, void* desc)
{
    asio::post(io_, [this, sender, desc] {
        if (closed_.contains(sender))
            return;
        ucp_am_data_release(worker_.get(), desc);
        // The release queues the answer that ends the rank's send; only
        // progress sends it, and an idle worker is not progressed.
        driver_.kick();
    });
}

void give_back(pushed_chunk c, ucx::worker& loop_worker, worker_driver& loop_driver,
               std::uint64_t sender)
{
    if (c.via) {
        c.via->release(sender, c.desc);
        return;
    }
    ucp_am_data_release(loop_worker.get(), c.desc);
    loop_driver.kick();
}

}  // namespace iofwd::iod
