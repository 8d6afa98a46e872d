// Text a client sent, made safe to put in a log line or a status message.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cfdb::worker {

// kMaxEchoBytes bounds what of a client's string reaches a log line or a
// status message: a 20 MB job id must not become a 20 MB log line, nor a
// status message over gRPC's metadata limit.
inline constexpr std::size_t kMaxEchoBytes = 200;

// EscapedForLog returns `text` with every byte outside printable ASCII
// written as an escape (\n, \t, \r, \\, \xHH: no newline can forge a line,
// no terminal escape passes, the result is always valid UTF-8), cut to
// `max` bytes with "...(N bytes)" saying how long the original was.
std::string EscapedForLog(std::string_view text,
                          std::size_t max = kMaxEchoBytes);

// CutUtf8 returns at most the first `max` bytes of `text`, cut before a
// UTF-8 sequence rather than inside one (a protobuf string must stay valid
// UTF-8 for a client to parse it).
std::string CutUtf8(std::string_view text, std::size_t max);

// WithoutControlCharacters returns `text` with each control character
// (below 0x20, and 0x7f) written as \xHH, everything else as it is: the
// text log's last line of defence, so that no message, whatever its
// origin, can span two lines or carry a terminal escape.
std::string WithoutControlCharacters(std::string_view text);

// ReadFileText returns the whole text of the file at `path`, or nullopt
// when it cannot be opened. Thread-safe.
std::optional<std::string> ReadFileText(const std::string& path);

}  // namespace cfdb::worker
