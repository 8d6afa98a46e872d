#include "cfdb/worker/job_journal.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using EmitResult = JobContext::EmitResult;
using Read = JobJournal::Read;
constexpr JobJournal::Role kControl = JobJournal::Role::kControl;
constexpr JobJournal::Role kFollow = JobJournal::Role::kFollow;

// CountingReader counts its wake-ups.
class CountingReader final : public JobReader {
 public:
  void Wake() override { ++wakes; }
  std::atomic<int> wakes{0};
};

constexpr std::size_t kOutbox = 8;
constexpr std::size_t kBuffer = 32;

TimePoint Soon() {
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
}

class JobJournalTest : public ::testing::Test {
 protected:
  explicit JobJournalTest(bool drop_oldest = false)
      : journal_({.outbox_bytes = kOutbox,
                  .buffer_bytes = kBuffer,
                  .drop_oldest = drop_oldest}) {}

  EmitResult Append(OutputStream stream, std::string data) {
    return journal_.Append(stream, std::move(data), Soon());
  }

  // ReadAll reads what `reader` has now: the chunks as "o@OFFSET:DATA" or
  // "e@...", then "end" for the outcome or "taken over".
  std::string ReadAll(const JobReader* reader) {
    std::string seen;
    JobJournal::Chunk chunk;
    JobOutcome outcome;
    for (;;) {
      switch (journal_.Next(reader, chunk, outcome)) {
        case Read::kChunk:
          if (chunk.lost > 0)
            seen += "lost " + std::to_string(chunk.lost) + " ";
          seen += (chunk.stream == OutputStream::kStdout ? "o@" : "e@") +
                  std::to_string(chunk.offset) + ":" +
                  std::string(chunk.data()) + " ";
          continue;
        case Read::kOutcome:
          return seen + "end";
        case Read::kTakenOver:
          return seen + "taken over";
        case Read::kNothing:
          return seen;
      }
    }
  }

  JobJournal journal_;
  const std::shared_ptr<CountingReader> reader_ =
      std::make_shared<CountingReader>();
};

TEST_F(JobJournalTest, AReaderGetsTheOutputInOrderWithOffsetsThenTheOutcome) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "ab"), EmitResult::kSent);
  ASSERT_EQ(Append(OutputStream::kStderr, "x"), EmitResult::kSent);
  EXPECT_EQ(ReadAll(reader_.get()), "o@0:ab e@0:x ");
  ASSERT_EQ(Append(OutputStream::kStdout, "cd"), EmitResult::kSent);
  journal_.End(JobOutcome::Exited(0));
  EXPECT_EQ(ReadAll(reader_.get()), "o@2:cd end");
  EXPECT_GE(reader_->wakes, 4);
}

TEST_F(JobJournalTest, AnAttachedReadersUnreadOutputIsHeldToTheOutbox) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "1234567"), EmitResult::kSent);
  // One byte under the outbox: room for one more append.
  ASSERT_EQ(Append(OutputStream::kStdout, "8"), EmitResult::kSent);
  EXPECT_EQ(Append(OutputStream::kStdout, "9"), EmitResult::kTimedOut);
  ReadAll(reader_.get());
  EXPECT_EQ(Append(OutputStream::kStdout, "9"), EmitResult::kSent);
}

TEST_F(JobJournalTest, WithNobodyAttachedTheWholeBufferFillsThenTheJobWaits) {
  journal_.Attach(reader_, {}, kControl);
  EXPECT_TRUE(journal_.Leave(reader_.get()).unattended);
  for (std::size_t i = 0; i < kBuffer / 8; ++i) {
    ASSERT_EQ(Append(OutputStream::kStdout, std::string(8, 'a')),
              EmitResult::kSent);
  }
  EXPECT_EQ(Append(OutputStream::kStdout, "b"), EmitResult::kTimedOut);
  const JobJournal::Stats stats = journal_.stats();
  EXPECT_EQ(stats.retained_bytes, kBuffer);
  EXPECT_EQ(stats.dropped.stdout_bytes, 0u);
  // A reader that comes back gets every byte, and the job goes on.
  const auto back = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment = journal_.Attach(back, {}, kControl);
  EXPECT_EQ(attachment.lost.stdout_bytes, 0u);
  EXPECT_EQ(ReadAll(back.get()),
            "o@0:aaaaaaaa o@8:aaaaaaaa o@16:aaaaaaaa o@24:aaaaaaaa ");
  EXPECT_EQ(Append(OutputStream::kStdout, "b"), EmitResult::kSent);
}

