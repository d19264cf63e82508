// The collective ops' rows, in a world of one: a loopback communicator
// (every collective of one rank returns its input) installed as group 0,
// which finishes each collective on a thread of its own, later, as MPI's
// communication thread does, so the rows also run the ops' path through
// the engine's deferral (Note [Ops that finish later]). The collectives
// across real processes are tested in tests/distributed/ under mpirun.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "kernels/communicator.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

class LoopbackCommunicator final : public Communicator {
 public:
  LoopbackCommunicator() : thread_([this] { loop(); }) {}
  ~LoopbackCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      wake_.notify_one();
    }
    thread_.join();
  }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void start(CollectiveCall call, engine::Completion done) override {
    std::lock_guard lock(mu_);
    queue_.push_back({std::move(call), std::move(done)});
    wake_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      std::pair<CollectiveCall, engine::Completion> next;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      const CollectiveCall& call = next.first;
      if (call.kind != CollectiveKind::kBarrier && call.input.nbytes() != 0) {
        std::memcpy(call.output.raw_data(), call.input.raw_data(), call.input.nbytes());
      }
      next.second();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<CollectiveCall, engine::Completion>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

const bool installed = [] {
  install_communicator(0, std::make_shared<LoopbackCommunicator>());
  return true;
}();

OpTestCase identity_row(std::string op, std::string name, Tensor x, Attrs attrs,
                        Shape expected_shape) {
  return {.name = std::move(name),
          .op = std::move(op),
          .inputs = {x},
          .attrs = std::move(attrs),
          .reference =
              [expected_shape](const Inputs& in) {
                return std::vector<Tensor>{result(values_of(in[0]), expected_shape, in[0].dtype())};
              },
          .check_gradient = false};
}

TANDEM_OP_TEST_ROWS(collective) {
  std::vector<OpTestCase> rows;
  const Tensor x = random_tensor({2, 3}, 1);
  const Tensor ints = tensor_of({3, -2, 5, 7}, {4}, DType::kInt64);
  for (const char* reduction : {"sum", "mean", "max", "min"}) {
    rows.push_back(
        identity_row("all_reduce", reduction, x, {{"reduction", std::string(reduction)}}, {2, 3}));
  }
  rows.push_back(identity_row("all_reduce", "int64", ints, {}, {4}));
  rows.push_back(identity_row("all_reduce", "empty", random_tensor({0, 3}, 2), {}, {0, 3}));
  rows.push_back(identity_row("broadcast", "root0", x, {{"root", int64_t{0}}}, {2, 3}));
  rows.push_back(identity_row("broadcast", "int64", ints, {}, {4}));
  rows.push_back(identity_row("all_gather", "matrix", x, {}, {2, 3}));
  rows.push_back(identity_row("all_gather", "scalar", tensor_of({4}, {}), {}, {1}));
  rows.push_back(identity_row("reduce_scatter", "vector", ints, {}, {4}));
  rows.push_back(
      identity_row("reduce_scatter", "max", x, {{"reduction", std::string("max")}}, {2, 3}));
  return rows;
}

}  // namespace
}  // namespace tandem::kernels::testing
