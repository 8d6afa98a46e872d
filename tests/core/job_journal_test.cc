#include "cfdb/worker/job_journal.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using EmitResult = JobContext::EmitResult;
using Read = JobJournal::Read;

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
  journal_.Attach(reader_, {});
  ASSERT_EQ(Append(OutputStream::kStdout, "ab"), EmitResult::kSent);
  ASSERT_EQ(Append(OutputStream::kStderr, "x"), EmitResult::kSent);
  EXPECT_EQ(ReadAll(reader_.get()), "o@0:ab e@0:x ");
  ASSERT_EQ(Append(OutputStream::kStdout, "cd"), EmitResult::kSent);
  journal_.End(JobOutcome::Exited(0));
  EXPECT_EQ(ReadAll(reader_.get()), "o@2:cd end");
  EXPECT_GE(reader_->wakes, 4);
}

TEST_F(JobJournalTest, AnAttachedReadersUnreadOutputIsHeldToTheOutbox) {
  journal_.Attach(reader_, {});
  ASSERT_EQ(Append(OutputStream::kStdout, "1234567"), EmitResult::kSent);
  // One byte under the outbox: room for one more append.
  ASSERT_EQ(Append(OutputStream::kStdout, "8"), EmitResult::kSent);
  EXPECT_EQ(Append(OutputStream::kStdout, "9"), EmitResult::kTimedOut);
  ReadAll(reader_.get());
  EXPECT_EQ(Append(OutputStream::kStdout, "9"), EmitResult::kSent);
}

TEST_F(JobJournalTest, WithNobodyAttachedTheWholeBufferFillsThenTheJobWaits) {
  journal_.Attach(reader_, {});
  EXPECT_TRUE(journal_.Leave(reader_.get()));
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
  const JobJournal::Attachment attachment = journal_.Attach(back, {});
  EXPECT_EQ(attachment.lost.stdout_bytes, 0u);
  EXPECT_EQ(ReadAll(back.get()),
            "o@0:aaaaaaaa o@8:aaaaaaaa o@16:aaaaaaaa o@24:aaaaaaaa ");
  EXPECT_EQ(Append(OutputStream::kStdout, "b"), EmitResult::kSent);
}

TEST_F(JobJournalTest, ASecondAttachTakesOverFromTheFirst) {
  journal_.Attach(reader_, {});
  ASSERT_EQ(Append(OutputStream::kStdout, "ab"), EmitResult::kSent);
  const int wakes = reader_->wakes;
  const auto second = std::make_shared<CountingReader>();
  journal_.Attach(second, {});
  EXPECT_GT(reader_->wakes, wakes);
  EXPECT_EQ(ReadAll(reader_.get()), "taken over");
  EXPECT_FALSE(journal_.Leave(reader_.get()));  // not the one attached
  EXPECT_EQ(ReadAll(second.get()), "o@0:ab ");
}

TEST_F(JobJournalTest, AttachFromAnOffsetInsideAChunkGetsItsTail) {
  journal_.Attach(reader_, {});
  ASSERT_EQ(Append(OutputStream::kStdout, "abcd"), EmitResult::kSent);
  ASSERT_EQ(Append(OutputStream::kStderr, "xyz"), EmitResult::kSent);
  ASSERT_EQ(ReadAll(reader_.get()), "o@0:abcd e@0:xyz ");
  const auto again = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment =
      journal_.Attach(again, {.stdout_bytes = 3, .stderr_bytes = 1});
  EXPECT_EQ(attachment.from.stdout_bytes, 3u);
  EXPECT_EQ(attachment.from.stderr_bytes, 1u);
  EXPECT_EQ(attachment.lost.stdout_bytes, 0u);
  EXPECT_EQ(ReadAll(again.get()), "o@3:d e@1:yz ");
}

TEST_F(JobJournalTest, OutputReadAndPastTheBufferIsLostToALaterAttach) {
  journal_.Attach(reader_, {});
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Append(OutputStream::kStdout, std::string(8, 'a' + i)),
              EmitResult::kSent);
    ReadAll(reader_.get());  // read at once: kept only to be read again
  }
  EXPECT_LE(journal_.stats().retained_bytes, kBuffer);
  const auto again = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment = journal_.Attach(again, {});
  EXPECT_EQ(attachment.from.stdout_bytes, 48 - kBuffer);
  EXPECT_EQ(attachment.lost.stdout_bytes, 48 - kBuffer);
  EXPECT_EQ(ReadAll(again.get()).substr(0, 5), "o@16:");
}

TEST_F(JobJournalTest, ACancelDiscardsWhatIsUnreadSoTheOutcomeComesNext) {
  journal_.Attach(reader_, {});
  ASSERT_EQ(Append(OutputStream::kStdout, "abc"), EmitResult::kSent);
  journal_.Cancelled();
  EXPECT_EQ(Append(OutputStream::kStdout, "d"), EmitResult::kDropped);
  journal_.End(JobOutcome::Failed(JobOutcome::Failure::kCancelled, ""));
  EXPECT_EQ(ReadAll(reader_.get()), "end");
  EXPECT_EQ(journal_.stats().dropped.stdout_bytes, 3u);
}

TEST_F(JobJournalTest, AWaitingAppendEndsWhenTheJobIsCancelled) {
  journal_.Attach(reader_, {});
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
  journal_.Attach(reader_, {});
  EXPECT_TRUE(journal_.attached());
  EXPECT_TRUE(journal_.Leave(reader_.get()));
  EXPECT_FALSE(journal_.attached());
  EXPECT_FALSE(journal_.Leave(reader_.get()));
  journal_.Attach(reader_, {});
  journal_.End(JobOutcome::Exited(0));
  EXPECT_FALSE(journal_.Leave(reader_.get()));  // ended: nothing runs on
}

TEST_F(JobJournalTest, AnOutcomeIsClaimedOnlyByTheReaderThatDeliveredIt) {
  journal_.Attach(reader_, {});
  journal_.End(JobOutcome::Exited(0));
  const auto stranger = std::make_shared<CountingReader>();
  journal_.Claimed(stranger.get());
  EXPECT_FALSE(journal_.stats().claimed);
  journal_.Claimed(reader_.get());
  EXPECT_TRUE(journal_.stats().claimed);
}

TEST_F(JobJournalTest, ReleaseLetsGoOfEveryChunk) {
  journal_.Attach(reader_, {});
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
  big.Attach(reader_, {});
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
  journal_.Attach(reader_, {});
  EXPECT_TRUE(journal_.Leave(reader_.get()));
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(Append(i % 2 == 0 ? OutputStream::kStdout : OutputStream::kStderr,
                     std::string(8, 'a' + i)),
              EmitResult::kSent);
  }
  const JobJournal::Stats stats = journal_.stats();
  EXPECT_EQ(stats.retained_bytes, kBuffer);
  EXPECT_EQ(stats.dropped.stdout_bytes, 8u);  // "aaaaaaaa"
  EXPECT_EQ(stats.dropped.stderr_bytes, 8u);  // "bbbbbbbb"
  const auto back = std::make_shared<CountingReader>();
  const JobJournal::Attachment attachment = journal_.Attach(back, {});
  EXPECT_EQ(attachment.lost.stdout_bytes, 8u);
  EXPECT_EQ(attachment.lost.stderr_bytes, 8u);
  EXPECT_EQ(ReadAll(back.get()),
            "o@8:cccccccc e@8:dddddddd o@16:eeeeeeee e@16:ffffffff ");
}

}  // namespace
}  // namespace cfdb::worker
