// Where a tensor lives and where an op runs: the CPU, or CUDA device N.
//
//   tandem::Device d = tandem::Device::parse("cuda:1");
//   d.is_cuda();       // true
//   d.to_string();     // "cuda:1"
//   tandem::Device::cpu() == tandem::Device::parse("cpu");  // true
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

enum class DeviceType : uint8_t { kCPU, kCUDA };

class Device {
 public:
  constexpr Device() = default;  // The CPU.
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}

  static constexpr Device cpu() { return Device(); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::kCUDA, index); }
  // "cpu", "cuda", "cuda:N"; throws tandem::Error on anything else.
  static Device parse(std::string_view text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::kCPU; }
  bool is_cuda() const { return type_ == DeviceType::kCUDA; }
  std::string to_string() const;

  friend constexpr bool operator==(Device a, Device b) = default;

 private:
  DeviceType type_ = DeviceType::kCPU;
  int index_ = 0;
};

// The number of CUDA devices this process can use: 0 when Tandem was built
// without CUDA or when the machine has no GPU (never an error).
int cuda_device_count();

}  // namespace tandem
