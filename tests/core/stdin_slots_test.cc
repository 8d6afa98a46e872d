// StdinSlots: the order of chunks, the two-slot bound, one read at a time,
// the descriptor's readiness, the end, a cut-short input, and a reader and a
// taker on two threads.
#include "core/stdin_slots.h"

#include <poll.h>

#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using Arrived = StdinSlots::Arrived;
using Next = StdinSlots::Next;
using Result = StdinSlots::Result;

// Readable says whether `fd` is readable now.
bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

// Arrive runs one read that brings `text`.
Next Arrive(StdinSlots& slots, std::string text) {
  EXPECT_TRUE(slots.BeginRead()) << text;
  return slots.Put(Arrived::kChunk, text, false);
}

TEST(StdinSlotsTest, WithoutStreamedStdinNothingIsReadAndTheInputHasEnded) {
  StdinSlots slots(false);
  EXPECT_EQ(slots.fd(), -1);
  EXPECT_FALSE(slots.BeginRead());
  std::string chunk;
  EXPECT_EQ(slots.Take(chunk), Result::kEnd);
  EXPECT_FALSE(slots.Close()) << "nothing to tell the client";
}

TEST(StdinSlotsTest, ChunksComeInOrderAndTwoWaitAtMost) {
  StdinSlots slots(true);
  ASSERT_GE(slots.fd(), 0);
  EXPECT_FALSE(Readable(slots.fd()));
  std::string chunk;
  EXPECT_EQ(slots.Take(chunk), Result::kNotYet);
  ASSERT_TRUE(slots.BeginRead());
  EXPECT_FALSE(slots.BeginRead()) << "one read in flight at a time";
  std::string first = "a";
  EXPECT_EQ(slots.Put(Arrived::kChunk, first, false), Next::kRead);
  EXPECT_TRUE(Readable(slots.fd()));
  EXPECT_EQ(Arrive(slots, "b"), Next::kRead);
  EXPECT_FALSE(slots.BeginRead()) << "both slots are full";
  ASSERT_EQ(slots.Take(chunk), Result::kChunk);
  EXPECT_EQ(chunk, "a");
  EXPECT_TRUE(Readable(slots.fd())) << "b still waits";
  EXPECT_EQ(Arrive(slots, "c"), Next::kRead);
  ASSERT_EQ(slots.Take(chunk), Result::kChunk);
  EXPECT_EQ(chunk, "b");
  ASSERT_EQ(slots.Take(chunk), Result::kChunk);
  EXPECT_EQ(chunk, "c");
  EXPECT_FALSE(Readable(slots.fd())) << "nothing waits";
  EXPECT_EQ(slots.Take(chunk), Result::kNotYet);
}

TEST(StdinSlotsTest, TheEndComesAfterTheLastChunkAndStopsTheReads) {
  StdinSlots slots(true);
  EXPECT_EQ(Arrive(slots, "last"), Next::kRead);
  ASSERT_TRUE(slots.BeginRead());
  std::string none;
  EXPECT_EQ(slots.Put(Arrived::kEnd, none, false), Next::kStop);
  EXPECT_FALSE(slots.BeginRead());
  std::string chunk;
  ASSERT_EQ(slots.Take(chunk), Result::kChunk);
  EXPECT_EQ(chunk, "last");
  EXPECT_TRUE(Readable(slots.fd())) << "the end is there to take";
  EXPECT_EQ(slots.Take(chunk), Result::kEnd);
  EXPECT_FALSE(slots.Close()) << "no more could have come";
}

TEST(StdinSlotsTest, AnInputThatStopsWithoutItsEndIsCutShort) {
  StdinSlots slots(true);
  ASSERT_TRUE(slots.BeginRead());
  std::string none;
  EXPECT_EQ(slots.Put(Arrived::kClosed, none, false), Next::kCutShort);
  slots.MarkCutShort();
  EXPECT_FALSE(slots.BeginRead());

  StdinSlots invalid(true);
  ASSERT_TRUE(invalid.BeginRead());
  EXPECT_EQ(invalid.Put(Arrived::kInvalid, none, false), Next::kCutShort);
}

TEST(StdinSlotsTest, AJobThatTakesNoMoreDiscardsWhatComesUntilTheEnd) {
  StdinSlots slots(true);
  EXPECT_EQ(Arrive(slots, "taken by no one"), Next::kRead);
  EXPECT_TRUE(slots.Close()) << "the client is told, once";
  EXPECT_FALSE(slots.Close());
  std::string chunk;
  EXPECT_EQ(slots.Take(chunk), Result::kNotYet) << "waiting chunks went";
  EXPECT_EQ(Arrive(slots, "discarded"), Next::kRead);
  EXPECT_EQ(Arrive(slots, "discarded too"), Next::kRead)
      << "discarded chunks take no slot";
  ASSERT_TRUE(slots.BeginRead());
  std::string none;
  EXPECT_EQ(slots.Put(Arrived::kClosed, none, false), Next::kStop)
      << "a closed input is not cut short";
  StdinSlots ended(true);
  ASSERT_TRUE(ended.BeginRead());
  EXPECT_EQ(ended.Put(Arrived::kClosed, none, true), Next::kStop)
      << "nor is a finished job's";
}

TEST(StdinSlotsTest, ReleaseClosesTheDescriptor) {
  StdinSlots slots(true);
  ASSERT_GE(slots.fd(), 0);
  slots.Release();
  EXPECT_EQ(slots.fd(), -1);
  EXPECT_EQ(Arrive(slots, "after"), Next::kRead) << "no descriptor to mark";
}

// A reader and a taker on two threads, as the call and the job: every
// chunk arrives once, in order, and the taker waits in poll(2) only while
// nothing is there.
TEST(StdinSlotsTest, AReaderAndATakerOnTwoThreadsLoseNothing) {
  constexpr int kChunks = 20000;
  StdinSlots slots(true);
  std::thread reader([&] {
    for (int i = 0; i < kChunks;) {
      if (!slots.BeginRead()) {
        std::this_thread::yield();
        continue;
      }
      std::string chunk = std::to_string(i++);
      ASSERT_EQ(slots.Put(Arrived::kChunk, chunk, false), Next::kRead);
    }
    while (!slots.BeginRead()) std::this_thread::yield();
    std::string none;
    EXPECT_EQ(slots.Put(Arrived::kEnd, none, false), Next::kStop);
  });
  int next = 0;
  std::string chunk;
  for (;;) {
    const Result result = slots.Take(chunk);
    if (result == Result::kEnd) break;
    if (result == Result::kNotYet) {
      pollfd p{slots.fd(), POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, 30000), 1) << "stuck after chunk " << next;
      continue;
    }
    ASSERT_EQ(chunk, std::to_string(next++));
  }
  reader.join();
  EXPECT_EQ(next, kChunks);
}

}  // namespace
}  // namespace cfdb::worker
