#include "serve/http_call.h"

#define CURL_DISABLE_TYPECHECK  // calls go through LibCurl's pointers
#include <curl/curl.h>
#include <dlfcn.h>

#include <algorithm>
#include <memory>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace cfdb::worker {
namespace {

// Appends what the server answers, up to 64 KiB.
size_t CollectAnswer(char* data, size_t size, size_t count, void* out) {
  auto* body = static_cast<std::string*>(out);
  const size_t n = size * count;
  body->append(data, std::min(n, (size_t{64} << 10) -
                                     std::min(body->size(), size_t{64} << 10)));
  return n;
}

// Ends the transfer once the worker is exiting.
int AbandonOnCancel(void* cancel, curl_off_t, curl_off_t, curl_off_t,
                    curl_off_t) {
  return static_cast<const std::atomic<bool>*>(cancel)->load() ? 1 : 0;
}

// LibCurl is libcurl loaded on first use (see http_call.h).
struct LibCurl {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;

  // Get loads libcurl once (and runs curl_global_init); the error names
  // what was missing. Thread-safe.
  static const absl::StatusOr<LibCurl>& Get() {
    static const absl::StatusOr<LibCurl>* const loaded =
        new absl::StatusOr<LibCurl>(Load());  // never unloaded
    return *loaded;
  }

 private:
  static absl::StatusOr<LibCurl> Load() {
    void* const so = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (so == nullptr) {
      return absl::FailedPreconditionError(
          // Load runs once, inside Get's static initialisation.
          absl::StrCat("cannot load libcurl: ",
                       dlerror()));  // NOLINT(concurrency-mt-unsafe)
    }
    LibCurl lib{};
    bool missing = false;
    auto find = [&](auto& function, const char* name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
          dlsym(so, name));
      missing = missing || function == nullptr;
    };
    find(lib.global_init, "curl_global_init");
    find(lib.easy_init, "curl_easy_init");
    find(lib.easy_cleanup, "curl_easy_cleanup");
    find(lib.easy_setopt, "curl_easy_setopt");
    find(lib.easy_perform, "curl_easy_perform");
    find(lib.easy_getinfo, "curl_easy_getinfo");
    find(lib.easy_strerror, "curl_easy_strerror");
    find(lib.slist_append, "curl_slist_append");
    find(lib.slist_free_all, "curl_slist_free_all");
    if (missing) {
      return absl::FailedPreconditionError(
          "libcurl.so.4 lacks a function the worker calls");
    }
    lib.global_init(CURL_GLOBAL_DEFAULT);
    return lib;
  }
};

}  // namespace

absl::StatusOr<HttpAnswer> Perform(const HttpRequest& request) {
  const absl::StatusOr<LibCurl>& lib = LibCurl::Get();
  if (!lib.ok()) return lib.status();
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(lib->easy_init(),
                                                           lib->easy_cleanup);
  if (curl == nullptr) return absl::UnavailableError("curl_easy_init failed");
  curl_slist* list = nullptr;
  for (const std::string& header : request.headers) {
    curl_slist* const more = lib->slist_append(list, header.c_str());
    if (more == nullptr) {
      lib->slist_free_all(list);
      return absl::UnavailableError("out of memory");
    }
    list = more;
  }
  const std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
      list, lib->slist_free_all);
  static const std::atomic<bool> kNever{false};
  HttpAnswer answer;
  CURL* c = curl.get();
  lib->easy_setopt(c, CURLOPT_URL, request.url.c_str());
  lib->easy_setopt(c, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  lib->easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  lib->easy_setopt(c, CURLOPT_POSTFIELDS, request.body.c_str());
  lib->easy_setopt(c, CURLOPT_POSTFIELDSIZE,
                   static_cast<long>(request.body.size()));
  lib->easy_setopt(
      c, CURLOPT_TIMEOUT_MS,
      static_cast<long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(request.timeout)
              .count()));
  lib->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM
  lib->easy_setopt(c, CURLOPT_NOPROXY, "*");
  if (request.ca_file.empty()) {
    lib->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
  } else {
    lib->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "https");
    lib->easy_setopt(c, CURLOPT_CAINFO, request.ca_file.c_str());
    lib->easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    lib->easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
  }
  lib->easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  lib->easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &AbandonOnCancel);
  lib->easy_setopt(c, CURLOPT_XFERINFODATA,
                   request.cancel != nullptr ? request.cancel : &kNever);
  lib->easy_setopt(c, CURLOPT_WRITEFUNCTION, &CollectAnswer);
  lib->easy_setopt(c, CURLOPT_WRITEDATA, &answer.body);
  const CURLcode rc = lib->easy_perform(c);
  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    return absl::UnavailableError("abandoned: the worker is exiting");
  }
  if (rc != CURLE_OK) {
    return absl::UnavailableError(
        absl::StrCat(request.url, ": ", lib->easy_strerror(rc)));
  }
  lib->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &answer.status);
  return answer;
}

}  // namespace cfdb::worker
