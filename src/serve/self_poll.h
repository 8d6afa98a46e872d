// The serve loop's self-poll: the worker's own Idle RPC, dialled over
// loopback with the same credentials a remote client uses, so that a poll
// that works is an end-to-end check of what clients reach.
#pragma once

#include <functional>
#include <string>

#include "cfdb/worker/credentials.h"
#include "serve/retirement.h"

namespace cfdb::worker {

// SelfPollFactory returns the retirement policy's connection factory: a
// WorkerConnection to LoopbackTarget(host, port) with `credentials`. Under
// mutual TLS without an identity, a handshake error says its likely cause
// (no loopback SAN on the worker's certificate).
RetirementPolicy::ConnectionFactory SelfPollFactory(
    std::string host, int port, const Credentials& credentials);

// FreshDial returns the retirement policy's listener check: each call dials
// a connection of its own to LoopbackTarget(host, port) with `credentials`,
// calls Idle within the deadline, and closes it again.
std::function<absl::Status(Duration deadline)> FreshDial(
    const std::string& host, int port, const Credentials& credentials);

}  // namespace cfdb::worker
