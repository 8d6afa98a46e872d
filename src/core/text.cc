#include "core/text.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cfdb::worker {

std::string CutUtf8(std::string_view text, std::size_t max) {
  if (text.size() <= max) return std::string(text);
  std::size_t end = max;
  // Back off continuation bytes (10xxxxxx) to the start of their sequence.
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
    --end;
  }
  return std::string(text.substr(0, end));
}

std::string EscapedForLog(std::string_view text, std::size_t max) {
  std::string out;
  out.reserve(std::min(text.size(), max) + 16);
  for (const char c : text) {
    if (out.size() >= max) {
      absl::StrAppend(&out, "...(", text.size(), " bytes)");
      return out;
    }
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c >= 0x20 && c <= 0x7e) {
          out += c;
        } else {
          absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(c));
        }
    }
  }
  return out;
}

std::string WithoutControlCharacters(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", byte);
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> ReadFileText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace cfdb::worker
