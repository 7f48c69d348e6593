#pragma once
// A process's files read on a thread of their own, which a request waits for at most a deadline.
// Every request for one process (its pid and identity) shares one reading. Each user has a bound
// on its readings under way, and everyone together another: threads stuck on a hung filesystem
// are few, and one user's cannot keep another's from being read. A reading whose requests gave
// up goes on; its answer is handed to `done` like any other. A reading holds what it uses, so
// the reader may be destroyed while one is under way (it is left behind, not waited for).

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "fs/targeting/caller.h"

namespace whfs::target {

template <class Result>
class DeadlineReader {
 public:
  struct Limits {
    std::chrono::milliseconds deadline{2000};
    std::size_t max_per_uid = 4;
    std::size_t max = 256;
  };

  enum class Outcome {
    kDone,      // `result` is the answer
    kUnderWay,  // not waited for (wait = false)
    kTimedOut,  // this request waited the deadline in vain
    kGaveUp,    // an earlier request for this reading did: this one did not wait again
    kUserBusy,  // not started: the user has `busy` readings under way
    kBusy,      // not started: everyone's bound
    kNoThread,  // not started: `why`
  };
  struct Answer {
    Outcome outcome = Outcome::kDone;
    std::shared_ptr<const Result> result;
    std::size_t busy = 0;
    std::string why;
  };

  using Read = std::function<std::shared_ptr<const Result>()>;
  using Done = std::function<void(const std::shared_ptr<const Result>&)>;

  explicit DeadlineReader(Limits limits) : state_(std::make_shared<State>(limits)) {}

  // The answer of the reading for process `pid` with `identity`, asked for by user `uid`: the
  // one under way for that very process, else `read` started on a thread of its own, whose
  // answer is handed to `done` on that thread before any request sees it. With `wait` the
  // request waits up to the deadline (a second request of the same reading, after one gave up,
  // does not wait: one deadline per reading); without, an answer only if it is there at once.
  Answer get(pid_t pid, const std::optional<ProcessIdentity>& identity, uid_t uid, bool wait,
             Read read, Done done) {
    State& s = *state_;
    std::unique_lock lock(s.mu);
    std::shared_ptr<Flight> flight;
    if (const auto it = s.flights.find(pid);
        it != s.flights.end() && it->second->identity == identity) {
      flight = it->second;
    } else {
      if (const std::size_t mine = s.count_of(uid); mine >= s.limits.max_per_uid) {
        return Answer{Outcome::kUserBusy, nullptr, mine, {}};
      }
      if (s.in_flight >= s.limits.max) return Answer{Outcome::kBusy, nullptr, s.in_flight, {}};
      flight = std::make_shared<Flight>();
      flight->identity = identity;
      s.flights[pid] = flight;
      ++s.per_uid[uid];
      ++s.in_flight;
      try {
        std::thread([state = state_, flight, pid, uid, read = std::move(read),
                     done = std::move(done)] {
          auto r = read();
          done(r);
          std::lock_guard l(state->mu);
          flight->result = std::move(r);
          state->end(pid, uid, flight);
          flight->finished.notify_all();
        }).detach();
      } catch (const std::system_error& e) {
        s.end(pid, uid, flight);
        return Answer{Outcome::kNoThread, nullptr, 0, e.what()};
      }
    }
    if (flight->gave_up) return Answer{Outcome::kGaveUp, nullptr, 0, {}};
    if (!wait) return Answer{Outcome::kUnderWay, nullptr, 0, {}};
    if (flight->finished.wait_for(lock, s.limits.deadline,
                                  [&] { return flight->result != nullptr; })) {
      return Answer{Outcome::kDone, flight->result, 0, {}};
    }
    flight->gave_up = true;
    return Answer{Outcome::kTimedOut, nullptr, 0, {}};
  }

  std::chrono::milliseconds deadline() const { return state_->limits.deadline; }

  // Readings under way, for everyone.
  std::size_t in_flight() const {
    std::lock_guard lock(state_->mu);
    return state_->in_flight;
  }

 private:
  struct Flight {
    std::optional<ProcessIdentity> identity;
    std::shared_ptr<const Result> result;  // set once, under the state's lock
    std::condition_variable finished;
    bool gave_up = false;
  };
  struct State {
    explicit State(Limits l) : limits(l) {}
    std::size_t count_of(uid_t uid) const {
      const auto it = per_uid.find(uid);
      return it == per_uid.end() ? 0 : it->second;
    }
    // Under mu: the reading of `pid` by `uid` is over.
    void end(pid_t pid, uid_t uid, const std::shared_ptr<Flight>& flight) {
      if (const auto f = flights.find(pid); f != flights.end() && f->second == flight) {
        flights.erase(f);
      }
      if (const auto it = per_uid.find(uid); it != per_uid.end() && --it->second == 0) {
        per_uid.erase(it);
      }
      --in_flight;
    }

    const Limits limits;
    mutable std::mutex mu;  // guards everything below and each flight's result and gave_up
    std::map<pid_t, std::shared_ptr<Flight>> flights;
    std::map<uid_t, std::size_t> per_uid;
    std::size_t in_flight = 0;
  };
  std::shared_ptr<State> state_;
};

}  // namespace whfs::target