TEST_F(JobJournalTest, ASecondAttachTakesOverFromTheFirst) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "ab"), EmitResult::kSent);
  const int wakes = reader_->wakes;
  const auto second = std::make_shared<CountingReader>();
  journal_.Attach(second, {}, kControl);
  EXPECT_GT(reader_->wakes, wakes);
  EXPECT_EQ(ReadAll(reader_.get()), "taken over");
  EXPECT_FALSE(journal_.Leave(reader_.get()).controller);  // not any more
  EXPECT_EQ(ReadAll(second.get()), "o@0:ab ");
}

TEST_F(JobJournalTest, AttachFromAnOffsetInsideAChunkGetsItsTail) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "abcd"), EmitResult::kSent);
  ASSERT_EQ(Append(OutputStream::kStderr, "xyz"), EmitResult::kSent);
  ASSERT_EQ(ReadAll(reader_.get()), "o@0:abcd e@0:xyz ");
  const auto again = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment =
      journal_.Attach(again, {.stdout_bytes = 3, .stderr_bytes = 1}, kControl);
  EXPECT_EQ(attachment.from.stdout_bytes, 3u);
  EXPECT_EQ(attachment.from.stderr_bytes, 1u);
  EXPECT_EQ(attachment.lost.stdout_bytes, 0u);
  EXPECT_EQ(ReadAll(again.get()), "o@3:d e@1:yz ");
}

TEST_F(JobJournalTest, OutputReadAndPastTheBufferIsLostToALaterAttach) {
  journal_.Attach(reader_, {}, kControl);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Append(OutputStream::kStdout, std::string(8, 'a' + i)),
              EmitResult::kSent);
    ReadAll(reader_.get());  // read at once: kept only to be read again
  }
  EXPECT_LE(journal_.stats().retained_bytes, kBuffer);
  const auto again = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment =
      journal_.Attach(again, {}, kControl);
  EXPECT_EQ(attachment.from.stdout_bytes, 48 - kBuffer);
  EXPECT_EQ(attachment.lost.stdout_bytes, 48 - kBuffer);
  EXPECT_EQ(ReadAll(again.get()).substr(0, 5), "o@16:");
}

TEST_F(JobJournalTest, ACancelDiscardsWhatIsUnreadSoTheOutcomeComesNext) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "abc"), EmitResult::kSent);
  journal_.Cancelled();
  EXPECT_EQ(Append(OutputStream::kStdout, "d"), EmitResult::kDropped);
  journal_.End(JobOutcome::Failed(JobOutcome::Failure::kCancelled, ""));
  EXPECT_EQ(ReadAll(reader_.get()), "end");
  EXPECT_EQ(journal_.stats().dropped.stdout_bytes, 3u);
}

TEST_F(JobJournalTest, AWaitingAppendEndsWhenTheJobIsCancelled) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, std::string(kOutbox, 'a')),
            EmitResult::kSent);
  std::thread cancel([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    journal_.Cancelled();
  });
  EXPECT_EQ(journal_.Append(OutputStream::kStdout, "b", TimePoint::max()),
            EmitResult::kDropped);
  cancel.join();
}

