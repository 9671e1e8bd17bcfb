// SPDX-License-Identifier: Apache-2.0
// Registry<T>: the one name -> entry table behind every extension point of tandem (stage kinds,
// planners, KV policies, CNN device runners, ...). Entries are added once, by a static
// Registration in the file that implements them or by an explicit call, and looked up by name; an
// unknown name raises InvalidArgument listing what is registered, so a typo on the command line
// tells the user the choices.
//
//   Registry<StageFactory>& stage_kinds();          // one accessor per registry, in its .cpp
//   static Registration reg(stage_kinds(), "sched.identity", make_identity);
//   StageFactory f = stage_kinds().get("sched.identity");
//
// Keep each registry behind a function-local static in one .cpp of the library (as above), so
// it exists before the first static Registration of any other file runs.
// Thread-safety: every member may be called concurrently; get() returns a copy.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/error.h"

namespace tandem {

template <class T>
class Registry {
 public:
  // `what` names an entry in messages: "stage kind", "planner".
  explicit Registry(std::string what) : what_(std::move(what)) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // InvalidArgument for an empty or repeated name.
  void add(const std::string& name, T entry) {
    if (name.empty()) throw InvalidArgument(what_ + " registry: empty name");
    std::lock_guard lock(mutex_);
    if (!entries_.emplace(name, std::move(entry)).second)
      throw InvalidArgument(what_ + " '" + name + "' is registered twice");
  }

  // InvalidArgument "unknown <what> 'name' (registered: a, b)" when absent.
  T get(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end())
      throw InvalidArgument("unknown " + what_ + " '" + name + "' (registered: " + list() + ")");
    return it->second;
  }

  bool contains(const std::string& name) const {
    std::lock_guard lock(mutex_);
    return entries_.count(name) != 0;
  }

  std::vector<std::string> names() const {  // sorted
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, entry] : entries_) out.push_back(name);
    return out;
  }

  std::vector<std::pair<std::string, T>> entries() const {  // sorted by name
    std::lock_guard lock(mutex_);
    return {entries_.begin(), entries_.end()};
  }

  const std::string& what() const { return what_; }

 private:
  std::string list() const {  // callers hold mutex_
    std::string s;
    for (const auto& [name, entry] : entries_) s += (s.empty() ? "" : ", ") + name;
    return s.empty() ? "none" : s;
  }

  std::string what_;
  mutable std::mutex mutex_;
  std::map<std::string, T> entries_;
};

// Adds an entry when constructed: `static Registration reg(registry, "name", entry);`.
struct Registration {
  template <class T, class U>
  Registration(Registry<T>& registry, const std::string& name, U&& entry) {
    registry.add(name, T(std::forward<U>(entry)));
  }
};

}  // namespace tandem
