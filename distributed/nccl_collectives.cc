#include "distributed/nccl_collectives.h"

#include <dlfcn.h>
#include <nccl.h>

#include <mutex>
#include <string>
#include <type_traits>

#include "core/error.h"

#include "distributed/mpi_communicator.h"

namespace tandem::distributed {
namespace {

// NCCL, opened when the first GPU collective runs, as cuBLAS is (Note
// [cuBLAS on demand] in kernels/cuda/cublas_on_demand.cc): a CPU-only
// program never loads it, and a machine without it gets an Error naming it
// from the collective that needed it.
#define TANDEM_SONAME(major) "libnccl.so." #major
#define TANDEM_SONAME_OF(major) TANDEM_SONAME(major)
constexpr const char* kLibrary = TANDEM_SONAME_OF(NCCL_MAJOR);
#undef TANDEM_SONAME_OF
#undef TANDEM_SONAME

struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclAllReduce) all_reduce;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclReduceScatter) reduce_scatter;
  decltype(&ncclGetErrorString) error_string;
};

const Nccl& nccl() {
  static const Nccl functions = [] {
    // Never closed: the communicators made from it live as long as the
    // process (Note [Library handles] in kernels/cuda/handles.cc).
    void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    TANDEM_CHECK(library != nullptr, "cannot load NCCL (", kLibrary, "): ", dlerror());
    // The types only (decltype does not use the function): NCCL is not
    // linked, so naming its functions in code would leave undefined
    // references in a build that does not optimize them away.
    auto resolve = [&]<class Fn>(std::type_identity<Fn>, const char* name) {
      void* symbol = dlsym(library, name);
      TANDEM_CHECK(symbol != nullptr, "NCCL (", kLibrary, ") has no function ", name);
      return reinterpret_cast<Fn>(symbol);
    };
#define TANDEM_NCCL_FUNCTION(name) resolve(std::type_identity<decltype(&name)>{}, #name)
    return Nccl{
        .get_unique_id = TANDEM_NCCL_FUNCTION(ncclGetUniqueId),
        .comm_init_rank = TANDEM_NCCL_FUNCTION(ncclCommInitRank),
        .all_reduce = TANDEM_NCCL_FUNCTION(ncclAllReduce),
        .broadcast = TANDEM_NCCL_FUNCTION(ncclBroadcast),
        .all_gather = TANDEM_NCCL_FUNCTION(ncclAllGather),
        .reduce_scatter = TANDEM_NCCL_FUNCTION(ncclReduceScatter),
        .error_string = TANDEM_NCCL_FUNCTION(ncclGetErrorString),
    };
#undef TANDEM_NCCL_FUNCTION
  }();
  return functions;
}

void check(ncclResult_t result, std::string_view what, int group) {
  TANDEM_CHECK(result == ncclSuccess, what, " of process group ", group,
               " failed in NCCL: ", nccl().error_string(result));
}

// NCCL's type for a reduction's elements; other dtypes travel as bytes.
ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    default:
      return ncclUint8;
  }
}

ncclRedOp_t nccl_op(kernels::Reduction reduction) {
  switch (reduction) {
    case kernels::Reduction::kSum:
      return ncclSum;
    case kernels::Reduction::kMean:
      return ncclAvg;
    case kernels::Reduction::kMax:
      return ncclMax;
    case kernels::Reduction::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// Elements, or bytes where the dtype travels as bytes.
size_t count_of(const Tensor& t, ncclDataType_t type) {
  const bool as_bytes = type == ncclUint8 && t.dtype() != DType::kUInt8;
  return as_bytes ? t.nbytes() : static_cast<size_t>(t.numel());
}

}  // namespace

struct NcclCollectives::State {
  MPI_Comm bootstrap = MPI_COMM_NULL;  // For the unique id; the GPU worker's alone.
  int group = 0;
  int rank = 0;
  int size = 1;
  std::mutex mu;  // Guards the three below: workers of two devices may race to start.
  int device = -1;
  ncclComm_t comm = nullptr;
  std::string failed;  // Why starting failed: every later call fails alike.

  // The group's NCCL communicator on `device`, started at the first call.
  ncclComm_t communicator(int on_device) {
    std::lock_guard lock(mu);
    // A start that failed on some ranks cannot be retried: the others would
    // not take part in the retry's broadcast.
    TANDEM_CHECK(failed.empty(), failed);
    if (comm != nullptr) {
      TANDEM_CHECK(on_device == device, "process group ", group,
                   " has its GPU collectives on cuda:", device,
                   "; this rank cannot also use cuda:", on_device, " (one device per rank)");
      return comm;
    }
    try {
      ncclUniqueId id{};
      if (rank == 0) check(nccl().get_unique_id(&id), "ncclGetUniqueId", group);
      const int code = MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, bootstrap);
      TANDEM_CHECK(code == MPI_SUCCESS, "process group ", group,
                   ": handing out NCCL's unique id failed in MPI: ", mpi_error_text(code));
      // On the device's worker, whose current device is `on_device`.
      check(nccl().comm_init_rank(&comm, size, id, rank), "starting NCCL", group);
    } catch (const Error& e) {
      failed = e.message();
      throw;
    }
    device = on_device;
    return comm;
  }
};

NcclCollectives::NcclCollectives(MPI_Comm group, int group_id) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.group = group_id;
  const int code = MPI_Comm_dup(group, &s.bootstrap);
  TANDEM_CHECK(code == MPI_SUCCESS, "MPI_Comm_dup failed for process group ", group_id, ": ",
               mpi_error_text(code));
  MPI_Comm_set_errhandler(s.bootstrap, MPI_ERRORS_RETURN);
  MPI_Comm_rank(s.bootstrap, &s.rank);
  MPI_Comm_size(s.bootstrap, &s.size);
}

NcclCollectives::~NcclCollectives() = default;

void NcclCollectives::stop() {
  // The NCCL communicator is left to the process's end, as the library
  // handles are: at exit the driver may be gone before it could be ended.
  if (state_->bootstrap != MPI_COMM_NULL) MPI_Comm_free(&state_->bootstrap);
}

void NcclCollectives::launch(const kernels::CollectiveCall& call, int device, void* stream) {
  State& s = *state_;
  // Nothing to exchange (every rank has the same shapes, so all skip it).
  if (call.input.numel() == 0 || call.output.numel() == 0) return;
  ncclComm_t comm = s.communicator(device);
  auto* on = static_cast<cudaStream_t>(stream);
  const ncclDataType_t type = nccl_type(call.input.dtype());
  const void* in = call.input.raw_data();
  void* out = call.output.raw_data();
  const std::string_view name = kernels::collective_name(call.kind);
  switch (call.kind) {
    case kernels::CollectiveKind::kAllReduce:
      check(nccl().all_reduce(in, out, count_of(call.input, type), type, nccl_op(call.reduction),
                              comm, on),
            name, s.group);
      return;
    case kernels::CollectiveKind::kBroadcast:
      check(nccl().broadcast(in, out, count_of(call.output, type), type, call.root, comm, on), name,
            s.group);
      return;
    case kernels::CollectiveKind::kAllGather:
      check(nccl().all_gather(in, out, count_of(call.input, type), type, comm, on), name, s.group);
      return;
    case kernels::CollectiveKind::kReduceScatter:
      check(nccl().reduce_scatter(in, out, count_of(call.output, type), type,
                                  nccl_op(call.reduction), comm, on),
            name, s.group);
      return;
    case kernels::CollectiveKind::kBarrier:
      break;
  }
  TANDEM_CHECK(false, name, " has no GPU form; a barrier waits on the CPU");
}

}  // namespace tandem::distributed
