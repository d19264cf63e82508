#include "core/engine/var.h"

#include <utility>

#include "core/engine/object_pool.h"
#include "core/engine/op_record.h"

namespace tandem::engine {

struct Var::Block {
  Block* next = nullptr;
  OpRecord* op = nullptr;
  bool write = false;
};

using BlockPool = ObjectPool<Var::Block>;

Var* Var::create(Device device, size_t new_bytes) {
  Var* var = ObjectPool<Var>::create();
  var->device_ = device;
  var->new_bytes_ = new_bytes;
  return var;
}

void Var::destroy(Var* var) { ObjectPool<Var>::destroy(var); }

Var::Var() : tail_(BlockPool::create()) {}

Var::~Var() { BlockPool::destroy(tail_); }

bool Var::append_read(OpRecord* op) {
  std::lock_guard lock(mu_);
  if (pending_write_ == nullptr) {
    ++running_reads_;
    return true;
  }
  Block* sentinel = BlockPool::create();
  tail_->op = op;
  tail_->write = false;
  tail_->next = sentinel;
  tail_ = sentinel;
  return false;
}

bool Var::append_write(OpRecord* op) {
  Block* sentinel = BlockPool::create();
  std::lock_guard lock(mu_);
  Block* block = tail_;
  block->op = op;
  block->write = true;
  block->next = sentinel;
  tail_ = sentinel;
  op->bytes += static_cast<int64_t>(std::exchange(new_bytes_, 0));
  if (pending_write_ != nullptr) return false;
  pending_write_ = block;
  if (running_reads_ != 0) return false;
  running_reads_ = kWriteRunning;
  return true;
}

bool Var::try_claim_read() {
  std::lock_guard lock(mu_);
  if (pending_write_ != nullptr) return false;
  ++running_reads_;
  return true;
}

bool Var::try_claim_write() {
  std::lock_guard lock(mu_);
  if (pending_write_ != nullptr || running_reads_ != 0) return false;
  new_bytes_ = 0;  // Written now, so no longer in flight.
  // A running write is a block of its own, as if appended by append_write;
  // it has no op, and complete_write never looks for one.
  Block* sentinel = BlockPool::create();
  pending_write_ = tail_;
  pending_write_->write = true;
  pending_write_->next = sentinel;
  tail_ = sentinel;
  running_reads_ = kWriteRunning;
  return true;
}

void Var::complete_read(ReadyOps& ready) {
  OpRecord* write = nullptr;
  {
    std::lock_guard lock(mu_);
    if (--running_reads_ == 0 && pending_write_ != nullptr) {
      running_reads_ = kWriteRunning;
      write = pending_write_->op;
    }
  }
  if (write && write->unblock()) ready.push_back(write);
}

bool Var::complete_write(ReadyOps& ready) {
  // Ops to start, collected under the lock and released after it.
  absl::InlinedVector<OpRecord*, 8> started;
  Block* finished;
  Block* next_write;
  {
    std::lock_guard lock(mu_);
    finished = pending_write_;
    if (to_delete_) {
      // The deletion op was the last op on this var; nothing can follow it.
      pending_write_ = nullptr;
      running_reads_ = 0;
    } else {
      Block* block = finished->next;
      int reads = 0;
      for (; block != tail_ && !block->write; block = block->next) {
        started.push_back(block->op);
        ++reads;
      }
      if (block == tail_) {
        pending_write_ = nullptr;
        running_reads_ = reads;
      } else {
        pending_write_ = block;
        running_reads_ = reads;
        if (reads == 0) {
          running_reads_ = kWriteRunning;
          started.push_back(block->op);
        }
      }
    }
    next_write = pending_write_ ? pending_write_ : tail_;
  }
  // Blocks from the finished write up to the next write (or the sentinel) are
  // no longer reachable by anyone else.
  for (Block* block = finished; block != next_write;) {
    Block* next = block->next;
    BlockPool::destroy(block);
    block = next;
  }
  if (to_delete_) {
    destroy(this);
    return true;
  }
  for (OpRecord* op : started) {
    if (op->unblock()) ready.push_back(op);
  }
  return false;
}

bool Var::readable_now() {
  std::lock_guard lock(mu_);
  return pending_write_ == nullptr;
}

bool Var::idle() {
  std::lock_guard lock(mu_);
  return pending_write_ == nullptr && running_reads_ == 0;
}

}  // namespace tandem::engine
