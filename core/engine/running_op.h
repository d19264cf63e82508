// Which op, if any, the current thread is running. Internal to the engines.
//
// An op that waits for other ops (engine.wait() or reading a tensor's value
// inside a kernel) can deadlock the threaded engine: it holds a worker while
// waiting for work that may need that very worker. Both engines refuse such
// a wait with a tandem::Error naming the op, so the mistake shows up the same
// way, at once, whichever engine runs the program.
#pragma once

namespace tandem::engine {

class RunningOpScope {
 public:
  explicit RunningOpScope(const char* op);
  ~RunningOpScope();
  RunningOpScope(const RunningOpScope&) = delete;
  RunningOpScope& operator=(const RunningOpScope&) = delete;

 private:
  const char* previous_;
};

// Throws tandem::Error if this thread is inside an op; `what` names the call.
void refuse_wait_inside_op(const char* what);

// True while this thread runs an op.
bool inside_op();

}  // namespace tandem::engine
