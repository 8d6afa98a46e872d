// Whether a server speaks TLS: for a client whose plaintext call failed at
// the transport ("Socket closed"), to say why.
#pragma once

#include <string>

#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// SpeaksTls returns whether the server at `address` ("host:port" or
// "[v6]:port") answers a TLS ClientHello with a ServerHello within
// `timeout` (connecting included). It verifies nothing and sends no
// certificate: the handshake ends there. False on any failure to tell,
// including an address of another form (unix:, a scheme). Blocks for up to
// `timeout`; thread-safe.
bool SpeaksTls(const std::string& address, Duration timeout);

}  // namespace cfdb::worker