TEST_F(JobJournalTest, LeaveSaysWhetherTheJobRunsOnUnattached) {
  journal_.Attach(reader_, {}, kControl);
  EXPECT_TRUE(journal_.attached());
  const JobJournal::Left left = journal_.Leave(reader_.get());
  EXPECT_TRUE(left.controller);
  EXPECT_TRUE(left.unattended);
  EXPECT_FALSE(journal_.attached());
  EXPECT_FALSE(journal_.Leave(reader_.get()).controller);
  // A follower still reading: the job is not unattended yet.
  const auto follower = std::make_shared<CountingReader>();
  journal_.Attach(reader_, {}, kControl);
  journal_.Attach(follower, {}, kFollow);
  EXPECT_FALSE(journal_.Leave(reader_.get()).unattended);
  EXPECT_TRUE(journal_.Leave(follower.get()).unattended);
  journal_.Attach(reader_, {}, kControl);
  journal_.End(JobOutcome::Exited(0));
  EXPECT_FALSE(journal_.Leave(reader_.get()).unattended);  // ended
}

TEST_F(JobJournalTest, AnOutcomeCountsAsReadOnceAClientWasGivenIt) {
  journal_.Attach(reader_, {}, kControl);
  journal_.Claimed();  // no outcome yet: nothing to have read
  EXPECT_FALSE(journal_.stats().claimed);
  journal_.End(JobOutcome::Exited(0));
  EXPECT_FALSE(journal_.stats().claimed);
  journal_.Claimed();
  EXPECT_TRUE(journal_.stats().claimed);
}

TEST_F(JobJournalTest, FollowersEachReadTheWholeStreamAndDisturbNoOne) {
  journal_.Attach(reader_, {}, kControl);
  std::vector<std::shared_ptr<CountingReader>> followers;
  for (int i = 0; i < 3; ++i) {
    followers.push_back(std::make_shared<CountingReader>());
    const JobJournal::Attachment a =
        journal_.Attach(followers.back(), {}, kFollow);
    EXPECT_FALSE(a.controls);
  }
  EXPECT_EQ(journal_.stats().readers, 4u);
  ASSERT_EQ(Append(OutputStream::kStdout, "1234567"), EmitResult::kSent);
  ASSERT_EQ(Append(OutputStream::kStderr, "x"), EmitResult::kSent);
  for (const auto& f : followers) {
    EXPECT_EQ(ReadAll(f.get()), "o@0:1234567 e@0:x ");
  }
  // Followers reading made no room: flow control is the controller's.
  EXPECT_EQ(Append(OutputStream::kStdout, "9"), EmitResult::kTimedOut);
  EXPECT_EQ(ReadAll(reader_.get()), "o@0:1234567 e@0:x ");
  EXPECT_EQ(Append(OutputStream::kStdout, "9"), EmitResult::kSent);
  journal_.End(JobOutcome::Exited(0));
  for (const auto& f : followers) EXPECT_EQ(ReadAll(f.get()), "o@7:9 end");
  EXPECT_EQ(ReadAll(reader_.get()), "o@7:9 end");
}

TEST_F(JobJournalTest, AFollowerThatFallsBehindTheBufferIsToldWhatItLost) {
  journal_.Attach(reader_, {}, kControl);
  const auto follower = std::make_shared<CountingReader>();
  journal_.Attach(follower, {}, kFollow);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Append(OutputStream::kStdout, std::string(8, 'a' + i)),
              EmitResult::kSent);
    ReadAll(reader_.get());
  }
  // 48 bytes written, 32 kept: the follower lost the first 16.
  EXPECT_EQ(ReadAll(follower.get()),
            "lost 16 o@16:cccccccc o@24:dddddddd o@32:eeeeeeee o@40:ffffffff ");
}

TEST_F(JobJournalTest, AnAttachPastTheEndWaitsForThoseBytes) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "ab"), EmitResult::kSent);
  const auto late = std::make_shared<CountingReader>();
  const JobJournal::Attachment a =
      journal_.Attach(late, {.stdout_bytes = 5}, kFollow);
  EXPECT_EQ(a.from.stdout_bytes, 5u);  // as asked, not the current end
  EXPECT_EQ(a.lost.stdout_bytes, 0u);
  EXPECT_EQ(ReadAll(late.get()), "");
  ASSERT_EQ(Append(OutputStream::kStdout, "cdefgh"), EmitResult::kSent);
  EXPECT_EQ(ReadAll(late.get()), "o@5:fgh ");
}

