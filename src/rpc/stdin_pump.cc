#include "rpc/stdin_pump.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/limits.h"
#include "core/errno_text.h"

namespace cfdb::worker {

StdinPump::StdinPump(int fd, Stream& stream, grpc::ClientContext& context)
    : fd_(fd),
      stream_(stream),
      context_(context),
      wake_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

StdinPump::~StdinPump() {
  Stop();
  Join();
  if (wake_ >= 0) close(wake_);
}

void StdinPump::Start() {
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

void StdinPump::Stop() {
  const uint64_t one = 1;
  if (wake_ >= 0) (void)!write(wake_, &one, sizeof one);
}

void StdinPump::Join() {
  if (thread_.joinable()) thread_.join();
}

void StdinPump::Run() {
  v1::DispatchInput message;
  std::unique_ptr<char[]> buffer(new char[kStdinChunkBytes]);
  for (;;) {
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return Fail(absl::StrCat("poll: ", ErrnoText(errno)));
    }
    if (fds[1].revents != 0) return;
    bool end = false;
    const size_t got = Fill(buffer.get(), end);
    if (!error_.ok()) return;
    if (got > 0) {
      message.set_stdin(buffer.get(), got);
      if (!stream_.Write(message)) return;  // the call is over
    }
    if (end) {
      message.mutable_end_of_input();
      if (stream_.Write(message)) stream_.WritesDone();
      return;
    }
  }
}

size_t StdinPump::Fill(char* buffer, bool& end) {
  size_t got = 0;
  while (got < kStdinChunkBytes) {
    const ssize_t n = read(fd_, buffer + got, kStdinChunkBytes - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
      pollfd more{fd_, POLLIN, 0};
      if (poll(&more, 1, 0) != 1) break;
    } else if (n == 0) {
      end = true;
      break;
    } else if (errno != EINTR) {
      if (errno != EAGAIN) {
        Fail(absl::StrCat("reading stdin: ", ErrnoText(errno)));
      }
      break;
    }
  }
  return got;
}

void StdinPump::Fail(const std::string& message) {
  error_ = absl::InternalError(message);
  context_.TryCancel();
}

}  // namespace cfdb::worker
