// The deadline reader: one reading per process, shared by its requests; a request waits at most
// the deadline, and once, per reading; each user's readings and everyone's are bounded; a
// reading outlives its reader.
#include "fs/targeting/deadline_reader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace whfs::target {
namespace {

using Reader = DeadlineReader<std::string>;
using Outcome = Reader::Outcome;

// Holds the readings until opened.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Counts the answers handed to `done`, and lets a test wait for a number of them.
class Answers {
 public:
  void add(const std::string& s) {
    std::lock_guard lock(mu_);
    last_ = s;
    ++n_;
    cv_.notify_all();
  }
  void wait_for(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return n_ >= n; });
  }
  std::string last() {
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::string last_;
  int n_ = 0;
};

ProcessIdentity id(std::uint64_t start) { return ProcessIdentity{start, "/usr/bin/python3"}; }

Reader::Read blocked(const std::shared_ptr<Gate>& gate, const std::string& text) {
  return [gate, text] {
    gate->wait();
    return std::make_shared<const std::string>(text);
  };
}

Reader::Done to(const std::shared_ptr<Answers>& answers) {
  return [answers](const std::shared_ptr<const std::string>& s) { answers->add(*s); };
}

void wait_idle(const Reader& reader) {
  while (reader.in_flight() != 0) std::this_thread::yield();
}

TEST(DeadlineReader, TheAnswerIsHandedToDoneBeforeTheRequestSeesIt) {
  Reader reader({std::chrono::minutes(2), 4, 256});
  auto answers = std::make_shared<Answers>();
  std::string seen_by_done;
  const auto a = reader.get(
      1, id(1), 7, true, [] { return std::make_shared<const std::string>("x"); },
      [&](const std::shared_ptr<const std::string>& s) { seen_by_done = *s; });
  ASSERT_EQ(a.outcome, Outcome::kDone);
  EXPECT_EQ(*a.result, "x");
  EXPECT_EQ(seen_by_done, "x");
  EXPECT_EQ(reader.in_flight(), 0u);
}

TEST(DeadlineReader, AHungReadingCostsOneDeadlineAndTheBoundsHold) {
  Reader reader({std::chrono::milliseconds(20), 2, 3});
  auto gate = std::make_shared<Gate>();
  auto answers = std::make_shared<Answers>();
  EXPECT_EQ(reader.get(1, id(1), 7, true, blocked(gate, "1"), to(answers)).outcome,
            Outcome::kTimedOut);
  // The same reading again: no second wait, with or without `wait`.
  EXPECT_EQ(reader.get(1, id(1), 7, true, blocked(gate, "1b"), to(answers)).outcome,
            Outcome::kGaveUp);
  EXPECT_EQ(reader.get(1, id(1), 7, false, blocked(gate, "1c"), to(answers)).outcome,
            Outcome::kGaveUp);
  EXPECT_EQ(reader.in_flight(), 1u);
  // User 7's second reading, then its bound; user 8 is not held by it; then everyone's bound.
  EXPECT_EQ(reader.get(2, id(2), 7, false, blocked(gate, "2"), to(answers)).outcome,
            Outcome::kUnderWay);
  const auto busy = reader.get(3, id(3), 7, true, blocked(gate, "3"), to(answers));
  EXPECT_EQ(busy.outcome, Outcome::kUserBusy);
  EXPECT_EQ(busy.busy, 2u);
  EXPECT_EQ(reader.get(4, id(4), 8, false, blocked(gate, "4"), to(answers)).outcome,
            Outcome::kUnderWay);
  EXPECT_EQ(reader.get(5, id(5), 9, false, blocked(gate, "5"), to(answers)).outcome,
            Outcome::kBusy);
  EXPECT_EQ(reader.in_flight(), 3u);
  // The filesystem answers: the readings end, each answer handed over.
  gate->open();
  answers->wait_for(3);
  wait_idle(reader);
  const auto again = reader.get(
      3, id(3), 7, true, [] { return std::make_shared<const std::string>("3"); }, to(answers));
  ASSERT_EQ(again.outcome, Outcome::kDone);
  EXPECT_EQ(*again.result, "3");
}

// A pid taken by a new process (another start time) gets a reading of its own.
TEST(DeadlineReader, ANewProcessWithTheSamePidIsReadAgain) {
  Reader reader({std::chrono::minutes(2), 4, 256});
  auto gate = std::make_shared<Gate>();
  auto answers = std::make_shared<Answers>();
  EXPECT_EQ(reader.get(1, id(1), 7, false, blocked(gate, "old"), to(answers)).outcome,
            Outcome::kUnderWay);
  EXPECT_EQ(reader.get(1, id(1), 7, false, blocked(gate, "old2"), to(answers)).outcome,
            Outcome::kUnderWay);
  EXPECT_EQ(reader.in_flight(), 1u);
  EXPECT_EQ(reader.get(1, id(2), 7, false, blocked(gate, "new"), to(answers)).outcome,
            Outcome::kUnderWay);
  EXPECT_EQ(reader.in_flight(), 2u);
  gate->open();
  answers->wait_for(2);
  wait_idle(reader);
}

// The reader goes (the mount ends) while a reading waits on a hung filesystem: the reading
// holds what it uses and ends later (ASan: no use after free).
TEST(DeadlineReader, AReadingOutlivesItsReader) {
  auto gate = std::make_shared<Gate>();
  auto answers = std::make_shared<Answers>();
  {
    Reader reader({std::chrono::milliseconds(1), 4, 256});
    EXPECT_EQ(reader.get(1, id(1), 7, true, blocked(gate, "late"), to(answers)).outcome,
              Outcome::kTimedOut);
  }
  gate->open();
  answers->wait_for(1);
  EXPECT_EQ(answers->last(), "late");
}

}  // namespace
}  // namespace whfs::target