TEST_F(JobJournalTest, AnEndedJobIsOnlyFollowedSoReplaysNeverTakeEachOver) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "ab"), EmitResult::kSent);
  journal_.End(JobOutcome::Exited(0));
  const auto first = std::make_shared<CountingReader>();
  const auto second = std::make_shared<CountingReader>();
  EXPECT_FALSE(journal_.Attach(first, {}, kControl).controls);
  EXPECT_FALSE(journal_.Attach(second, {}, kControl).controls);
  EXPECT_EQ(ReadAll(first.get()), "o@0:ab end");
  EXPECT_EQ(ReadAll(second.get()), "o@0:ab end");
  EXPECT_EQ(ReadAll(reader_.get()), "o@0:ab end");
}

TEST_F(JobJournalTest, ReleaseLetsGoOfEveryChunk) {
  journal_.Attach(reader_, {}, kControl);
  ASSERT_EQ(Append(OutputStream::kStdout, "abc"), EmitResult::kSent);
  journal_.End(JobOutcome::Exited(0));
  journal_.Release();
  EXPECT_EQ(journal_.stats().retained_bytes, 0u);
  EXPECT_EQ(journal_.stats().dropped.stdout_bytes, 3u);
  EXPECT_EQ(ReadAll(reader_.get()), "end");
}

TEST_F(JobJournalTest, AnAppendOverTheChunkSizeIsSplitWithoutACopy) {
  const std::size_t size = JobJournal::kMaxChunkBytes + 5;
  JobJournal big({.outbox_bytes = size, .buffer_bytes = size});
  big.Attach(reader_, {}, kControl);
  ASSERT_EQ(big.Append(OutputStream::kStdout, std::string(size, 'z'), Soon()),
            EmitResult::kSent);
  JobJournal::Chunk first, second;
  JobOutcome outcome;
  ASSERT_EQ(big.Next(reader_.get(), first, outcome), Read::kChunk);
  ASSERT_EQ(big.Next(reader_.get(), second, outcome), Read::kChunk);
  EXPECT_EQ(first.size, JobJournal::kMaxChunkBytes);
  EXPECT_EQ(second.offset, JobJournal::kMaxChunkBytes);
  EXPECT_EQ(second.size, 5u);
  EXPECT_EQ(first.buffer, second.buffer);
}

class DropOldestJournalTest : public JobJournalTest {
 protected:
  DropOldestJournalTest() : JobJournalTest(/*drop_oldest=*/true) {}
};

TEST_F(DropOldestJournalTest, AFullBufferDropsTheOldestAndCountsIt) {
  std::atomic<uint64_t> total{5};  // the worker's count, of every job
  journal_.CountDropsInto(&total);
  journal_.Attach(reader_, {}, kControl);
  EXPECT_TRUE(journal_.Leave(reader_.get()).unattended);
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Append(i % 2 == 0 ? OutputStream::kStdout : OutputStream::kStderr,
                     std::string(8, 'a' + i)),
              EmitResult::kSent);
  }
  const JobJournal::Stats stats = journal_.stats();
  EXPECT_EQ(stats.retained_bytes, kBuffer);
  EXPECT_EQ(stats.dropped.stdout_bytes, 8u);  // "aaaaaaaa"
  EXPECT_EQ(stats.dropped.stderr_bytes, 8u);  // "bbbbbbbb"
  EXPECT_EQ(total.load(), 5u + 16u) << "counted there too";
  const auto back = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment = journal_.Attach(back, {}, kControl);
  EXPECT_EQ(attachment.lost.stdout_bytes, 8u);
  EXPECT_EQ(attachment.lost.stderr_bytes, 8u);
  EXPECT_EQ(ReadAll(back.get()),
            "o@8:cccccccc e@8:dddddddd o@16:eeeeeeee e@16:ffffffff ");
}

}  // namespace
}  // namespace cfdb::worker
