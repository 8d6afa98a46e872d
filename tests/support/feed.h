// Feed: a pipe whose write end a thread of its own fills, for tests of
// streamed stdin (DispatchStream).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <random>
#include <string>
#include <thread>

namespace cfdb::worker::test_support {

// RandomBytes returns `size` bytes of a fixed pseudo-random sequence.
inline std::string RandomBytes(std::size_t size, unsigned seed = 1) {
  std::mt19937 generator(seed);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(generator());
  return bytes;
}

// Feed writes `data` (or, with `repeat`, `data` over and over until the
// reader closes its end) into a pipe; read_fd() is the other end. The
// writer stops at EPIPE; written() counts what the pipe took so far.
class Feed {
 public:
  explicit Feed(std::string data, bool repeat = false)
      : data_(std::move(data)), repeat_(repeat) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      read_fd_ = fds[0];
      write_fd_ = fds[1];
    }
    signal(SIGPIPE, SIG_IGN);  // a closed reader ends the feed with EPIPE
    thread_ = std::thread([this] { Run(); });
  }
  ~Feed() {
    CloseRead();
    thread_.join();
  }
  Feed(const Feed&) = delete;
  Feed& operator=(const Feed&) = delete;

  int read_fd() const { return read_fd_; }
  std::size_t written() const { return written_.load(); }
  // CloseRead closes the read end, so the writer ends (EPIPE).
  void CloseRead() {
    if (read_fd_ >= 0) close(read_fd_);
    read_fd_ = -1;
  }
  // Join waits for the writer to end: all written and closed, or EPIPE.
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    do {
      for (std::size_t at = 0; at < data_.size();) {
        const ssize_t n =
            write(write_fd_, data_.data() + at,
                  std::min<std::size_t>(data_.size() - at, 65536));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          close(write_fd_);
          return;
        }
        at += static_cast<std::size_t>(n);
        written_ += static_cast<std::size_t>(n);
      }
    } while (repeat_);
    close(write_fd_);
  }

  const std::string data_;
  const bool repeat_;
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::atomic<std::size_t> written_{0};
  std::thread thread_;
};

}  // namespace cfdb::worker::test_support
