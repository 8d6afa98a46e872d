// Sizes the worker, its clients, tests and benchmarks agree on, each named
// once here: the wire's message limit, the chunks stdin and output travel
// in, and a job's outbox; and the clients' retry and reattach schedule.
// Constants only; no dependencies but the standard library.
//
// Example:
//   grpc::ChannelArguments args;
//   args.SetMaxReceiveMessageSize(cfdb::worker::kMaxMessageBytes);
//
// The Python client repeats what a client needs (MAX_MESSAGE_BYTES,
// STDIN_CHUNK_BYTES, RETRY_*, REATTACH_* in
// clients/python/cfdb_worker/_common.py); its test_packaging.py reads this
// file and compares.
#pragma once

#include <chrono>
#include <cstddef>

namespace cfdb::worker {

// kMaxMessageBytes bounds one gRPC message either way, 64 MiB: a request
// carries argv, environment and stdin; an event carries output.
inline constexpr int kMaxMessageBytes = 64 << 20;

// kStdinChunkBytes bounds the stdin a client sends in one message, 256 KiB:
// what its stdin has at once, up to this.
inline constexpr std::size_t kStdinChunkBytes = std::size_t{256} << 10;

// kMaxStdinChunkBytes is the largest stdin chunk the worker takes in one
// message, 4 MiB (16 client chunks), so that a job's input costs it a known
// amount: two chunks waiting and one being parsed.
inline constexpr std::size_t kMaxStdinChunkBytes = std::size_t{4} << 20;

// kOutputChunkBytes bounds one output event, 1 MiB: a job's pipe is read
// until empty up to this, so that a fast writer's output travels in few
// large messages rather than one per pipe-sized read.
inline constexpr std::size_t kOutputChunkBytes = std::size_t{1} << 20;

// kJobPipeBytes is the capacity asked of the kernel for each pipe of an
// exec job, its stdout and stderr and its stdin, 1 MiB (best effort: the
// default is 64 KiB, the ceiling /proc/sys/fs/pipe-max-size, 1 MiB by
// default): fewer, larger reads and writes.
inline constexpr int kJobPipeBytes = 1 << 20;

// kOutboxBytes is how much of a job's output waits for an attached reader
// before the job's pipes are left unread (flow control), 256 KiB.
inline constexpr std::size_t kOutboxBytes = std::size_t{256} << 10;

// kClientReceiveWindowBytes is each call's HTTP/2 receive window in our
// clients, 4 MiB (four output chunks), fixed: gRPC's bandwidth-delay
// probing, on by default, grew it while a client's reader lagged, and a
// `dispatch` whose stdout was drained slower than a job wrote held up to
// +128 MiB more than an idle one (8 GiB streamed; docs/PERFORMANCE.md).
// 4 MiB a round trip is 4 GB/s at 1 ms, a network within one region.
inline constexpr int kClientReceiveWindowBytes = 4 << 20;

// A client's retries of a transient failure, and its attaches after a lost
// stream, wait kRetryInitialDelay, doubling up to kRetryMaxDelay: short, as
// someone is waiting.
inline constexpr std::chrono::milliseconds kRetryInitialDelay{500};
inline constexpr std::chrono::seconds kRetryMaxDelay{10};

// After a lost stream, a client attaches again for the job's detach grace
// (the worker cancels the job after it and keeps its result), but at least
// kReattachMinWindow, and for kReattachUnlimitedWindow when the job's grace
// has no limit.
inline constexpr std::chrono::seconds kReattachMinWindow{10};
inline constexpr std::chrono::seconds kReattachUnlimitedWindow{60};

// Our clients ping a connection after kClientKeepaliveTime without
// traffic, with or without calls, and give it up once a ping is
// unanswered for kClientKeepaliveTimeout: a call to a worker whose host
// vanished, or whose replies stopped on the way, ends (UNAVAILABLE,
// "keepalive watchdog timeout") instead of waiting for ever, and a job
// silent for hours keeps its connection through NATs that drop idle flows.
// A worker accepts a ping every kMinClientPingInterval (server.h).
inline constexpr std::chrono::seconds kClientKeepaliveTime{30};
inline constexpr std::chrono::seconds kClientKeepaliveTimeout{10};

}  // namespace cfdb::worker
