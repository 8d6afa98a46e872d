// Transport credentials shared by the worker's server and its clients.
#pragma once

#include <string>

namespace cfdb::worker {

// Credentials describe how a server listens or a client dials. A plain value:
// it names what to use, and is compared to pool channels. Today only
// insecure (plaintext) transport exists.
struct Credentials {
  enum class Kind { kInsecure };

  static Credentials Insecure() { return Credentials{}; }

  Kind kind = Kind::kInsecure;

  // Key returns a string that is equal for equal credentials (channel pool).
  std::string Key() const;

  friend bool operator==(const Credentials&, const Credentials&) = default;
};

}  // namespace cfdb::worker
