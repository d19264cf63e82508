// EventWatcher: finishes the GPU ops whose results the host can see, once
// the device has run them. Internal to the threaded engine; see Note [GPU
// ops complete at launch] in threaded_engine.cc.
//
// A CUDA device's worker hands over an op it has launched together with an
// event recorded after it on the device's stream; the watcher's thread waits
// for the events in order and then calls `on_done(op, failure)`, with the
// error of a kernel that failed asynchronously, if any. The worker meanwhile
// goes on launching.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/device.h"
#include "core/error.h"

namespace tandem::engine {

struct OpRecord;

class EventWatcher {
 public:
  using OnDone = std::function<void(OpRecord*, std::shared_ptr<const Error>)>;

  EventWatcher(Device device, OnDone on_done);
  ~EventWatcher();  // Joins the thread; nothing may be watched by then.
  EventWatcher(const EventWatcher&) = delete;
  EventWatcher& operator=(const EventWatcher&) = delete;

  // `event` is a CUDA event recorded after `op`'s work (core/cuda/runtime.h).
  void watch(OpRecord* op, void* event);

  // Joins the thread once the queue is empty, and starts it again: around
  // fork() (Note [Engines across fork] in threaded_engine.cc).
  void stop_thread();
  void start_thread();

 private:
  void work();

  const Device device_;
  const OnDone on_done_;
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::pair<OpRecord*, void*>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tandem::engine
