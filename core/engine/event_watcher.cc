#include "core/engine/event_watcher.h"

#include "core/cuda/runtime.h"
#include "core/engine/failure.h"
#include "core/engine/op_record.h"
#include "core/profiler.h"

namespace tandem::engine {

EventWatcher::EventWatcher(Device device, OnDone on_done)
    : device_(device), on_done_(std::move(on_done)) {
  start_thread();
}

EventWatcher::~EventWatcher() { stop_thread(); }

void EventWatcher::start_thread() {
  stopping_ = false;
  thread_ = std::thread([this] { work(); });
}

void EventWatcher::stop_thread() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EventWatcher::watch(OpRecord* op, void* event) {
  {
    std::lock_guard lock(mu_);
    queue_.emplace_back(op, event);
  }
  ready_.notify_one();
}

void EventWatcher::work() {
  profiler::set_thread_name(str_cat(device_.to_string(), " event watcher"));
  cuda::set_device(device_.index());
  for (;;) {
    std::pair<OpRecord*, void*> next;
    {
      std::unique_lock lock(mu_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // Stopping, and nothing left.
      next = queue_.front();
      queue_.pop_front();
    }
    auto [op, event] = next;
    std::shared_ptr<const Error> failure;
    try {
      cuda::wait_and_release_event(event);
    } catch (...) {
      failure = capture_failure(op->name, op->where);
    }
    on_done_(op, std::move(failure));
  }
}

}  // namespace tandem::engine
