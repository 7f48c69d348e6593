#pragma once
// A cache shared out among users: each entry belongs to a user, each user has a bound on its
// entries, and everyone together another, so that no user can push everyone else's entries out.
// An entry is fresh for `fresh_for` after it was put; what goes first when a bound is reached is
// the stale ones. Not locked: its owner guards it.

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <utility>

#include "fs/common/clock.h"

namespace whfs::target {

template <class Key, class Value>
class UserCache {
 public:
  struct Entry {
    Value value;
    uid_t uid = 0;
    Clock::time_point at;  // when it was put
  };

  UserCache(std::size_t max, std::size_t max_per_uid, Clock::duration fresh_for)
      : max_(max), max_per_uid_(max_per_uid), fresh_for_(fresh_for) {}

  const Entry* find(const Key& key) const {
    const auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Puts `value` for `key` in place of its entry, as user `uid`'s. A user at its bound first
  // loses its own stale entries, then (still at it) its oldest; at the bound for everyone, the
  // stale entries of all go, then (still at it) every entry.
  void put(const Key& key, uid_t uid, Value value, Clock::time_point now) {
    erase(key);
    if (count_of(uid) >= max_per_uid_) {
      drop_if([&](const Entry& e) { return e.uid == uid && now - e.at >= fresh_for_; });
      if (count_of(uid) >= max_per_uid_) {
        auto oldest = entries_.end();
        for (auto it = entries_.begin(); it != entries_.end(); ++it) {
          if (it->second.uid == uid &&
              (oldest == entries_.end() || it->second.at < oldest->second.at)) {
            oldest = it;
          }
        }
        if (oldest != entries_.end()) erase(oldest->first);
      }
    }
    if (entries_.size() >= max_) {
      drop_if([&](const Entry& e) { return now - e.at >= fresh_for_; });
      if (entries_.size() >= max_) clear();
    }
    entries_.insert_or_assign(key, Entry{std::move(value), uid, now});
    ++per_uid_[uid];
  }

  bool erase(const Key& key) {
    const auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    uncount(it->second.uid);
    entries_.erase(it);
    return true;
  }

  void clear() {
    entries_.clear();
    per_uid_.clear();
  }

  std::size_t size() const { return entries_.size(); }
  std::size_t count_of(uid_t uid) const {
    const auto it = per_uid_.find(uid);
    return it == per_uid_.end() ? 0 : it->second;
  }

  // Whether some entry's value satisfies `pred`.
  template <class Pred>
  bool any_of(Pred pred) const {
    return std::any_of(entries_.begin(), entries_.end(),
                       [&](const auto& kv) { return pred(kv.second.value); });
  }

 private:
  template <class Pred>
  void drop_if(Pred pred) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (pred(it->second)) {
        uncount(it->second.uid);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void uncount(uid_t uid) {
    const auto it = per_uid_.find(uid);
    if (it != per_uid_.end() && --it->second == 0) per_uid_.erase(it);
  }

  const std::size_t max_;
  const std::size_t max_per_uid_;
  const Clock::duration fresh_for_;
  std::map<Key, Entry> entries_;
  std::map<uid_t, std::size_t> per_uid_;  // entries of each user
};

}  // namespace whfs::target
