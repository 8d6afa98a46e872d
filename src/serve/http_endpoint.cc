#include "serve/http_endpoint.h"

#include <civetweb.h>

#include <array>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/text.h"
#include "serve/address.h"

namespace cfdb::worker {
namespace {

constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

// Send answers `status` with `body` (text), none for a HEAD request.
int Send(mg_connection* connection, int status, std::string_view type,
         std::string_view body, bool head,
         std::string_view allow = std::string_view()) {
  mg_response_header_start(connection, status);
  mg_response_header_add(connection, "Content-Type", type.data(),
                         static_cast<int>(type.size()));
  const std::string length = std::to_string(body.size());
  mg_response_header_add(connection, "Content-Length", length.c_str(), -1);
  mg_response_header_add(connection, "Cache-Control", "no-store", -1);
  if (!allow.empty()) {
    mg_response_header_add(connection, "Allow", allow.data(),
                           static_cast<int>(allow.size()));
  }
  mg_response_header_send(connection);
  if (!head && !body.empty()) mg_write(connection, body.data(), body.size());
  return status;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(
    const std::string& host, int port, HttpHandlers handlers,
    LogThrottle& log) {
  std::unique_ptr<HttpEndpoint> endpoint(
      new HttpEndpoint(std::move(handlers), log));
  const std::string address = JoinHostPort(host, port);
  const std::string threads = std::to_string(kHttpThreads);
  const std::string request_bytes = std::to_string(kHttpMaxRequestBytes);
  const std::string timeout_ms = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(kHttpRequestTimeout)
          .count());
  // No document_root: civetweb serves no files, and every request reaches
  // OnRequest first, which answers it.
  const std::array<const char*, 13> options = {"listening_ports",
                                               address.c_str(),
                                               "num_threads",
                                               threads.c_str(),
                                               "max_request_size",
                                               request_bytes.c_str(),
                                               "request_timeout_ms",
                                               timeout_ms.c_str(),
                                               "enable_keep_alive",
                                               "no",
                                               "decode_url",
                                               "no",
                                               nullptr};
  mg_callbacks callbacks{};
  callbacks.begin_request = &HttpEndpoint::OnRequest;
  callbacks.log_message = &HttpEndpoint::OnLog;
  mg_init_data init{};
  init.callbacks = &callbacks;
  init.user_data = endpoint.get();
  init.configuration_options = const_cast<const char**>(options.data());
  std::array<char, 256> reason{};
  unsigned code = 0;
  mg_error_data error{};
  error.code = &code;
  error.text = reason.data();
  error.text_buffer_size = reason.size();
  endpoint->context_ = mg_start2(&init, &error);
  if (endpoint->context_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot serve HTTP on ", address, ": ",
        reason[0] != '\0' ? reason.data() : "civetweb did not start"));
  }
  mg_server_port ports[1] = {};
  if (mg_get_server_ports(endpoint->context_, 1, ports) < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot serve HTTP on ", address, ": no port bound"));
  }
  endpoint->port_ = ports[0].port;
  return endpoint;
}

HttpEndpoint::~HttpEndpoint() {
  if (context_ != nullptr) mg_stop(context_);
}

int HttpEndpoint::OnRequest(mg_connection* connection) {
  const auto* self = static_cast<const HttpEndpoint*>(
      mg_get_user_data(mg_get_context(connection)));
  return self->Answer(connection);
}

int HttpEndpoint::Answer(mg_connection* connection) const {
  const mg_request_info* request = mg_get_request_info(connection);
  const std::string_view path =
      request->local_uri_raw != nullptr ? request->local_uri_raw : "";
  const std::string_view method =
      request->request_method != nullptr ? request->request_method : "";
  constexpr std::string_view kText = "text/plain; charset=utf-8";
  const bool known =
      path == "/metrics" || path == "/healthz" || path == "/readyz";
  if (!known) return Send(connection, 404, kText, "not found\n", false);
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    return Send(connection, 405, kText, "method not allowed\n", false,
                "GET, HEAD");
  }
  if (path == "/metrics") {
    return Send(connection, 200, kMetricsType, handlers_.metrics(), head);
  }
  const bool fine =
      path == "/healthz" ? handlers_.healthy() : handlers_.ready();
  return Send(connection, fine ? 200 : 503, kText,
              fine ? "ok\n" : "unavailable\n", head);
}

int HttpEndpoint::OnLog(const mg_connection* connection, const char* message) {
  if (connection == nullptr) return 0;
  const auto* self = static_cast<const HttpEndpoint*>(
      mg_get_user_data(mg_get_context(connection)));
  if (self == nullptr) return 0;
  // What civetweb says may quote a client's bytes: escaped and cut.
  self->log_.Log("http", spdlog::level::warn,
                 absl::StrCat("http: ", EscapedForLog(message)));
  return 1;
}

}  // namespace cfdb::worker
